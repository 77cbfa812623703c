"""A :class:`~memtap.adapters.base.MemoryBackend` over a wrapped MCP server.

This is how the chat proxy's automatic memory and the replay driver use any
wrapped server as their memory: the upstream's profile says how to write one
plain memory and how to search.

- The reference memory server (full support, real effects): an entity per
  speaker (``metadata["speaker"]``, else the namespace), an observation per
  memory. ``add`` appends an observation (creating the entity on first use);
  ``update`` is ``delete_observations`` plus ``add_observations``, recorded as an
  update whose new item derives from the old; ``search`` runs the server's own
  ``search_nodes`` (a case-insensitive substring match) for the whole query and
  for each of its words, and ranks observations by how many words they contain.
  Item ids are those of :mod:`memtap.adapters.memory_server`, so items written
  here and through the MCP proxy are the same items in the trace.
- Other known servers (Graphiti, Letta, Mem0): ``add`` and ``search`` through the
  profile's tools, the text going to the argument the tool's schema names for it
  (``content``, ``text``, ``memory``, ...). Their effects are not derived (no
  effects are recorded rather than claimed ones); the other methods are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import anyio

from memtap.adapters.base import BackendResult, StoredMemory
from memtap.adapters.memory_server import (
    Graph,
    GraphTap,
    graph_from_result,
    observation_id,
)
from memtap.adapters.upstream import Upstream
from memtap.errors import BackendError, ItemNotFound
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Provenance, utc_now

__all__ = ["UpstreamMemoryBackend"]

_STOP_WORDS = """the a an and or of to in on at for is are was were be been do does did what which who whom
whose when where why how with about from that this these those my your his her its our their me you it
we they he she them us any some"""
_STOP = frozenset(_STOP_WORDS.split())
_TEXT_ARGS = ("content", "text", "memory", "episode_body", "message", "body", "data", "fact")
_QUERY_ARGS = ("query", "q", "search", "text")
_LIMIT_ARGS = ("limit", "top_k", "max_results", "num_results", "max_nodes", "max_facts", "count")
_OWNER_ARGS = ("user_id", "userId", "agent_id", "agentId", "group_id", "groupId", "namespace")


def query_words(query: str, limit: int = 8) -> list[str]:
    """The words of a query worth a substring search of their own."""
    words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2 and w not in _STOP]
    return list(dict.fromkeys(words))[:limit]


def _text(result: dict[str, Any]) -> str:
    return " ".join(
        str(c.get("text")) for c in result.get("content") or [] if isinstance(c, dict) and c.get("text")
    )


class UpstreamMemoryBackend:
    """Plain memory operations over one upstream; every method reports its real effects."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.name = upstream.name

    async def close(self) -> None:
        """Nothing to close: the upstream belongs to its pool."""

    async def _profile_tools(self) -> tuple[str, str]:
        await self.upstream.connection()
        profile = self.upstream.profile
        if profile is None or profile.write_tool is None or profile.search_tool is None:
            raise BackendError(
                f"upstream {self.name!r} matches no profile that can write and search; "
                "set its profile in the config (memtap.profile)"
            )
        return profile.write_tool, profile.search_tool

    def _context(self, namespace: str, provenance: Provenance | None) -> Context:
        return (provenance or Provenance()).context(namespace, upstream=self.name)

    @staticmethod
    def _stored(namespace: str, item_id: str, content: str, entity: str, **extra: Any) -> dict[str, Any]:
        now = utc_now()
        memory = StoredMemory(
            id=item_id,
            namespace=namespace,
            content=content,
            metadata={"entity": entity},
            created_at=now,
            updated_at=now,
            **extra,
        )
        return memory.model_dump(mode="json", exclude_none=True)

    async def _graph_call(
        self, tool: str, arguments: dict[str, Any], ctx: Context
    ) -> tuple[dict[str, Any], list[MemoryEffect]]:
        tap: GraphTap = self.upstream.tap
        result, effects, _ = await tap.call(tool, arguments, None, ctx, None)
        return result, effects

    async def _graph(self) -> Graph:
        return graph_from_result(await self.upstream.call_tool("read_graph", {}))

    async def _locate(self, namespace: str, item_id: str) -> tuple[str, str]:
        for entity, (_, observations) in (await self._graph()).entities.items():
            for text in observations:
                if observation_id(entity, text) == item_id:
                    return entity, text
        raise ItemNotFound(item_id, namespace)

    # -- the protocol ------------------------------------------------------------------------

    async def add(
        self,
        namespace: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        write_tool, _ = await self._profile_tools()
        ctx = self._context(namespace, provenance)
        if not isinstance(self.upstream.tap, GraphTap):  # no graph of the reference server
            result = await self.upstream.call_tool(
                write_tool, self._generic_args(write_tool, content, namespace)
            )
            if result.get("isError"):
                raise BackendError(f"upstream {self.name!r} refused the write: {_text(result)}")
            return BackendResult({"result": result.get("structuredContent") or _text(result)})
        speaker = (metadata or {}).get("speaker")
        entity = speaker if isinstance(speaker, str) and speaker else namespace
        add = {"observations": [{"entityName": entity, "contents": [content]}]}
        result, effects = await self._graph_call("add_observations", add, ctx)
        if result.get("isError"):  # no such entity yet: create it with the memory as its first observation
            create = {"entities": [{"name": entity, "entityType": "speaker", "observations": [content]}]}
            result, effects = await self._graph_call("create_entities", create, ctx)
            if result.get("isError"):
                raise BackendError(f"upstream {self.name!r} refused the write: {_text(result)}")
        if tags is not None:
            effects = [e.model_copy(update={"tags_after": tags}) if e.content_after else e for e in effects]
        item_id = observation_id(entity, content)
        return BackendResult(self._stored(namespace, item_id, content, entity, tags=tags), effects)

    async def search(self, namespace: str, query: str, *, limit: int = 10) -> BackendResult:
        _, search_tool = await self._profile_tools()
        ctx = self._context(namespace, None)
        if not isinstance(self.upstream.tap, GraphTap):  # no graph of the reference server
            result = await self.upstream.call_tool(
                search_tool, self._generic_args(search_tool, query, namespace, limit)
            )
            return BackendResult({"results": [], "raw": result.get("structuredContent") or _text(result)})
        words = query_words(query)
        found: dict[str, Graph] = {}

        async def one(text: str) -> None:
            found[text] = graph_from_result(await self.upstream.call_tool("search_nodes", {"query": text}))

        async with anyio.create_task_group() as tg:
            for text in dict.fromkeys([query.strip(), *words]):
                if text:
                    tg.start_soon(one, text)
        scored: dict[tuple[str, str], float] = {}
        for graph in found.values():
            for entity, (_, observations) in graph.entities.items():
                for text in observations:
                    lowered = f"{entity} {text}".lower()
                    score = sum(1.0 for w in words if w in lowered) + (
                        2.0 if query.lower() in lowered else 0.0
                    )
                    if score > 0:
                        scored[(entity, text)] = score
        ranked = sorted(scored.items(), key=lambda kv: -kv[1])[:limit]
        results = [
            self._stored(namespace, observation_id(e, t), t, e, score=score, rank=rank)
            for rank, ((e, t), score) in enumerate(ranked, start=1)
        ]
        effects = [
            MemoryEffect(
                kind=EffectKind.RETRIEVE,
                item_id=observation_id(e, t),
                namespace=ctx.namespace,
                content_after=t,
                rank=rank,
                score=score,
            )
            for rank, ((e, t), score) in enumerate(ranked, start=1)
        ]
        return BackendResult({"results": results}, effects)

    async def get(self, namespace: str, item_id: str) -> BackendResult:
        self._needs_graph()
        entity, text = await self._locate(namespace, item_id)
        return BackendResult(self._stored(namespace, item_id, text, entity))

    async def list(self, namespace: str, *, limit: int = 50, offset: int = 0) -> BackendResult:
        self._needs_graph()
        items = [
            (entity, text)
            for entity, (_, observations) in (await self._graph()).entities.items()
            for text in observations
        ]
        page = [
            self._stored(namespace, observation_id(e, t), t, e) for e, t in items[offset : offset + limit]
        ]
        return BackendResult({"items": page, "total": len(items), "offset": offset})

    async def update(
        self,
        namespace: str,
        item_id: str,
        *,
        content: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        self._needs_graph()
        entity, old = await self._locate(namespace, item_id)
        if content is None or content == old:
            return BackendResult(self._stored(namespace, item_id, old, entity))
        ctx = self._context(namespace, provenance)
        deletion = {"deletions": [{"entityName": entity, "observations": [old]}]}
        _, removed = await self._graph_call("delete_observations", deletion, ctx)
        addition = {"observations": [{"entityName": entity, "contents": [content]}]}
        result, added = await self._graph_call("add_observations", addition, ctx)
        if result.get("isError"):
            raise BackendError(f"upstream {self.name!r} refused the update: {_text(result)}")
        new_id = observation_id(entity, content)
        effects = removed + [
            e.model_copy(update={"derived_from": [item_id], "kind": EffectKind.UPDATE, "content_before": old})
            if e.item_id == new_id and e.kind in (EffectKind.ADD, EffectKind.UPDATE)
            else e
            for e in added
        ]
        return BackendResult(self._stored(namespace, new_id, content, entity), effects)

    async def delete(
        self, namespace: str, item_id: str, *, provenance: Provenance | None = None
    ) -> BackendResult:
        self._needs_graph()
        entity, text = await self._locate(namespace, item_id)
        deletion = {"deletions": [{"entityName": entity, "observations": [text]}]}
        _, effects = await self._graph_call(
            "delete_observations", deletion, self._context(namespace, provenance)
        )
        return BackendResult({"id": item_id, "deleted": bool(effects)}, effects)

    async def history(self, namespace: str, item_id: str) -> BackendResult:
        self._needs_graph()
        entity, text = await self._locate(namespace, item_id)
        current = self._stored(namespace, item_id, text, entity)
        return BackendResult(
            {"id": item_id, "namespace": namespace, "versions": [current], "kept_by": "trace"}
        )

    # -- helpers ---------------------------------------------------------------------------------

    def _needs_graph(self) -> None:
        if not isinstance(self.upstream.tap, GraphTap):  # no graph of the reference server
            raise BackendError(
                f"upstream {self.name!r} supports only add and search through memtap (profile "
                f"{self.upstream.profile.name if self.upstream.profile else 'none'})"
            )

    def _generic_args(self, tool: str, text: str, namespace: str, limit: int | None = None) -> dict[str, Any]:
        """Arguments for a profile's write or search tool, placed by the names its schema uses."""
        spec = next((t for t in self.upstream.tools if t.get("name") == tool), None)
        schema = (spec or {}).get("inputSchema") or {}
        props: dict[str, Any] = schema.get("properties") or {}
        required: Iterable[str] = schema.get("required") or []
        args: dict[str, Any] = {}
        profile = self.upstream.profile
        if limit is None and profile is not None:
            args.update({k: v for k, v in profile.fixed_write_args.items() if k in props})
        names = _TEXT_ARGS if limit is None else _QUERY_ARGS
        text_arg = next((n for n in names if n in props), None) or next(
            (n for n in required if props.get(n, {}).get("type") == "string" and n not in args), None
        )
        if text_arg is None:
            raise BackendError(f"upstream {self.name!r}: cannot tell which argument of {tool} takes the text")
        args[text_arg] = text
        for name in _OWNER_ARGS:
            if name in props:
                args[name] = namespace
                break
        if limit is not None:
            limit_arg = next((n for n in _LIMIT_ARGS if n in props), None)
            if limit_arg is not None:
                args[limit_arg] = limit
        return args
