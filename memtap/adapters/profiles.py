"""Lifecycle classification of upstream MCP tools, and profiles of known memory servers.

Each tool of a wrapped server is classified as ``write``, ``update``, ``delete``,
``retrieve``, ``read`` or ``other``. Sources, strongest first:

1. the user's rules in the config (exact names before glob patterns);
2. the profile of a known server (the reference memory server, ``mcp-memory-libsql``,
   ``mcp-memory-keeper``, Graphiti, Letta, Mem0);
3. the tool's MCP annotations (``readOnlyHint``, ``destructiveHint``), when present;
4. words in the tool's name (``delete_*``, ``search_*``, ``add_*``, ...);
5. otherwise ``other``.

A profile also says how to write one plain memory and how to search, so the chat
proxy's automatic memory and the replay driver can use a wrapped server as a
backend (see :mod:`memtap.adapters.upstream_backend`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from memtap.errors import ConfigError
from memtap.trace.models import Op

__all__ = [
    "PROFILES",
    "Classification",
    "Profile",
    "ToolKind",
    "classify_tools",
    "detect_profile",
    "find_profile",
]


class ToolKind(StrEnum):
    """What a tool does to memory, as far as memtap can tell."""

    WRITE = "write"
    UPDATE = "update"
    DELETE = "delete"
    RETRIEVE = "retrieve"
    READ = "read"
    OTHER = "other"

    @property
    def op(self) -> Op:
        """The lifecycle op recorded for a call of such a tool (``other`` is ``control``)."""
        return Op.CONTROL if self is ToolKind.OTHER else Op(self.value)

    @property
    def mutates(self) -> bool:
        return self in (ToolKind.WRITE, ToolKind.UPDATE, ToolKind.DELETE, ToolKind.OTHER)


@dataclass(frozen=True)
class Classification:
    tool: str
    kind: ToolKind
    source: str  # "rule", "profile", "annotations", "name" or "default"
    reason: str


@dataclass(frozen=True)
class Profile:
    """A known memory server: its tool vocabulary and how to write and search plainly."""

    name: str
    title: str
    vocabulary: Mapping[str, ToolKind]
    server_names: frozenset[str] = frozenset()
    signature: frozenset[str] = frozenset()  # tools that only this server has (all must be present)
    write_tool: str | None = None
    search_tool: str | None = None
    fixed_write_args: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, server_name: str | None, tools: set[str]) -> bool:
        if server_name is not None and server_name in self.server_names:
            return bool(tools & set(self.vocabulary))
        return bool(self.signature) and self.signature <= tools


_W, _U, _D, _S, _R = ToolKind.WRITE, ToolKind.UPDATE, ToolKind.DELETE, ToolKind.RETRIEVE, ToolKind.READ

REFERENCE_MEMORY = Profile(
    name="server-memory",
    title="reference MCP memory server (@modelcontextprotocol/server-memory)",
    vocabulary={
        "create_entities": _W,
        "create_relations": _W,
        "add_observations": _W,
        "delete_entities": _D,
        "delete_observations": _D,
        "delete_relations": _D,
        "read_graph": _R,
        "search_nodes": _S,
        "open_nodes": _R,
    },
    server_names=frozenset({"memory-server"}),
    signature=frozenset({"create_entities", "add_observations", "delete_observations", "open_nodes"}),
    write_tool="add_observations",
    search_tool="search_nodes",
)

GRAPHITI = Profile(
    name="graphiti",
    title="Graphiti MCP server",
    vocabulary={
        "add_memory": _W,
        "add_episode": _W,
        "delete_entity_edge": _D,
        "delete_episode": _D,
        "clear_graph": _D,
        "search_nodes": _S,
        "search_memory_nodes": _S,
        "search_memory_facts": _S,
        "search_facts": _S,
        "get_episodes": _R,
        "get_entity_edge": _R,
        "get_status": ToolKind.OTHER,
    },
    server_names=frozenset({"graphiti", "Graphiti Agent Memory", "graphiti-memory"}),
    signature=frozenset({"delete_entity_edge", "get_episodes"}),
    write_tool="add_memory",
    search_tool="search_memory_facts",
    fixed_write_args={"name": "memtap memory", "source": "text"},
)

LETTA = Profile(
    name="letta",
    title="Letta memory tools",
    vocabulary={
        "archival_memory_insert": _W,
        "archival_memory_search": _S,
        "core_memory_append": _W,
        "core_memory_replace": _U,
        "memory_replace": _U,
        "memory_rethink": _U,
        "memory_insert": _W,
        "memory_finish_edits": ToolKind.OTHER,
        "conversation_search": _S,
        "conversation_search_date": _S,
    },
    signature=frozenset({"archival_memory_insert", "archival_memory_search"}),
    write_tool="archival_memory_insert",
    search_tool="archival_memory_search",
)

MEM0 = Profile(
    name="mem0",
    title="hosted Mem0 MCP server",
    vocabulary={
        "add_memory": _W,
        "search_memories": _S,
        "get_memories": _R,
        "get_memory": _R,
        "update_memory": _U,
        "delete_memory": _D,
        "delete_all_memories": _D,
        "delete_entities": _D,
        "list_entities": _R,
    },
    server_names=frozenset({"mem0", "mem0-mcp", "Mem0"}),
    signature=frozenset({"add_memory", "search_memories"}),
    write_tool="add_memory",
    search_tool="search_memories",
)

LIBSQL_MEMORY = Profile(
    name="memory-libsql",
    title="libSQL knowledge-graph memory server (mcp-memory-libsql)",
    vocabulary={
        "create_entities": _W,  # over an existing entity it replaces the observations: see libsql_server
        "create_relations": _W,
        "delete_entity": _D,
        "delete_relation": _D,
        "search_nodes": _S,
        "read_graph": _R,
    },
    server_names=frozenset({"mcp-memory-libsql"}),
    signature=frozenset({"create_entities", "delete_entity", "delete_relation", "search_nodes"}),
    search_tool="search_nodes",
)

MEMORY_KEEPER = Profile(
    name="memory-keeper",
    title="Memory Keeper context server (mcp-memory-keeper)",
    vocabulary={
        "context_save": _W,  # a key saved again replaces its value: recorded as an update
        "context_batch_save": _W,
        "context_batch_update": _U,
        "context_batch_delete": _D,
        "context_reassign_channel": _U,
        "context_compress": _D,
        "context_restore_checkpoint": _W,
        "context_import": _W,
        "context_branch_session": _W,
        "context_merge_sessions": _W,
        "context_prepare_compaction": _W,
        "context_git_commit": _W,
        "context_journal_entry": _W,
        "context_link": _W,
        "context_integrate_tool": _W,
        "context_cache_file": _W,
        "context_checkpoint": _W,
        "context_session_start": ToolKind.OTHER,  # continueFrom copies a session's items
        "context_set_project_dir": ToolKind.OTHER,
        "context_watch": ToolKind.OTHER,
        "context_delegate": ToolKind.OTHER,
        "context_analyze": ToolKind.OTHER,
        "context_get": _S,
        "context_search": _S,
        "context_search_all": _S,
        "context_semantic_search": _S,
        "context_find_related": _S,
        "context_get_related": _S,
        "context_session_list": _R,
        "context_status": _R,
        "context_summarize": _R,
        "context_file_changed": _R,
        "context_diff": _R,
        "context_list_channels": _R,
        "context_channel_stats": _R,
        "context_timeline": _R,
        "context_export": _R,
        "context_visualize": _R,
    },
    server_names=frozenset({"memory-keeper"}),
    signature=frozenset({"context_save", "context_get", "context_batch_delete"}),
    search_tool="context_search",
)

PROFILES: dict[str, Profile] = {
    p.name: p for p in (REFERENCE_MEMORY, LIBSQL_MEMORY, MEMORY_KEEPER, GRAPHITI, LETTA, MEM0)
}


def find_profile(name: str) -> Profile | None:
    """A profile by name; ``none`` means no profile; an unknown name is a ConfigError."""
    if name == "none":
        return None
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; known: none, {', '.join(PROFILES)}") from None


def detect_profile(server_name: str | None, tools: Iterable[str]) -> Profile | None:
    """The profile of a known server, by its advertised name or by tools only it has."""
    names = set(tools)
    for profile in PROFILES.values():
        if profile.matches(server_name, names):
            return profile
    return None


# -- annotations and names ------------------------------------------------------------------


def _vocabulary(words: str) -> frozenset[str]:
    return frozenset(words.split())


_WORDS: list[tuple[ToolKind, frozenset[str]]] = [
    (_D, _vocabulary("delete remove forget erase clear purge drop wipe prune")),
    (_U, _vocabulary("update replace edit modify rethink patch rename correct revise set")),
    (_S, _vocabulary("search query find recall retrieve lookup match similar semantic")),
    (_R, _vocabulary("get read list open fetch show view describe history dump")),
    (_W, _vocabulary("add create insert save store remember write append put record memorize upsert log")),
]


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def _by_name(name: str) -> tuple[ToolKind, str] | None:
    words = _words(name)
    for kind, vocabulary in _WORDS:
        for word in words:
            if word in vocabulary:
                return kind, f"the name has {word!r}"
    return None


def _by_annotations(name: str, annotations: Mapping[str, Any] | None) -> tuple[ToolKind, str] | None:
    if not annotations:
        return None
    read_only = annotations.get("readOnlyHint")
    destructive = annotations.get("destructiveHint")
    named = _by_name(name)
    if read_only is True:
        kind = _S if named is not None and named[0] is _S else _R
        return kind, "readOnlyHint" + (" and a search word in the name" if kind is _S else "")
    if read_only is False and destructive is True:
        kind = _D if named is not None and named[0] is _D else _U
        return kind, "destructiveHint" + (" and a delete word in the name" if kind is _D else "")
    if read_only is False and destructive is False:
        return _W, "readOnlyHint=false, destructiveHint=false (additive)"
    return None


def _by_rule(name: str, rules: Mapping[str, str]) -> tuple[ToolKind, str] | None:
    if name in rules:
        return ToolKind(rules[name]), f"rule {name!r}"
    for pattern, kind in rules.items():
        if fnmatch.fnmatchcase(name, pattern):
            return ToolKind(kind), f"rule {pattern!r}"
    return None


def classify_tools(
    tools: Iterable[tuple[str, Mapping[str, Any] | None]],
    *,
    profile: Profile | None,
    rules: Mapping[str, str] | None = None,
) -> dict[str, Classification]:
    """Classify ``(name, annotations)`` pairs; annotations use the wire's camelCase keys."""
    out: dict[str, Classification] = {}
    for name, hints in tools:
        found = _by_rule(name, rules or {})
        if found is not None:
            out[name] = Classification(name, found[0], "rule", found[1])
            continue
        if profile is not None and name in profile.vocabulary:
            out[name] = Classification(name, profile.vocabulary[name], "profile", profile.title)
            continue
        for source, check in (("annotations", _by_annotations(name, hints)), ("name", _by_name(name))):
            if check is not None:
                out[name] = Classification(name, check[0], source, check[1])
                break
        else:
            out[name] = Classification(
                name, ToolKind.OTHER, "default", "no rule, profile, annotation or word"
            )
    return out
