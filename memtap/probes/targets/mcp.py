"""``mcp:CONFIG[:NAME]``: a wrapped upstream MCP server, reached through ``memtap proxy``.

The replay starts ``memtap proxy --config EPISODE_CONFIG --only NAME --http 127.0.0.1:PORT --db
DB`` of its own and calls the wrapped server's **own tools** through it with the official MCP
client over streamable HTTP (``/servers/NAME/mcp``), so the forwarding proxy records the run
exactly as it records production traffic. Context travels as in production: ``run``,
``episode`` and ``namespace`` in ``X-Memtap-*`` headers, ``session``, ``turn`` and ``role`` (and
a probe's ``requester``: the episode's namespace for the suite's namespace owner) in each
request's ``_meta`` ``{"memtap": {...}}``.

Which tools write and search comes from the upstream's profile
(:mod:`memtap.adapters.profiles`: the config's ``memtap.profile``, else detected from the
server's name and tools):

- the reference memory server (``server-memory``): a turn is an observation of its speaker's
  entity (``create_entities`` the first time a speaker talks in the episode,
  ``add_observations`` after); a probe is ``search_nodes`` (a case-insensitive substring
  match) for the whole question and for each of its content words, the observations found
  ranked by how many of the words they contain. Retrieved ids are the trace's own
  (``obs_...`` of :mod:`memtap.adapters.memory_server`), so ``run_probes`` links to the
  trace's items;
- any other profile with a write and a search tool: the turn's text (or the question) goes to
  the argument the tool's schema names for text, the namespace to its owner argument
  (``user_id``, ``group_id``, ...); what comes back is read as ``results`` items with ids
  when the server returns structured content of that shape, else nothing is claimed.

**Isolation per episode.** The reference server has no namespaces: every caller sees one
graph. Each episode attempt therefore gets its own proxy, and the wrapped server its own
``MEMORY_FILE_PATH`` (a fresh file in a temporary folder), so no episode can retrieve another
one's memories and the trace's retrievals are only the episode's own. Prefixing entity names
with the namespace instead would hide other episodes' observations from the probe result but
not from ``search_nodes`` itself: the trace would record other episodes' items as retrieved.
A proxy start costs about a second per episode; episodes in parallel (``--workers``) each have
their own. Servers with their own store (Graphiti, Mem0, Letta) are separated by the owner
argument instead.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio

from memtap.adapters.graph_state import graph_from_result
from memtap.adapters.memory_server import observation_id
from memtap.adapters.profiles import Profile, detect_profile, find_profile
from memtap.errors import ConfigError
from memtap.probes.targets._server import MemtapServer
from memtap.probes.targets.base import EpisodeScope, ProbeCall, ProbeResult, Retrieved, TargetError, TurnCall
from memtap.probes.targets.mcp_recorded import RecordedObservations

__all__ = ["McpTarget", "parse_mcp_spec"]

_STOP = frozenset(
    """the a an and or of to in on at for is are was were be been do does did what which who whom whose
    when where why how with about from that this these those my your his her its our their me you it we
    they he she them us any some now user""".split()  # noqa: SIM905 (a list literal of 57 words reads worse)
)
_TEXT_ARGS = ("content", "text", "memory", "episode_body", "message", "body", "data", "fact")
_QUERY_ARGS = ("query", "q", "search", "text")
_LIMIT_ARGS = ("limit", "top_k", "max_results", "num_results", "max_nodes", "max_facts", "count")
_OWNER_ARGS = ("user_id", "userId", "agent_id", "agentId", "group_id", "groupId", "namespace")


def parse_mcp_spec(spec: str) -> tuple[Path, str | None]:
    """``mcp:CONFIG[:NAME]`` → (config path, server name or None)."""
    rest = spec[len("mcp:") :]
    if not rest:
        raise ConfigError("--target mcp: needs a config file: mcp:CONFIG[:NAME]")
    if not Path(rest).is_file() and ":" in rest:
        config, name = rest.rsplit(":", 1)
        return Path(config), name or None
    return Path(rest), None


def _words(query: str, limit: int = 8) -> list[str]:
    words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2 and w not in _STOP]
    return list(dict.fromkeys(words))[:limit]


def _error_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"


@dataclass
class _Episode:
    stack: contextlib.AsyncExitStack
    client: Any
    server: MemtapServer
    tools: dict[str, dict[str, Any]]
    profile: Profile
    speakers: set[str] = field(default_factory=set)
    observations: dict[str, tuple[str, str]] = field(default_factory=dict)  # replayed: id -> (entity, text)


class McpTarget(RecordedObservations):
    name = "mcp"

    def __init__(self, spec: str, db: Path) -> None:
        from memtap.config import load_config

        self.spec = spec
        self.db = db
        self.config_path, wanted = parse_mcp_spec(spec)
        servers = load_config(self.config_path).enabled_servers()  # ConfigError names the problem
        if not servers:
            raise ConfigError(f"--target {spec}: {self.config_path} has no enabled mcpServers")
        if wanted is None:
            if len(servers) > 1:
                raise ConfigError(
                    f"--target {spec}: {self.config_path} has {len(servers)} servers "
                    f"({', '.join(servers)}); name one: mcp:{self.config_path}:NAME"
                )
            wanted = next(iter(servers))
        if wanted not in servers:
            raise ConfigError(
                f"--target {spec}: no server {wanted!r} in {self.config_path} ({', '.join(servers)})"
            )
        self.server_name = wanted
        self.server_config = servers[wanted]
        self.forced_profile = self.server_config.memtap.profile
        if self.forced_profile is not None and self.forced_profile != "none":
            find_profile(self.forced_profile)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._episodes: dict[str, _Episode] = {}
        self._servers: list[MemtapServer] = []  # every proxy started, so aclose() can stop any left
        self.profile_name: str | None = None

    async def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="memtap-replay-")

    def describe(self) -> dict[str, Any]:
        return {
            "target": "mcp",
            "config": str(self.config_path),
            "server": self.server_name,
            "profile": self.profile_name,
            "isolation": "a proxy and a fresh MEMORY_FILE_PATH per episode attempt",
        }

    def _episode_config(self, scope: EpisodeScope) -> Path:
        assert self._tmp is not None, "start() first"
        folder = Path(self._tmp.name) / scope.namespace.replace("/", "__")
        folder.mkdir(parents=True, exist_ok=True)
        entry = self.server_config.model_dump(mode="json", by_alias=True, exclude_none=True)
        if "command" in entry:
            entry["env"] = {**(entry.get("env") or {}), "MEMORY_FILE_PATH": str(folder / "memory.jsonl")}
        path = folder / "memtap.json"
        path.write_text(json.dumps({"mcpServers": {self.server_name: entry}}))
        return path

    def _profile(self, tools: dict[str, dict[str, Any]]) -> Profile:
        profile = (
            find_profile(self.forced_profile)
            if self.forced_profile is not None
            else detect_profile(self.server_name, tools)
        )
        if profile is None or profile.write_tool is None or profile.search_tool is None:
            raise TargetError(
                f"upstream {self.server_name!r} matches no profile that can write and search; set its "
                "profile in the config (mcpServers.NAME.memtap.profile)"
            )
        missing = {profile.write_tool, profile.search_tool} - set(tools)
        if missing:
            raise TargetError(
                f"upstream {self.server_name!r} lacks the tools its profile needs: {sorted(missing)}"
            )
        self.profile_name = profile.name
        return profile

    async def open_episode(self, scope: EpisodeScope) -> None:
        config = self._episode_config(scope)
        extra = ["--config", str(config), "--only", self.server_name]
        server = MemtapServer(self.db, extra=extra, command="proxy")
        self._servers.append(server)
        await anyio.to_thread.run_sync(server.start)
        url = f"{server.base_url}/servers/{self.server_name}/mcp"
        headers = {
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Namespace": scope.namespace,
        }
        stack = contextlib.AsyncExitStack()

        async def stop_server() -> None:
            await anyio.to_thread.run_sync(server.stop)

        stack.push_async_callback(stop_server)
        self._episodes[scope.namespace] = await self._connect(stack, server, url, headers)

    async def _connect(
        self, stack: contextlib.AsyncExitStack, server: MemtapServer, url: str, headers: dict[str, str]
    ) -> _Episode:
        """An MCP client of ``url`` on ``stack`` (closed, with what is on it, if this fails), and the
        wrapped server's tools and profile."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.types import Implementation

        try:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
            info = Implementation(name="memtap-replay", version="1")
            transport = streamable_http_client(url, http_client=http)
            client = await stack.enter_async_context(Client(transport, client_info=info, mode="legacy"))
            listed = await client.list_tools()
            tools = {t.name: t.model_dump(by_alias=True) for t in listed.tools}
            profile = self._profile(tools)
        except BaseException:
            await stack.aclose()
            raise
        return _Episode(stack, client, server, tools, profile)

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None:
        """Nothing to do: every call this target makes carries its own turn."""

    async def _call(
        self, episode: _Episode, tool: str, args: dict[str, Any], meta: dict[str, Any], *, check: bool = True
    ) -> Any:
        result = await episode.client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        if check and result.is_error:
            raise TargetError(f"{tool} failed: {_error_text(result)}")
        return result

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None:
        if not turn.content.strip():
            return
        episode = self._episodes[scope.namespace]
        meta = {"session": turn.session, "turn": turn.turn, "role": turn.role}
        if episode.profile.name != "server-memory":
            assert episode.profile.write_tool is not None
            args = self._generic_args(episode, episode.profile.write_tool, turn.content, scope.namespace)
            await self._call(episode, episode.profile.write_tool, args, meta)
            return
        entity = turn.speaker or scope.owner
        if entity in episode.speakers:
            add = {"observations": [{"entityName": entity, "contents": [turn.content]}]}
            await self._call(episode, "add_observations", add, meta)
            return
        create = {"entities": [{"name": entity, "entityType": "speaker", "observations": [turn.content]}]}
        await self._call(episode, "create_entities", create, meta)
        episode.speakers.add(entity)

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult:
        episode = self._episodes[scope.namespace]
        # The requester travels in _meta, so the trace says who was shown what; the suite's
        # namespace owner asks as the episode's namespace, which owns what was written.
        requester = scope.namespace if probe.requester == scope.owner else probe.requester
        meta = {"session": "probes", "turn": probe.probe_id, "role": "user", "requester": requester}
        started = time.perf_counter()
        retrieved = await self._search(episode, probe.question, scope.namespace, limit, meta)
        return ProbeResult(retrieved, (time.perf_counter() - started) * 1000)

    async def _search(
        self, episode: _Episode, query: str, namespace: str, limit: int, meta: dict[str, Any]
    ) -> list[Retrieved]:
        """The profile's search for ``query`` (the reference server: the whole query and each of its
        content words), the observations found ranked by how many of the words they hold."""
        if episode.profile.name != "server-memory":
            assert episode.profile.search_tool is not None
            args = self._generic_args(episode, episode.profile.search_tool, query, namespace, limit)
            result = await self._call(episode, episode.profile.search_tool, args, meta)
            return _generic_results(result, limit)
        words = _words(query)
        found: list[Any] = []
        for text in dict.fromkeys([query.strip(), *words]):
            if text:
                found.append(await self._call(episode, "search_nodes", {"query": text}, meta))
        scored: dict[tuple[str, str], float] = {}
        question = query.lower()
        for result in found:
            graph = graph_from_result(result.model_dump(by_alias=True, mode="json"))
            for entity, (_, observations) in graph.entities.items():
                for text in observations:
                    lowered = text.lower()
                    score = sum(1.0 for w in words if w in lowered) + (2.0 if question in lowered else 0.0)
                    if score > 0:
                        scored[(entity, text)] = score
        ranked = sorted(scored.items(), key=lambda kv: -kv[1])[:limit]
        return [
            Retrieved(observation_id(e, t), t, rank, score, provenance={"entity": e})
            for rank, ((e, t), score) in enumerate(ranked, start=1)
        ]

    def _generic_args(
        self, episode: _Episode, tool: str, text: str, namespace: str, limit: int | None = None
    ) -> dict[str, Any]:
        schema = episode.tools.get(tool, {}).get("inputSchema") or {}
        props: dict[str, Any] = schema.get("properties") or {}
        args: dict[str, Any] = {}
        if limit is None:
            args.update({k: v for k, v in episode.profile.fixed_write_args.items() if k in props})
        names = _TEXT_ARGS if limit is None else _QUERY_ARGS
        text_arg = next((n for n in names if n in props), None) or next(
            (
                n
                for n in schema.get("required") or []
                if props.get(n, {}).get("type") == "string" and n not in args
            ),
            None,
        )
        if text_arg is None:
            raise TargetError(
                f"upstream {self.server_name!r}: cannot tell which argument of {tool} takes the text"
            )
        args[text_arg] = text
        owner = next((n for n in _OWNER_ARGS if n in props), None)
        if owner is not None:
            args[owner] = namespace
        limit_arg = next((n for n in _LIMIT_ARGS if n in props), None) if limit is not None else None
        if limit_arg is not None:
            args[limit_arg] = limit
        return args

    async def close_episode(self, scope: EpisodeScope) -> None:
        episode = self._episodes.get(scope.namespace)
        if episode is not None:
            await episode.stack.aclose()  # the client, then the proxy (SIGTERM flushes its trace)
            del self._episodes[scope.namespace]  # only once closed: a cancelled close is finished by aclose()
            self._servers.remove(episode.server)

    async def aclose(self) -> None:
        for namespace in list(self._episodes):
            with contextlib.suppress(Exception):
                await self._episodes.pop(namespace).stack.aclose()
        for server in self._servers:  # stopping a stopped server only reads its exit code
            await anyio.to_thread.run_sync(server.stop)
        self._servers.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _generic_results(result: Any, limit: int) -> list[Retrieved]:
    """``results`` items with ids, when the server returns structured content of that shape."""
    data = result.structured_content
    items = data.get("results") if isinstance(data, dict) else None
    out: list[Retrieved] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("id") is not None:
            text = item.get("content") or item.get("memory") or item.get("fact") or ""
            out.append(Retrieved(str(item["id"]), str(text), i + 1, item.get("score")))
    return out[:limit]
