"""Reconciliation: what a wrapped server really holds after a call memtap could not observe.

A call that ends in an upstream error (the server died under it, answered nonsense) or a
timeout may still have changed the server's state: the reference memory server saves its
file before it answers, so a SIGKILL between the save and the answer leaves a write the
caller was told failed. memtap does not guess. After such a call it reads the state the
call named (the entities, from the server's own storage file) and records the difference
from the state before the call as **reconciled** effects on the failed call's event: the
event keeps its error, and the items match the server.

A write can also land *after* the error: a timed-out request stays queued in a hung (or
stopped) server and is carried out when it resumes. So every failed write stays
*unsettled*: before each later write to the same upstream (under its write lock, so no
other write is in flight), memtap reads the unsettled entities again and records what
changed since as a ``control`` event ``upstream/reconcile`` with reconciled effects. An
unsettled write is settled (read one last time, then forgotten) once nothing more of it
can land: the process it was sent to has ended (a crash or restart), or that process has
answered it after all. A timed-out write is therefore not cancelled but watched for its
late answer (:class:`~memtap.adapters.connections.LateAnswer`): the reference server
carries a cancelled request out anyway and only suppresses its answer. A later write's
answer proves nothing: the server runs its handlers concurrently, so a write queued while
it hung may save after a later one has been answered. Over HTTP, where a late answer
cannot be seen, a later write's answer is all there is to go on.

A late write saves the whole graph *as it loaded it*, so it can undo writes that ended
while it was in flight (the server's own lost update). Each write that ends while an
earlier failed one may still land widens that one's final read to its entities too: what
the late save undid is recorded as well.

Every reconciled effect carries its evidence: what was read (``file PATH`` or
``open_nodes``), when (``read_at``), why (the error), and the failed event's id.
Reading costs nothing on the successful path: only a failure adds an unsettled entry,
and only unsettled entries are read again. What no call names (a write made behind
memtap's back, or one still pending when memtap stops) is found by ``memtap verify``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from memtap.adapters.graph_state import Graph
from memtap.errors import UpstreamProtocolError, UpstreamRPCError
from memtap.ids import new_id
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op, TraceEvent, utc_now

if TYPE_CHECKING:
    from memtap.adapters.connections import LateAnswer
    from memtap.adapters.memory_server import GraphTap
    from memtap.trace.calls import CallRecord

__all__ = ["UNSETTLED_LIMIT", "Reconciler", "Unsettled", "graph_effects"]

log = logging.getLogger("memtap.reconcile")

UNSETTLED_LIMIT = 256  # failed writes kept for a later read; past that the oldest is settled as it is


def graph_effects(
    before: Graph, after: Graph, namespace: str | None, evidence: dict[str, Any], *, reconciled: bool = True
) -> list[MemoryEffect]:
    """The plain difference of two states of a graph as effects (adds and deletes, no pairing)."""
    from memtap.adapters.memory_server import entity_id, observation_id, relation_id, relation_text

    tags = AccessTags(owner=namespace)
    effects: list[MemoryEffect] = []

    def effect(kind: EffectKind, item_id: str, before_text: str | None, after_text: str | None) -> None:
        effects.append(
            MemoryEffect(
                kind=kind, item_id=item_id, namespace=namespace, content_before=before_text,
                content_after=after_text, tags_after=tags if kind != EffectKind.DELETE else None,
                reconciled=reconciled, evidence=evidence,
            )
        )  # fmt: skip

    for name in dict.fromkeys([*before.entities, *after.entities]):
        old, new = before.entities.get(name), after.entities.get(name)
        if old is None and new is not None:
            effect(EffectKind.ADD, entity_id(name), None, f"{name} ({new[0]})")
        elif old is not None and new is None:
            effect(EffectKind.DELETE, entity_id(name), f"{name} ({old[0]})", None)
        old_obs = dict.fromkeys(old[1]) if old else {}
        new_obs = dict.fromkeys(new[1]) if new else {}
        for text in old_obs:
            if text not in new_obs:
                effect(EffectKind.DELETE, observation_id(name, text), text, None)
        for text in new_obs:
            if text not in old_obs:
                effect(EffectKind.ADD, observation_id(name, text), None, text)
    old_rel, new_rel = set(before.relations), set(after.relations)
    for relation in dict.fromkeys(before.relations):
        if relation not in new_rel:
            effect(EffectKind.DELETE, relation_id(relation), relation_text(relation), None)
    for relation in dict.fromkeys(after.relations):
        if relation not in old_rel:
            effect(EffectKind.ADD, relation_id(relation), None, relation_text(relation))
    return effects


def _merged(believed: Graph, names: frozenset[str], seen: Graph) -> Graph:
    """``believed`` with the entities ``names`` (and the relations touching them) as in ``seen``."""
    kept = {n: e for n, e in believed.entities.items() if n not in names}
    relations = [r for r in believed.relations if r[0] not in names and r[2] not in names]
    return Graph({**kept, **seen.entities}, relations + seen.relations)


@dataclass
class Unsettled:
    """A failed write whose outcome may still change: the state the trace now implies for it."""

    event_id: str | None
    tool: str
    names: frozenset[str] | None  # what its reads cover: its own entities, widened (module docstring)
    believed: Graph
    context: Context
    why: str
    run: object  # the connection it was sent on
    answers: int  # successful writes on that connection when it failed
    answered: bool  # the server answered it (with an error): its handler has ended
    late: LateAnswer | None  # its answer, watched for after a timeout (None: the tap does not watch)


class Reconciler:
    """The unsettled writes of one upstream, and the reads that settle them."""

    def __init__(self, tap: GraphTap) -> None:
        self.tap = tap
        self.unsettled: list[Unsettled] = []
        self.answers = 0  # successful writes so far (on any connection)
        self.recorded = 0  # reconcile events recorded

    def _run(self) -> object:
        return self.tap.upstream.current_connection()

    async def _state_now(self, names: frozenset[str] | None, *, ask: bool) -> tuple[Graph, str] | None:
        """The state of ``names`` now, and how it was read; None when it cannot be read yet.

        From the storage file when known (off the event loop); else, with ``ask``, from the
        server itself (``open_nodes`` / ``read_graph``), within its timeout.
        """
        tap = self.tap
        file = tap.file
        if file is not None:
            try:
                if names is None:
                    graph = await anyio.to_thread.run_sync(file.scan_all)
                else:
                    graph = await anyio.to_thread.run_sync(lambda: file.read(names, fresh=True))
                return graph, f"file {file.path}"
            except OSError as exc:
                log.warning("upstream %s: cannot read %s to reconcile: %s", tap.upstream.name, file.path, exc)
        if not ask or tap.upstream.state != "ready":
            return None  # a crash is for the caller to be told, and a start for it to wait for
        try:
            return await tap.read_from_server(names), "open_nodes" if names is not None else "read_graph"
        except Exception as exc:  # the server is still down or hung: try again at the next write
            log.warning("upstream %s: cannot read its state to reconcile: %s", tap.upstream.name, exc)
            return None

    def _over(self, entry: Unsettled) -> bool:
        """Whether nothing more of ``entry``'s write can land on the server."""
        if self.tap.upstream.connection_ended(entry.run):
            return True
        if entry.answered:
            return True
        late = entry.late
        if late is not None and late.watched:
            return late.arrived
        return self.answers > entry.answers  # a late answer cannot be seen (HTTP): the next best sign

    def _widen(self, names: frozenset[str] | None, belief: Graph) -> None:
        """A write to ``names`` has ended, its state in the trace now ``belief``: every failed write
        not settled yet (it may have saved the graph it loaded before this one, after ``belief`` was
        read, even when its answer has come by now) reads them too, at least once more."""
        for entry in self.unsettled:
            if entry.names is None:
                continue
            if names is None:
                entry.names, entry.believed = None, belief
                continue
            new = names - entry.names
            if new:
                entry.names = entry.names | new
                entry.believed = _merged(entry.believed, new, belief.touching(new))

    def _evidence(self, entry: Unsettled, how: str, *, final: bool) -> dict[str, Any]:
        return {
            "why": entry.why,
            "read": how,
            "read_at": utc_now().isoformat(),
            "entities": sorted(entry.names) if entry.names is not None else None,
            "event": entry.event_id,
            "tool": entry.tool,
            "final": final,
        }

    async def failed(
        self,
        tool: str,
        names: frozenset[str] | None,
        before: Graph,
        context: Context,
        record: CallRecord | None,
        error: BaseException,
        late: LateAnswer | None = None,
    ) -> None:
        """After a failed write: reconcile what is visible now onto its event; keep it unsettled.
        ``late``: the write's answer, watched for when it timed out."""
        entry = Unsettled(
            event_id=record.id if record is not None else None,
            tool=tool,
            names=names,
            believed=before,
            context=context,
            why=f"{type(error).__name__}: {error}",
            run=self._run(),
            answers=self.answers,
            answered=isinstance(error, (UpstreamRPCError, UpstreamProtocolError)),
            late=late,
        )
        believed = before
        if record is not None:
            read = await self._state_now(names, ask=False)
            if read is not None:
                graph, how = read
                evidence = self._evidence(entry, how, final=False)
                record.effects = graph_effects(before, graph, context.namespace, evidence)
                entry.believed = believed = graph
        if self.unsettled:
            self._widen(names, believed)
            self.observed(names, believed)
        self.unsettled.append(entry)
        while len(self.unsettled) > UNSETTLED_LIMIT:
            self.unsettled.pop(0)

    def succeeded(self, names: frozenset[str] | None, after: Graph | None) -> None:
        """A write was answered, and ``after`` (when read) is now in the trace for ``names``."""
        self.answers += 1
        if after is not None and self.unsettled:
            self._widen(names, after)
            self.observed(names, after)

    def observed(self, names: frozenset[str] | None, seen: Graph) -> None:
        """``seen`` (the state of ``names``; None: the whole graph) is now what the trace holds:
        no unsettled write may record it again."""
        for entry in self.unsettled:
            if names is None:
                merged = seen
            else:
                if entry.names is not None and not (entry.names & names):
                    continue
                merged = _merged(entry.believed, names, seen)
            entry.believed = merged.touching(entry.names) if entry.names is not None else merged

    async def settle(self) -> None:
        """Read every unsettled write's entities again; record what changed (under the write lock)."""
        still: list[Unsettled] = []
        for entry in self.unsettled:
            final = self._over(entry)  # before the read: whatever it saved by now is read
            read = await self._state_now(entry.names, ask=True)
            if read is None:
                still.append(entry)
                continue
            graph, how = read
            effects = graph_effects(
                entry.believed, graph, entry.context.namespace, self._evidence(entry, how, final=final)
            )
            if effects:
                await self._record(entry, effects)
            self.observed(entry.names, graph)
            entry.believed = graph
            if not final:
                still.append(entry)
        self.unsettled = still

    async def _record(self, entry: Unsettled, effects: list[MemoryEffect]) -> None:
        upstream = self.tap.upstream
        recorder = upstream.recorder
        if recorder is None:
            return
        now = utc_now()
        event = TraceEvent(
            id=new_id(),
            started_at=now,
            ended_at=now,
            front_door="upstream",
            backend=upstream.name,
            tool="upstream/reconcile",
            op=Op.CONTROL,
            context=entry.context,
            arguments={"event": entry.event_id, "tool": entry.tool},
            result=effects[0].evidence,
            effects=effects,
        )
        # Not built by recorded_call: the content policy and secret redaction are applied here.
        recorder.privacy.apply(event)
        self.recorded += 1
        await recorder.record(event)
