"""Real effects of the reference MCP memory server (``@modelcontextprotocol/server-memory``).

A memory item there is one observation of one entity; entities and relations are
items too. The server's answers are not evidence of what it did: deletes always
report success and ``create_entities`` silently skips names that exist. So memtap
reads the state of the entities a mutating call names, before and after the call,
and records the difference.

Reading it cheaply and exactly: from the server's own storage file when memtap knows
where it is (:mod:`memtap.adapters.graph_state`: a C-level scan for the named
entities, cached under the file's identity stamp). When the path is not known (a
server started through ``npx`` without ``MEMORY_FILE_PATH``), or the file turns out
not to be the server's (it is checked against ``open_nodes`` until it has agreed on
a write that left something in the graph), memtap asks the server itself with
``open_nodes`` before and after.

Mutating calls to one upstream are serialised (``Upstream.write_lock``): two writes
in flight at once would make each one's before/after difference include the
other's changes (and the server itself loses one of two concurrent saves). Reads
are not serialised.

Ids are stable and content-derived (``obs_``/``ent_``/``rel_`` + a hash), so the
same observation has the same id in every event of a run, and across restarts.
A ``delete_observations`` followed by ``add_observations`` on the same entity in
the same turn (same session and turn from the context; without a turn, the very
next write) is recorded as an update: the new observation's effect is ``update``
with ``derived_from`` naming the observation it replaced. So is an
``add_observations`` after which the entity lost observations and holds one the
call did not ask for (a server that rewrote what it held, merging the new one in):
the lost observations' ``delete`` effects, then the new one's ``update`` derived
from them. A server that drops observations beside the one it was asked to add
(an overwrite) records ``delete`` effects and the ``add``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from memtap.adapters.connections import LateAnswer
from memtap.adapters.graph_state import FileState, Graph, Relation, graph_from_result, memory_file_for
from memtap.adapters.reconcile import Reconciler
from memtap.adapters.tap_call import Answered, forward_read, forward_write
from memtap.errors import UpstreamError
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op

if TYPE_CHECKING:
    from memtap.adapters.upstream import Upstream
    from memtap.trace.calls import CallRecord

__all__ = [
    "MUTATING_TOOLS",
    "Graph",
    "GraphTap",
    "entity_id",
    "graph_from_result",
    "memory_file_for",
    "named_entities",
    "observation_id",
    "relation_id",
    "relation_text",
    "retrieval_effects",
]

log = logging.getLogger("memtap.upstream")

MUTATING_TOOLS = frozenset(
    {
        "create_entities", "create_relations", "add_observations",
        "delete_entities", "delete_observations", "delete_relations",
    }
)  # fmt: skip
# The reference server's file is read in a worker thread above this size (about 1 ms of
# reading and filtering on the event loop); below it, on the loop.
OFF_LOOP_BYTES = 256 * 1024

_READS = frozenset({"read_graph", "search_nodes", "open_nodes"})
_PENDING_LIMIT = 1024


def _hash(*parts: str) -> str:
    data = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def observation_id(entity: str, text: str) -> str:
    return "obs_" + _hash(entity, text)


def entity_id(name: str) -> str:
    return "ent_" + _hash(name)


def relation_id(relation: Relation) -> str:
    return "rel_" + _hash(*relation)


def relation_text(relation: Relation) -> str:
    return f"{relation[0]} {relation[1]} {relation[2]}"


def named_entities(tool: str, arguments: dict[str, Any]) -> list[str]:
    """The entity names a mutating call can change (relations touching them included)."""

    def strings(values: Iterable[Any]) -> list[str]:
        return [v for v in values if isinstance(v, str)]

    def field_of(key: str, sub: str) -> list[Any]:
        items = arguments.get(key)
        return [i.get(sub) for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    if tool == "create_entities":
        names = strings(field_of("entities", "name"))
    elif tool == "add_observations":
        names = strings(field_of("observations", "entityName"))
    elif tool == "delete_observations":
        names = strings(field_of("deletions", "entityName"))
    elif tool == "delete_entities":
        given = arguments.get("entityNames")
        names = strings(given) if isinstance(given, list) else []
    else:  # create_relations, delete_relations
        names = strings(field_of("relations", "from") + field_of("relations", "to"))
    return list(dict.fromkeys(names))


def _environment(upstream: Upstream) -> dict[str, str] | None:
    """The environment the upstream's process gets (its own ``MEMORY_FILE_PATH`` included)."""
    from memtap.adapters.upstream import child_environment
    from memtap.config import StdioServerConfig

    if not isinstance(upstream.config, StdioServerConfig):
        return None
    return child_environment(upstream.config, inherit=upstream.inherit_env)


class GraphTap:
    """Forwards calls to a reference memory server and derives what each one really changed."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        path = memory_file_for(upstream.config, _environment(upstream))
        self.file = FileState(path) if path is not None else None
        self._verified = False
        self._seq = 0
        self.reconciler = Reconciler(self)
        # Observations a delete_observations removed, by (namespace, session, turn, entity),
        # waiting for an add_observations in the same turn that replaces them.
        self._removed: OrderedDict[tuple[str | None, ...], tuple[int, list[str]]] = OrderedDict()

    @property
    def method(self) -> str:
        return f"file {self.file.path}" if self.file is not None else "open_nodes"

    async def _open_nodes(self, names: frozenset[str]) -> Graph:
        if not names:
            return Graph()
        result = await self.upstream.call_tool("open_nodes", {"names": sorted(names)})
        if result.get("isError"):
            raise UpstreamError(
                f"open_nodes failed on upstream {self.upstream.name!r}: {result.get('content')}"
            )
        return graph_from_result(result)

    async def read_from_server(self, names: frozenset[str] | None) -> Graph:
        """The state of ``names`` (None: the whole graph) as the server itself reports it."""
        if names is None:
            return graph_from_result(await self.upstream.call_tool("read_graph", {}))
        return await self._open_nodes(names)

    async def _read(self, names: frozenset[str] | None, *, fresh: bool) -> Graph:
        """The state of the entities ``names`` (and relations touching them); None: the whole graph."""
        if names is None:
            if self.file is not None:
                with contextlib.suppress(OSError):
                    if self.file.size() <= OFF_LOOP_BYTES:
                        return self.file.scan_all()
                    return await asyncio.to_thread(self.file.scan_all)
            return graph_from_result(await self.upstream.call_tool("read_graph", {}))
        if self.file is None:
            return await self._open_nodes(names)
        try:
            # A cache hit costs a stat. A large file is read off the event loop; a small one (well
            # under a millisecond to read) on it, where a thread hop would cost more than the read.
            hit = None if fresh else self.file.cached(names)
            if hit is not None:
                graph = hit
            elif self.file.size() > OFF_LOOP_BYTES:
                graph = await asyncio.to_thread(self.file.read, names, fresh=fresh)
            else:
                graph = self.file.read(names, fresh=fresh)
        except OSError as exc:
            log.warning("upstream %s: cannot read %s (%s); reading state with open_nodes",
                        self.upstream.name, self.file.path, exc)  # fmt: skip
            self.file = None
            return await self._open_nodes(names)
        if not self._verified and names:
            # Until the file has been seen to hold what the server reports (on a non-empty
            # graph, before and after a write), ask the server too and believe the server.
            told = await self._open_nodes(names)
            if told.entities != graph.entities or sorted(told.relations) != sorted(graph.relations):
                log.warning(
                    "upstream %s: %s does not hold the graph the server reports; using open_nodes",
                    self.upstream.name,
                    self.file.path,
                )
                self.file = None
                return told
            self._verified = bool(fresh and (graph.entities or graph.relations))
        return graph

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        context: Context,
        record: CallRecord | None,
        answered: Answered | None = None,
    ) -> tuple[dict[str, Any], list[MemoryEffect], Op | None]:
        """Forward one call; returns the upstream's result, the real effects, and a refined op.

        ``record``, when given, learns where the upstream's own time begins and ends.
        ``answered``, when given, is handed the upstream's result as soon as it arrives, before
        the state after a write is read (a front door answering its caller first); the write
        lock is still held until that read ends, so no other write's state read interleaves.
        """
        upstream = self.upstream
        if tool not in MUTATING_TOOLS and (tool in _READS or not upstream.kind_of(tool).mutates):
            result = await forward_read(upstream, tool, arguments, meta, record, answered)
            effects = retrieval_effects(result, context) if tool == "search_nodes" else []
            return result, effects, None
        # A write this profile does not know (a newer server's tool) is diffed over the whole graph.
        names = frozenset(named_entities(tool, arguments)) if tool in MUTATING_TOOLS else None
        seq = 0
        late = LateAnswer()  # a timed-out write is settled by its late answer (reconcile.py)

        async def read_before() -> Graph:
            nonlocal seq
            self._seq += 1
            seq = self._seq
            if self.reconciler.unsettled:
                await self.reconciler.settle()
            return await self._read(names, fresh=False)

        async def read_after() -> Graph:
            after = await self._read(names, fresh=True)
            self.reconciler.succeeded(names, after)
            return after

        async def failed(before: Graph, exc: UpstreamError) -> None:
            if self.file is not None:
                self.file.forget()  # a timed-out write may still land: read fresh next time
            await self.reconciler.failed(tool, names, before, context, record, exc, late)

        def unread() -> None:
            if self.file is not None:
                self.file.forget()
            self.reconciler.succeeded(names, None)

        result, before, after = await forward_write(
            upstream, tool, arguments, meta, record, answered,
            read_before=read_before, read_after=read_after, failed=failed, unread=unread, late=late,
        )  # fmt: skip
        if after is None:
            return result, [], None
        named = named_entities(tool, arguments) if tool in MUTATING_TOOLS else []
        order = list(dict.fromkeys([*named, *before.entities, *after.entities]))
        asked = _asked_observations(arguments) if tool == "add_observations" else {}
        effects = self._diff(before, after, order, context, tool, seq, asked)
        op = Op.UPDATE if effects and all(e.kind == EffectKind.UPDATE for e in effects) else None
        return result, effects, op

    def _diff(
        self,
        before: Graph,
        after: Graph,
        order: list[str],
        ctx: Context,
        tool: str,
        seq: int,
        asked: dict[str, set[str]] | None = None,
    ) -> list[MemoryEffect]:
        ns = ctx.namespace
        tags = AccessTags(owner=ns)
        effects: list[MemoryEffect] = []
        for name in order:
            old, new = before.entities.get(name), after.entities.get(name)
            if old is None and new is not None:
                effects.append(
                    MemoryEffect(
                        kind=EffectKind.ADD, item_id=entity_id(name), namespace=ns,
                        content_after=f"{name} ({new[0]})", tags_after=tags,
                    )
                )  # fmt: skip
            elif old is not None and new is None:
                effects.append(
                    MemoryEffect(
                        kind=EffectKind.DELETE, item_id=entity_id(name), namespace=ns,
                        content_before=f"{name} ({old[0]})",
                    )
                )  # fmt: skip
            old_obs = dict.fromkeys(old[1]) if old else {}  # ordered sets
            new_obs = dict.fromkeys(new[1]) if new else {}
            removed = [o for o in old_obs if o not in new_obs]
            added = [o for o in new_obs if o not in old_obs]
            effects.extend(
                MemoryEffect(
                    kind=EffectKind.DELETE,
                    item_id=observation_id(name, text),
                    namespace=ns,
                    content_before=text,
                )
                for text in removed
            )
            key = (ns, ctx.session, ctx.turn, name)
            if tool == "delete_observations" and removed:
                self._removed[key] = (seq, removed)
                self._removed.move_to_end(key)
                while len(self._removed) > _PENDING_LIMIT:
                    self._removed.popitem(last=False)
            replaced = self._replaced(key, added, seq) if tool == "add_observations" else {}
            if not replaced and removed and asked is not None and name in asked:
                replaced = _rewritten(removed, [o for o in added if o not in asked[name]])
            for text in added:
                sources = [observation_id(name, o) for o in replaced.get(text, [])]
                new_id = observation_id(name, text)
                effects.append(
                    MemoryEffect(
                        kind=EffectKind.UPDATE if sources else EffectKind.ADD,
                        item_id=new_id,
                        namespace=ns,
                        content_before="\n".join(replaced[text]) if sources else None,
                        content_after=text,
                        tags_after=tags,
                        derived_from=sources,
                    )
                )
        old_rel, new_rel = set(before.relations), set(after.relations)
        for relation in dict.fromkeys(before.relations):
            if relation not in new_rel:
                effects.append(
                    MemoryEffect(
                        kind=EffectKind.DELETE, item_id=relation_id(relation), namespace=ns,
                        content_before=relation_text(relation),
                    )
                )  # fmt: skip
        for relation in dict.fromkeys(after.relations):
            if relation not in old_rel:
                effects.append(
                    MemoryEffect(
                        kind=EffectKind.ADD, item_id=relation_id(relation), namespace=ns,
                        content_after=relation_text(relation), tags_after=tags,
                    )
                )  # fmt: skip
        return effects

    def _replaced(self, key: tuple[str | None, ...], added: list[str], seq: int) -> dict[str, list[str]]:
        """Pair observations just added with those the same turn removed from the same entity."""
        pending = self._removed.get(key)
        if pending is None or not added:
            return {}
        removed_seq, removed = pending
        if key[2] is None and removed_seq != seq - 1:  # no turn: only the very next write pairs
            return {}
        del self._removed[key]
        candidates = [o for o in added if o not in removed]
        if len(candidates) == 1:
            return {candidates[0]: removed}
        return {new: [old] for new, old in zip(candidates, removed, strict=False)}


def _asked_observations(arguments: dict[str, Any]) -> dict[str, set[str]]:
    """The observations an ``add_observations`` call asked to add, by entity name."""
    asked: dict[str, set[str]] = {}
    specs = arguments.get("observations")
    for spec in specs if isinstance(specs, list) else []:
        if isinstance(spec, dict) and isinstance(spec.get("entityName"), str):
            contents = spec.get("contents")
            texts = {c for c in contents if isinstance(c, str)} if isinstance(contents, list) else set()
            asked.setdefault(spec["entityName"], set()).update(texts)
    return asked


def _rewritten(removed: list[str], unasked: list[str]) -> dict[str, list[str]]:
    """An ``add_observations`` after which the entity lost observations and holds new ones the call
    did not ask for: the server rewrote the lost ones into the new ones (a summarising memory
    merging what it was told into what it held). Each new one is an update derived from them."""
    if not unasked:
        return {}
    if len(unasked) == 1:
        return {unasked[0]: removed}
    return {new: [old] for new, old in zip(unasked, removed, strict=False)}


def retrieval_effects(result: dict[str, Any], ctx: Context) -> list[MemoryEffect]:
    """What a search returned, in order: each observation of each entity, then each relation."""
    if result.get("isError"):
        return []
    graph = graph_from_result(result)
    effects: list[MemoryEffect] = []
    for name, (_, observations) in graph.entities.items():
        for text in dict.fromkeys(observations):
            effects.append(
                MemoryEffect(
                    kind=EffectKind.RETRIEVE, item_id=observation_id(name, text), namespace=ctx.namespace,
                    content_after=text, rank=len(effects) + 1,
                )
            )  # fmt: skip
    for relation in dict.fromkeys(graph.relations):
        effects.append(
            MemoryEffect(
                kind=EffectKind.RETRIEVE, item_id=relation_id(relation), namespace=ctx.namespace,
                content_after=relation_text(relation), rank=len(effects) + 1,
            )
        )  # fmt: skip
    return effects
