"""The replay clock: which turn a replay is playing, so an agent's own memory calls are attributed.

A replay driver posts a mark before it plays each turn::

    POST /v1/memtap/replay/mark
    {"namespace": "run-1/ep-3/1", "run": "run-1", "episode": "ep-3", "session": "s4", "turn": "s4-t2",
     "role": "user"}

and clears it when the episode ends (``DELETE /v1/memtap/replay/mark?namespace=...``). A memory
call that arrives through any front door without a turn of its own (no ``turn`` in its
arguments, ``_meta`` or ``X-Memtap-Turn``) is attributed to the mark for its namespace:
the mark fills ``run``, ``episode``, ``session``, ``turn`` and ``role`` where the call left them
empty; what the call says itself always wins. A mark names exactly one key: the namespace
(what a replay uses: a fresh namespace per episode, so parallel episodes never share a mark),
else the run, else the caller's principal; lookup tries them in that order.

Marks live in memory in the serving process: they are the replay's clock, not a record. The
events they attribute are the record.

Who may mark what (with keys configured): a mark keyed by namespace needs ``write`` on that
namespace (``read`` to look it up); a mark keyed by principal may name only the caller's own
principal; a mark keyed by run attributes only the calls of the principal that set it. A
refused mark is a ``403`` with a JSON error body and a recorded event (tool ``replay.mark``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.types import Receive, Scope, Send

from memtap.auth import Authentication, Caller, Policy, Right, local_caller
from memtap.auth.gate import Refusal
from memtap.errors import AccessDenied, AuthError, Forbidden
from memtap.limits import current, unencodable
from memtap.proxy.guard import RECORDED_SCOPE_KEY
from memtap.trace.calls import recorded_call
from memtap.trace.models import Context, Op, Role, utc_now
from memtap.trace.writer import Recorder

__all__ = ["MARK_PATH", "Mark", "ReplayClock", "mount_replay_clock"]

MARK_PATH = "/v1/memtap/replay/mark"
_FILLED = ("run", "episode", "session", "turn", "role")


class Mark(BaseModel):
    """The turn being played, and the key it is marked under."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(None, description="The episode's namespace (the key a replay uses)")
    run: str | None = None
    principal: str | None = Field(None, description="Key by caller principal, when nothing else names it")
    episode: str | None = None
    session: str | None = None
    turn: str | None = None
    role: Role | None = None

    @field_validator("namespace", "run", "principal", "episode", "session", "turn")
    @classmethod
    def _bounded_text(cls, value: str | None) -> str | None:
        if value is not None:
            cap = current().max_field_chars
            if len(value) > cap:
                raise ValueError(f"{len(value)} characters; the limit is {cap} (--max-field-chars)")
            if unencodable(value):
                raise ValueError("not valid UTF-8 text (it holds an unpaired surrogate)")
        return value

    @model_validator(mode="after")
    def _has_key(self) -> Mark:
        if not (self.namespace or self.run or self.principal):
            raise ValueError("a mark needs a namespace, a run or a principal to be found by")
        return self

    def key(self) -> tuple[str, str]:
        if self.namespace:
            return ("namespace", self.namespace)
        if self.run:
            return ("run", self.run)
        return ("principal", str(self.principal))


class MarkAnswer(BaseModel):
    """The mark as it is set (``set_at``: when, UTC) or found."""

    mark: dict[str, Any]


class Cleared(BaseModel):
    cleared: bool = Field(description="Whether there was a mark to clear")


_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or unknown API key (keys configured)"},
    403: {"description": "The key may not mark that namespace, run or principal (recorded)"},
}
_KEYS = {
    "parameters": [
        {"name": key, "in": "query", "required": False, "schema": {"type": "string"},
         "description": f"Name the mark by its {key} (give one of namespace, run, principal)"}
        for key in ("namespace", "run", "principal")
    ]
}  # fmt: skip
_BAD_KEY: dict[int | str, dict[str, Any]] = {
    422: {"description": "No ?namespace=, ?run= or ?principal= to name the mark by"}
}


@dataclass
class _Stamped:
    mark: Mark
    set_at: str
    monotonic: float
    set_by: Caller


class ReplayClock:
    """Current marks by key; thread-safe (the recorder's callers may be on other threads)."""

    def __init__(self) -> None:
        self._marks: dict[tuple[str, str], _Stamped] = {}
        self._lock = threading.Lock()
        self.attributed = 0

    def set(self, mark: Mark, caller: Caller | None = None) -> dict[str, Any]:
        stamped = _Stamped(mark, utc_now().isoformat(), time.monotonic(), caller or local_caller())
        with self._lock:
            self._marks[mark.key()] = stamped
        return {**mark.model_dump(exclude_none=True), "set_at": stamped.set_at}

    def get(self, kind: str, value: str) -> Mark | None:
        found = self.stamped(kind, value)
        return found.mark if found else None

    def stamped(self, kind: str, value: str) -> _Stamped | None:
        with self._lock:
            return self._marks.get((kind, value))

    def clear(self, kind: str, value: str) -> bool:
        with self._lock:
            return self._marks.pop((kind, value), None) is not None

    def attribute(self, context: Context) -> Context:
        """``context`` with the marked turn filled in, when it names no turn of its own."""
        if context.turn is not None or not self._marks:
            return context
        for kind, value in (
            ("namespace", context.namespace),
            ("run", context.run),
            ("principal", context.principal),
        ):
            stamped = self.stamped(kind, value) if value else None
            theirs = stamped is not None and stamped.set_by.restricted and kind != "namespace"
            if theirs and stamped is not None and stamped.set_by.principal != context.principal:
                continue  # a run or principal mark re-labels only its setter's own calls
            mark = stamped.mark if stamped is not None else None
            if mark is not None:
                updates = {
                    f: getattr(mark, f) for f in _FILLED if getattr(context, f) is None and getattr(mark, f)
                }
                if not updates:
                    return context
                with self._lock:
                    self.attributed += 1
                return context.model_copy(update=updates)
        return context


def _key_of(request: Request) -> tuple[str, str]:
    for kind in ("namespace", "run", "principal"):
        value = request.query_params.get(kind)
        if value:
            return kind, value
    raise HTTPException(422, "name the mark by ?namespace=, ?run= or ?principal=")


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


class _Refused(JSONResponse):
    """A refused credential answered by the process's refusal hook (as the gate answers it on
    every other front door: the RFC 6750 challenge, and the refusal recorded)."""

    def __init__(self, refusal: Refusal, error: AuthError) -> None:
        super().__init__({}, status_code=error.status)
        self.refusal, self.error = refusal, error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.refusal(scope, send, self.error)


def mount_replay_clock(
    app: FastAPI, clock: ReplayClock, authentication: Authentication, policy: Policy, recorder: Recorder
) -> ReplayClock:
    """Serve ``clock`` at :data:`MARK_PATH`, each request authenticated and authorised."""

    def authorise(caller: Caller, kind: str, value: str, right: Right) -> None:
        if not caller.restricted:
            return
        if kind == "namespace":
            policy.check(caller, value, right)
        elif kind == "principal" and value != caller.principal:
            raise Forbidden(
                f"principal {caller.principal!r} may not mark calls of principal {value!r}: "
                "a caller may re-label only its own calls"
            )
        elif kind == "run":
            found = clock.stamped(kind, value)
            if found is not None and found.set_by.restricted and found.set_by.principal != caller.principal:
                raise Forbidden(
                    f"principal {caller.principal!r} may not change the mark of run {value!r}: "
                    f"principal {found.set_by.principal!r} set it"
                )

    async def guarded(
        request: Request, method: str, arguments: dict[str, Any], keys: list[tuple[str, str]], right: Right
    ) -> Caller | JSONResponse:
        try:
            caller = authentication.authenticate(request.headers)
        except AuthError as exc:
            if authentication.on_refusal is not None:  # bearer JWTs: the challenge, and recorded
                return _Refused(authentication.on_refusal, exc)
            return _error(exc.status, str(exc), "authentication_error")
        try:
            for kind, value in keys:
                authorise(caller, kind, value, right)
        except AccessDenied as exc:
            named = dict(keys)
            async with recorded_call(
                recorder,
                tool="replay.mark",
                op=Op.CONTROL,
                front_door="http",
                backend="replay-clock",
                arguments={"method": method, **arguments},
                fallback_context=lambda: Context(
                    principal=caller.principal,
                    namespace=named.get("namespace") or caller.principal,
                    run=named.get("run"),
                ),
            ):
                raise
            request.scope[RECORDED_SCOPE_KEY] = True  # recorded here: the guard must not again
            return _error(403, str(exc), "permission_error")
        return caller

    @app.post(
        MARK_PATH, response_model=None, responses={200: {"model": MarkAnswer}, **_AUTH}, tags=["replay"]
    )
    async def set_mark(mark: Mark, request: Request) -> dict[str, Any] | JSONResponse:
        """Mark the turn being played; memory calls without a turn are attributed to it."""
        named = [(k, str(getattr(mark, k))) for k in ("namespace", "run", "principal") if getattr(mark, k)]
        found = await guarded(request, "POST", mark.model_dump(exclude_none=True), named, Right.WRITE)
        if isinstance(found, JSONResponse):
            return found
        return {"mark": clock.set(mark, found)}

    @app.get(
        MARK_PATH,
        response_model=None,
        responses={200: {"model": MarkAnswer}, 404: {"description": "No mark"}, **_AUTH, **_BAD_KEY},
        tags=["replay"],
        openapi_extra=_KEYS,
    )
    async def get_mark(request: Request) -> dict[str, Any] | JSONResponse:
        kind, value = _key_of(request)
        found = await guarded(request, "GET", {kind: value}, [(kind, value)], Right.READ)
        if isinstance(found, JSONResponse):
            return found
        mark = clock.get(kind, value)
        if mark is None:
            raise HTTPException(404, f"no mark for {kind} {value!r}")
        return {"mark": mark.model_dump(exclude_none=True)}

    @app.delete(
        MARK_PATH,
        response_model=None,
        responses={200: {"model": Cleared}, **_AUTH, **_BAD_KEY},
        tags=["replay"],
        openapi_extra=_KEYS,
    )
    async def clear_mark(request: Request) -> dict[str, Any] | JSONResponse:
        kind, value = _key_of(request)
        found = await guarded(request, "DELETE", {kind: value}, [(kind, value)], Right.WRITE)
        if isinstance(found, JSONResponse):
            return found
        return {"cleared": clock.clear(kind, value)}

    return clock
