"""``openai:URL[#MODEL]``: an agent behind an OpenAI-compatible chat endpoint.

Typically memtap's own chat proxy (``memtap serve --config FILE`` with ``memory: auto``) in
front of a model, so the agent's memory calls are memtap's automatic ones, recorded in the
trace. ``URL`` is the API base (``http://HOST:PORT/v1``); ``MODEL`` the model alias to call
(default: the first one ``URL/models`` lists). The bearer key is ``OPENAI_API_KEY`` when set
(memtap without API keys accepts any).

**Turns.** Each session is a conversation. A turn of the user, a third party, a tool or the
system is one chat call: the session's conversation so far, then the turn as a ``user``
message whose ``name`` is the speaker, with ``X-Memtap-Namespace``, ``-Run``, ``-Episode``,
``-Session``, ``-Turn`` and ``-Role`` (the turn's own role: the chat and its search are recorded
as ``third_party`` for a third party's words; memtap's ``auto`` capture still stores the message
as a ``user`` memory) headers and ``user`` = the namespace. The agent's reply is not
kept: an assistant turn of the suite is not sent on its own but becomes the conversation's
next assistant message, so the agent sees the dialogue the suite wrote. Before each call the
turn is marked on the replay clock (``POST /v1/memtap/replay/mark``, when the endpoint has one),
so memory calls the agent makes on its own are attributed to it.

**Probes.** A probe is a chat call of its own (session ``probes``, turn the probe's id, the
requester in ``X-Memtap-Requester``: the episode's namespace for the suite's namespace owner, who
owns what was stored there, as on the ``mcp:`` target; and the requester's own name in
``name``): one user message, the question. The reply
is :attr:`ProbeResult.reply`. What was retrieved is read from the trace: when the endpoint is
memtap writing to the run's database (its ``/healthz`` names the database), the retrieve
effects of the memory calls recorded in the probe's session and turn, in rank order; they
appear once the recorder commits them (waited on, up to ``TRACE_WAIT_S``). Anything else (an
agent that is not memtap, or a memtap writing elsewhere) gives an empty retrieval and the
describe record says so; the scorer reads retrievals from the trace in any case.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from memtap.errors import ConfigError
from memtap.probes.targets.base import EpisodeScope, ProbeCall, ProbeResult, Retrieved, TargetError, TurnCall

__all__ = ["TRACE_WAIT_S", "OpenAITarget"]

TRACE_WAIT_S = 10.0
MARK_PATH = "/v1/memtap/replay/mark"
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def _name(speaker: str) -> str:
    return _NAME.sub("_", speaker)[:64] or "speaker"


class OpenAITarget:
    name = "openai"

    def __init__(self, spec: str, db: Path, *, api_key: str | None = None) -> None:
        url, _, model = spec[len("openai:") :].partition("#")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--target {spec}: give the API base URL, e.g. openai:http://127.0.0.1:8000/v1")
        self.base = url.rstrip("/")
        self.root = self.base.removesuffix("/v1")
        self.model = model or None
        self.db = db
        # The endpoint's key: OPENAI_API_KEY, as OpenAI clients read it (memtap without keys takes any).
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "memtap-replay"
        self.session: Any = None
        self.clock = True  # until the endpoint says it has no replay clock
        self.trace_db: Path | None = None  # set when the endpoint is memtap writing to self.db
        self._history: dict[tuple[str, str], list[dict[str, Any]]] = {}

    async def start(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.api_key}"}, timeout=aiohttp.ClientTimeout(total=120)
        )
        try:
            async with self.session.get(f"{self.base}/models") as resp:
                listed = await resp.json(content_type=None) if resp.status == 200 else {}
        except aiohttp.ClientError as exc:
            raise TargetError(f"no OpenAI-compatible endpoint answers at {self.base}: {exc}") from None
        models = [m.get("id") for m in (listed or {}).get("data") or [] if isinstance(m, dict)]
        if self.model is None:
            if not models:
                raise TargetError(f"{self.base}/models lists no model; name one: openai:{self.base}#MODEL")
            self.model = str(models[0])
        elif models and self.model not in models:
            raise TargetError(
                f"{self.base} has no model {self.model!r} (it has {', '.join(map(str, models))})"
            )
        try:
            async with self.session.get(f"{self.root}/healthz") as resp:
                health = await resp.json(content_type=None) if resp.status == 200 else {}
        except (aiohttp.ClientError, ValueError):
            health = {}
        served = health.get("db") if isinstance(health, dict) else None
        if served is not None and Path(served).resolve() == self.db.resolve():
            self.trace_db = self.db

    def describe(self) -> dict[str, Any]:
        return {
            "target": "openai",
            "url": self.base,
            "model": self.model,
            "replay_clock": self.clock,
            "retrieval": "from the trace"
            if self.trace_db is not None
            else "not known (endpoint writes elsewhere)",
        }

    async def open_episode(self, scope: EpisodeScope) -> None:
        if self.session is None:
            raise TargetError("start() first")

    def _headers(self, scope: EpisodeScope, session: str, turn: str, role: str) -> dict[str, str]:
        return {
            "X-Memtap-Namespace": scope.namespace,
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Session": session,
            "X-Memtap-Turn": turn,
            "X-Memtap-Role": role,
        }

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None:
        if not self.clock:
            return
        body = {
            "namespace": scope.namespace,
            "run": scope.run,
            "episode": scope.episode,
            "session": turn.session,
            "turn": turn.turn,
            "role": turn.role,
        }
        async with self.session.post(f"{self.root}{MARK_PATH}", json=body) as resp:
            if resp.status in (404, 405):
                self.clock = False  # not memtap: the agent's calls carry no turn of their own to attribute
            elif resp.status >= 400:
                raise TargetError(f"replay mark refused ({resp.status}): {(await resp.text())[:300]}")

    async def _chat(self, messages: list[dict[str, Any]], headers: dict[str, str], user: str) -> str:
        body = {"model": self.model, "messages": messages, "user": user}
        async with self.session.post(f"{self.base}/chat/completions", json=body, headers=headers) as resp:
            data = await resp.json(content_type=None)
            if resp.status >= 400:
                error = data.get("error") if isinstance(data, dict) else None
                message = error.get("message") if isinstance(error, dict) else str(data)[:300]
                raise TargetError(f"chat call failed ({resp.status}): {message}")
        try:
            return str(data["choices"][0]["message"].get("content") or "")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise TargetError("chat reply without choices[0].message") from None

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None:
        history = self._history.setdefault((scope.namespace, turn.session), [])
        if not turn.content.strip():
            return
        if turn.role == "assistant":
            history.append({"role": "assistant", "content": turn.content})
            return
        message = {"role": "user", "content": turn.content, "name": _name(turn.speaker)}
        headers = self._headers(scope, turn.session, turn.turn, turn.role)
        await self._chat([*history, message], headers, scope.namespace)
        history.append(message)

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult:
        # The suite's namespace owner asks as the episode's namespace, which owns what the agent
        # stored there (memtap tags a memory with its namespace as owner, and a chat's ``user``
        # names that namespace): as the mcp: target asks, so their own memories are no leak.
        requester = scope.namespace if probe.requester == scope.owner else probe.requester
        headers = {
            **self._headers(scope, "probes", probe.probe_id, "user"),
            "X-Memtap-Requester": requester,
        }
        message = {"role": "user", "content": probe.question, "name": _name(probe.requester)}
        started = time.perf_counter()
        reply = await self._chat([message], headers, scope.namespace)
        elapsed = (time.perf_counter() - started) * 1000
        retrieved = await self._retrieved(scope, probe.probe_id, limit) if self.trace_db is not None else []
        return ProbeResult(retrieved, elapsed, reply=reply)

    async def _retrieved(self, scope: EpisodeScope, probe_id: str, limit: int) -> list[Retrieved]:
        """The retrieve effects recorded for the probe's chat, once its chat event is committed."""
        deadline = time.monotonic() + TRACE_WAIT_S
        while True:
            rows, chat_seen = await anyio.to_thread.run_sync(self._read_trace, scope, probe_id)
            if chat_seen or time.monotonic() > deadline:
                break
            await anyio.sleep(0.02)  # the recorder commits in batches a few milliseconds apart
        seen: dict[str, Retrieved] = {}
        for item_id, content, _rank, score in rows:  # rows come in rank order
            if item_id not in seen:
                seen[item_id] = Retrieved(item_id, content or "", len(seen) + 1, score)
        return list(seen.values())[:limit]

    def _read_trace(self, scope: EpisodeScope, probe_id: str) -> tuple[list[tuple[Any, ...]], bool]:
        assert self.trace_db is not None
        conn = sqlite3.connect(f"file:{self.trace_db}?mode=ro", uri=True, timeout=10)
        try:
            where = "e.namespace = ? AND e.run_id = ? AND e.session = 'probes' AND e.turn = ?"
            args = [scope.namespace, scope.run, probe_id]
            chat = conn.execute(
                f"SELECT 1 FROM events e WHERE {where} AND e.op = 'chat' LIMIT 1", args
            ).fetchone()
            rows = conn.execute(
                "SELECT f.item_id, f.content_after, f.rank, f.score FROM events e"
                f" JOIN effects f ON f.event_id = e.id"
                f" WHERE {where} AND e.op = 'retrieve' AND f.kind = 'retrieve' ORDER BY e.started_at, f.rank",
                args,
            ).fetchall()
        finally:
            conn.close()
        return rows, chat is not None

    async def close_episode(self, scope: EpisodeScope) -> None:
        for key in [k for k in self._history if k[0] == scope.namespace]:
            del self._history[key]
        if self.clock and self.session is not None:
            url = f"{self.root}{MARK_PATH}"
            async with self.session.delete(url, params={"namespace": scope.namespace}) as resp:
                await resp.read()

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
