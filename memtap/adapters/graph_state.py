"""The reference memory server's graph, and reading it from the server's own storage file.

The server keeps its graph in one JSON Lines file (``MEMORY_FILE_PATH``), one entity or
relation a line, and replaces the file atomically (write, then rename) on every save.
:class:`FileState` reads the lines that mention some entities: ``bytes.find`` for each
name as the server writes it (quoted JSON), then ``json.loads`` of those lines only. It
keeps what it read, stamped with the file's identity (inode, size, mtime, ctime); a read
whose stamp still matches is answered from the cache, so a stream of writes costs one
``stat`` and one filtered read per write. A write made by anyone else changes the stamp.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtap.config import McpServerConfig, StdioServerConfig

__all__ = ["CACHED_NAMES", "FileState", "Graph", "Relation", "graph_from_result", "memory_file_for"]

CACHED_NAMES = 256  # entities whose state the file cache keeps; past that it starts over

Relation = tuple[str, str, str]  # (from, relationType, to)


@dataclass
class Graph:
    """Part of the knowledge graph: entities (name -> type, observations) and relations."""

    entities: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    relations: list[Relation] = field(default_factory=list)

    def add_item(self, item: Any, names: frozenset[str] | None) -> None:
        if not isinstance(item, dict):
            return
        if item.get("type") == "entity" and isinstance(item.get("name"), str):
            if names is None or item["name"] in names:
                observations = [o for o in item.get("observations") or [] if isinstance(o, str)]
                self.entities.setdefault(item["name"], (str(item.get("entityType", "")), observations))
        elif item.get("type") == "relation" and isinstance(item.get("from"), str):
            relation = (item["from"], str(item.get("relationType", "")), str(item.get("to", "")))
            if names is None or relation[0] in names or relation[2] in names:
                self.relations.append(relation)

    def touching(self, names: frozenset[str]) -> Graph:
        held = [n for n in names if n in self.entities]
        if len(held) <= 1:  # the common case (a write names one entity): no walk over the cache
            entities = {n: self.entities[n] for n in held}
        else:  # in the graph's own order
            entities = {n: e for n, e in self.entities.items() if n in names}
        return Graph(entities, [r for r in self.relations if r[0] in names or r[2] in names])


def graph_from_result(result: dict[str, Any]) -> Graph:
    """The graph in a tool result: ``structuredContent``, else the JSON text the server also sends."""
    data = result.get("structuredContent")
    if not isinstance(data, dict):
        content = result.get("content") or []
        text = content[0].get("text") if content and isinstance(content[0], dict) else None
        try:
            data = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            data = {}
    graph = Graph()
    if isinstance(data, dict):
        for entity in data.get("entities") or []:
            graph.add_item({**entity, "type": "entity"} if isinstance(entity, dict) else entity, None)
        for relation in data.get("relations") or []:
            graph.add_item({**relation, "type": "relation"} if isinstance(relation, dict) else relation, None)
    return graph


def memory_file_for(config: McpServerConfig, env: Mapping[str, str] | None = None) -> Path | None:
    """Where a stdio reference server keeps its graph, when that can be known from its config.

    ``env`` is the environment the server is started with (default: the entry's own ``env``;
    ``memtap proxy -- COMMAND`` passes on memtap's own environment)."""
    if not isinstance(config, StdioServerConfig):
        return None
    env = config.env if env is None else env
    configured = env.get("MEMORY_FILE_PATH")
    if configured and os.path.isabs(configured):
        return Path(configured)
    script: str | None = None
    found = shutil.which(config.command, path=env.get("PATH"))
    if found and os.path.realpath(found).endswith(".js"):
        script = os.path.realpath(found)
    elif os.path.basename(config.command) in ("node", "nodejs") and config.args:
        script = os.path.realpath(os.path.join(config.cwd or ".", config.args[0]))
    if script is None:
        return None
    # The server resolves a relative path (and its default file) against its own folder.
    return Path(os.path.dirname(script)) / (configured or "memory.jsonl")


def _lines_mentioning(data: bytes, names: frozenset[str]) -> list[bytes]:
    """The lines of ``data`` that hold one of ``names`` as a JSON string, in file order.

    The search runs in C (``bytes.find`` for each name as the server writes it, quoted);
    the caller parses only those lines and checks them exactly. A name JSON.stringify
    would write differently (an unpaired surrogate) makes every line a candidate.
    """
    needles = []
    for name in names:
        try:
            needles.append(json.dumps(name, ensure_ascii=False).encode("utf-8"))
        except UnicodeEncodeError:
            return data.split(b"\n")
    spans: set[tuple[int, int]] = set()
    for needle in needles:
        at = data.find(needle)
        while at != -1:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end == -1 else end
            spans.add((start, end))
            at = data.find(needle, end)
    return [data[start:end] for start, end in sorted(spans)]


class FileState:
    """The server's storage file, read with a substring filter and cached under its identity stamp."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, ...] | None = None
        self._graph = Graph()
        self._names: frozenset[str] = frozenset()

    def _current_stamp(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _scan(self, names: frozenset[str]) -> tuple[Graph, tuple[int, ...] | None]:
        graph = Graph()
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                data = fh.read()
        except FileNotFoundError:
            return graph, None
        for line in _lines_mentioning(data, names):
            try:
                graph.add_item(json.loads(line), names)
            except ValueError:
                continue
        return graph, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def size(self) -> int:
        """The file's size in bytes (0 when it does not exist yet)."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def cached(self, names: frozenset[str]) -> Graph | None:
        """The state of ``names`` from the cache when the file has not changed since (a stat, no read)."""
        if self._stamp is not None and names <= self._names and self._current_stamp() == self._stamp:
            return self._graph.touching(names)
        return None

    def read(self, names: frozenset[str], *, fresh: bool) -> Graph:
        """The state of ``names``; ``fresh`` after memtap's own write (the cache keeps the rest)."""
        valid = not fresh and self._stamp is not None and self._current_stamp() == self._stamp
        if valid and names <= self._names:
            return self._graph.touching(names)
        found, stamp = self._scan(names)
        cached, cached_names = found, names
        if (fresh or valid) and len(self._names) < CACHED_NAMES:
            # Our own write (or no write at all) since the cache was filled: keep the rest of it.
            kept = self._names - names
            old = self._graph.touching(kept)
            cached = Graph(
                {**{n: e for n, e in old.entities.items() if n not in names}, **found.entities},
                [r for r in old.relations if r[0] not in names and r[2] not in names] + found.relations,
            )
            cached_names = names | kept
        self._graph, self._names, self._stamp = cached, cached_names, stamp
        return found

    def forget(self) -> None:
        self._stamp, self._graph, self._names = None, Graph(), frozenset()

    def scan_all(self) -> Graph:
        """The whole graph, read afresh (the cache is dropped: a write of unknown reach follows)."""
        self.forget()
        graph = Graph()
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return graph
        for line in data.split(b"\n"):
            with contextlib.suppress(ValueError):
                if line.strip():
                    graph.add_item(json.loads(line), None)
        return graph
