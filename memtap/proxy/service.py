"""The memory service: one tool call in, one recorded event out.

Front doors turn their protocol into ``call_tool`` and its outcome back into
their protocol; they never touch the store. Every call, failed or not, passes
the recorder exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memtap.adapters.base import BackendResult, MemoryBackend
from memtap.auth import Caller, Policy, Right, best_context, default_requester, local_caller, resolve_context
from memtap.auth.grants import right_for
from memtap.auth.resolve import Clock
from memtap.errors import AccessDenied, BackendError, InvalidArguments, UnknownTool
from memtap.limits import check_arguments
from memtap.proxy.policy import GateMode, gate_retrieval, gate_stored
from memtap.proxy.tools import (
    BATCH_TOOL,
    CONTEXT_FIELDS,
    TOOLS,
    AccessArg,
    AddArgs,
    ContextArgs,
    DeleteArgs,
    GetArgs,
    HistoryArgs,
    ListArgs,
    SearchArgs,
    UpdateArgs,
    parse_arguments,
)
from memtap.trace.calls import CallRecord, recorded_call
from memtap.trace.models import AccessTags, Context, Op, Provenance
from memtap.trace.writer import Recorder

__all__ = ["DEFAULT_MAX_CONTENT_BYTES", "MemoryService", "ToolOutcome"]

DEFAULT_MAX_CONTENT_BYTES = 1 << 20


@dataclass
class ToolOutcome:
    value: Any
    is_error: bool = False
    event_id: str | None = None

    @property
    def error(self) -> str | None:
        return str(self.value.get("error")) if self.is_error and isinstance(self.value, dict) else None


class MemoryService:
    """Runs memory tool calls against one backend and records each one."""

    def __init__(
        self,
        backend: MemoryBackend,
        recorder: Recorder,
        *,
        gate: GateMode = GateMode.OBSERVE,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        policy: Policy | None = None,
        context_args: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.backend = backend
        self.recorder = recorder
        self.gate = gate
        self.max_content_bytes = max_content_bytes
        self.policy = policy or Policy()
        self.context_args = context_args
        self.clock = clock  # a replay's marked turn, filled into calls that name none

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        caller: Caller | None = None,
        principal: str | None = None,
        front_door: str,
        client: str | None = None,
        layers: tuple[Mapping[str, Any], ...] = (),
    ) -> ToolOutcome:
        """Run one tool call for ``caller`` (or a ``local`` caller named ``principal``);
        ``layers`` are the connection's context sources, weakest first (headers, _meta)."""
        who = caller if caller is not None else local_caller(principal or "local")
        if name == BATCH_TOOL:  # one memory_add call (and event) per item: memtap.proxy.batch
            from memtap.proxy.batch import add_batch

            return await add_batch(
                self, arguments, caller=who, front_door=front_door, client=client, layers=layers
            )
        args_in = dict(arguments or {})
        spec = TOOLS.get(name)
        async with recorded_call(
            self.recorder,
            tool=name,
            op=spec.op if spec else Op.CONTROL,
            front_door=front_door,
            backend=self.backend.name,
            arguments=args_in,
            fallback_context=lambda: best_context(
                who, layers=layers, arguments=args_in, client=client, clock=self.clock
            ),
        ) as call:
            if spec is None:
                raise UnknownTool(f"unknown tool {name!r}; this server offers: {', '.join(TOOLS)}")
            args = parse_arguments(spec, args_in)
            call.context = context = resolve_context(
                who,
                layers=layers,
                arguments={key: getattr(args, key) for key in CONTEXT_FIELDS},
                client=client,
                clock=self.clock,
                policy=self.policy,
                right=right_for(spec.op),
                context_args=self.context_args,
            )
            self._check_secrets(args_in, context)
            self._check_content(name, args)
            if isinstance(args, UpdateArgs) and args.access is not None and who.restricted:
                await self._check_retag(who, context, args.id)
            call.query = args.query if isinstance(args, SearchArgs) else None
            call.start_backend()
            result = await self._dispatch(args, context, call.id)
            call.end_backend()
            call.value, call.effects = result.value, result.effects
            self._gate(call, args, default_requester(self.policy, who, context))
        return ToolOutcome(call.value, is_error=call.error is not None, event_id=call.id)

    async def _check_retag(self, caller: Caller, context: Context, item_id: str) -> None:
        """Changing an item's access tags takes write (checked already) and, on an item the
        caller does not own (may not act for its owner), admin."""
        try:
            current = (await self.backend.get(context.namespace, item_id)).value
        except BackendError:
            return  # the update itself reports the missing item
        tags = current.get("tags") if isinstance(current, dict) else None
        owner = (tags or {}).get("owner") or context.namespace
        if not self.policy.may_act_for(caller, owner):
            self.policy.check(caller, context.namespace, Right.ADMIN)

    def _gate(self, call: CallRecord, args: ContextArgs, requester: str) -> None:
        """Judge what this call is about to disclose; in enforce mode, withhold or refuse."""
        item_id = ""
        if isinstance(args, SearchArgs):
            decision = gate_retrieval(self.gate, requester, call.effects)
            listed_key = "results"
        elif isinstance(args, ListArgs):
            decision = gate_stored(self.gate, requester, call.value["items"])
            listed_key = "items"
        elif isinstance(args, GetArgs):
            decision = gate_stored(self.gate, requester, [call.value])
            listed_key, item_id = "", args.id
        elif isinstance(args, HistoryArgs):
            versions = call.value["versions"]
            decision = gate_stored(self.gate, requester, [{"id": args.id, "tags": versions[-1].get("tags")}])
            listed_key, item_id = "", args.id
        else:
            return
        call.gate = decision.summary()
        withheld = decision.withheld
        if not withheld:
            return
        if not listed_key:
            raise AccessDenied(f"memory item {item_id!r} may not be disclosed to {requester!r}")
        call.effects = [eff for eff in call.effects if eff.item_id not in withheld]
        kept = [m for m in call.value[listed_key] if m["id"] not in withheld]
        call.value = {**call.value, listed_key: kept, "withheld": len(withheld)}

    def _check_secrets(self, arguments: Mapping[str, Any], context: Context) -> None:
        """memtap stores none of its own secrets: a call carrying one (in its arguments or its
        context, from headers or ``_meta``) is refused; the trace records it redacted."""
        privacy = self.recorder.privacy
        if privacy.secrets and privacy.contains_secret([arguments, context]):
            raise InvalidArguments(
                "the call carries one of memtap's configured secrets (an API key or an upstream "
                "credential); memtap does not store its own secrets"
            )

    def _check_content(self, tool: str, args: ContextArgs) -> None:
        """Content and query sizes, string lengths, metadata size and depth (memtap.limits)."""
        check_arguments(tool, args, max_content_bytes=self.max_content_bytes)

    async def _dispatch(self, args: ContextArgs, ctx: Context, event_id: str) -> BackendResult:
        backend, ns = self.backend, ctx.namespace
        # Reads carry no provenance: build it only for the writes (a pydantic model per call).
        if isinstance(args, SearchArgs):
            return await backend.search(ns, args.query, limit=args.limit)
        if isinstance(args, GetArgs):
            return await backend.get(ns, args.id)
        if isinstance(args, ListArgs):
            return await backend.list(ns, limit=args.limit, offset=args.offset)
        if isinstance(args, HistoryArgs):
            return await backend.history(ns, args.id)
        provenance = Provenance.of(ctx, event_id)
        if isinstance(args, AddArgs):
            tags = _tags(args.access, ns)
            return await backend.add(
                ns, args.content, metadata=args.metadata, tags=tags, provenance=provenance
            )
        if isinstance(args, UpdateArgs):
            return await backend.update(
                ns,
                args.id,
                content=args.content,
                metadata=args.metadata,
                tags=_tags(args.access, ns) if args.access else None,
                provenance=provenance,
            )
        if isinstance(args, DeleteArgs):
            return await backend.delete(ns, args.id, provenance=provenance)
        raise UnknownTool(f"no handler for {type(args).__name__}")


def _tags(access: AccessArg | None, namespace: str) -> AccessTags:
    if access is None:
        return AccessTags(owner=namespace)
    fields = access.model_dump(exclude_none=True)
    return AccessTags(owner=namespace, **fields)
