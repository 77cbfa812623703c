"""Upstreams that crash, never start, hang, answer nonsense, or lose their client mid-call."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from click.testing import CliRunner
from conftest import HUNG_TIMEOUT_S, ServerProcess, http_client, misbehaving_server, write_config
from mcp import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_TIMEOUT

from memtap.adapters.pool import UpstreamPool
from memtap.cli.main import cli
from memtap.config import StdioServerConfig
from memtap.errors import UpstreamUnavailable
from memtap.trace.models import EffectKind, Op
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]


def healthz(server: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as resp:
        return dict(json.load(resp))


def add(text: str) -> dict[str, Any]:
    return {"observations": [{"entityName": "alice", "contents": [text]}]}


async def test_killed_upstream_fails_the_next_call_and_the_one_after_succeeds_on_a_restart(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await client.call_tool("create_entities", {"entities": [{"name": "alice", "entityType": "person",
                                                                 "observations": ["before the crash"]}]})  # fmt: skip
        first = healthz(server)["upstreams"]["memory"]
        assert first["state"] == "ready" and first["starts"] == 1
        os.kill(first["pid"], signal.SIGKILL)
        with pytest.raises(MCPError) as crashed:
            await client.call_tool("add_observations", add("lost to the crash"))
        restarted = await client.call_tool("add_observations", add("after the restart"))
    assert crashed.value.code == INTERNAL_ERROR
    assert "upstream 'memory' was killed by SIGKILL" in crashed.value.message
    assert restarted.structured_content == {
        "results": [{"entityName": "alice", "addedObservations": ["after the restart"]}]
    }
    now = healthz(server)["upstreams"]["memory"]
    assert (now["state"], now["starts"], now["crashes"]) == ("ready", 2, 1)
    assert now["pid"] != first["pid"]
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    calls = [(e.tool, e.status) for e in events if e.front_door == "mcp-http"]
    assert calls == [("create_entities", "ok"), ("add_observations", "error"), ("add_observations", "ok")]
    failed, ok = [e for e in events if e.tool == "add_observations"]
    assert failed.error == crashed.value.message and failed.effects == []
    assert [(f.kind, f.content_after) for f in ok.effects] == [(EffectKind.ADD, "after the restart")]
    [exit_event] = [e for e in events if e.front_door == "upstream"]
    assert (exit_event.tool, exit_event.op, exit_event.backend, exit_event.status) == (
        "upstream/exit", Op.CONTROL, "memory", "error",
    )  # fmt: skip
    assert exit_event.error is not None and "killed by SIGKILL" in exit_event.error


async def test_bad_upstreams_get_clear_errors_recorded_events_and_spare_the_others(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    odd = {**misbehaving_server(), "memtap": {"timeout": HUNG_TIMEOUT_S}}
    config = write_config(
        tmp_path,
        {
            "memory": memory_server,
            "odd": odd,
            "missing": {"command": str(tmp_path / "no-such-server")},
            "dies": misbehaving_server(EXIT_AT_START="3"),
        },
    )
    server = start_http_server("--config", str(config), command="proxy")
    base = f"http://127.0.0.1:{server.port}"
    async with http_client(server.url) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        ok_memory = await client.call_tool("memory__search_nodes", {"query": "anything"})
        ok_odd = await client.call_tool("odd__search_nodes", {"query": "anything"})
        errors: dict[str, MCPError] = {}
        for tool in ("malformed", "hang", "no_such_tool", "crash"):
            with pytest.raises(MCPError) as err:
                await client.call_tool(tool, {})
            errors[tool] = err.value
        echoed = await client.call_tool("echo", {"text": "still here"})  # on a restarted upstream
        prompt = await client.get_prompt("greet", {"who": "Ada"})
    # The memory server and the misbehaving one share search_nodes: both are prefixed, nothing else is.
    assert {"memory__search_nodes", "odd__search_nodes", "create_entities", "echo", "hang"} <= names
    assert "search_nodes" not in names
    assert ok_memory.structured_content == {"entities": [], "relations": []}
    assert ok_odd.content[0].text == "odd search"  # type: ignore[union-attr]
    assert (errors["malformed"].code, errors["hang"].code) == (INTERNAL_ERROR, REQUEST_TIMEOUT)
    assert "upstream 'odd' returned a malformed result for malformed: content" in errors["malformed"].message
    assert errors["hang"].message == f"upstream 'odd' did not answer tools/call within {HUNG_TIMEOUT_S} s"
    assert errors["no_such_tool"].code == INVALID_PARAMS
    assert errors["no_such_tool"].message.startswith("unknown tool 'no_such_tool'; the upstreams offer: ")
    # an upstream that is not up may offer it: the error names those (failed here), not the ready ones
    assert "; not listed yet: 'missing' is failed (" in errors["no_such_tool"].message
    assert "'memory' is" not in errors["no_such_tool"].message
    assert "upstream 'odd' exited with code 7" in errors["crash"].message
    assert echoed.content[0].text == "still here"  # type: ignore[union-attr]
    assert prompt.messages[0].content.text == "Say hello to Ada."  # type: ignore[union-attr]

    async with http_client(f"{base}/servers/missing/mcp") as client:
        with pytest.raises(MCPError) as missing:
            await client.list_tools()
    async with http_client(f"{base}/servers/dies/mcp") as client:
        with pytest.raises(MCPError) as dies:
            await client.list_tools()
    async with httpx2.AsyncClient() as http:
        unknown = await http.post(
            f"{base}/servers/nope/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
    assert f"upstream 'missing': command not found: '{tmp_path}/no-such-server'" in missing.value.message
    assert "upstream 'dies' exited with code 3 during start (stderr: misbehaving: refusing to start)" in (
        dies.value.message
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == (
        "unknown upstream 'nope'; this proxy wraps: memory, odd, missing, dies"
    )

    states = {name: up["state"] for name, up in healthz(server)["upstreams"].items()}
    assert states == {"memory": "ready", "odd": "ready", "missing": "failed", "dies": "failed"}
    shown = CliRunner().invoke(cli, ["proxy", "status", "--db", str(server.db)])
    assert shown.exit_code == 0, shown.output
    lines = {line.split()[1]: line for line in shown.output.splitlines()[2:]}
    assert "failed" in lines["missing"] and "command not found" in lines["missing"]
    assert "ready" in lines["memory"] and "server-memory" in lines["memory"]

    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    by_tool = {(e.backend, e.tool): e for e in events}
    assert by_tool[("memory", "search_nodes")].status == "ok"  # nothing lost for the healthy upstream
    assert by_tool[("odd", "search_nodes")].status == "ok"
    assert by_tool[("odd", "echo")].status == "ok"
    for tool in ("malformed", "hang", "crash"):
        assert by_tool[("odd", tool)].error == errors[tool].message
    assert by_tool[("proxy", "no_such_tool")].op == Op.CONTROL
    assert by_tool[("proxy", "servers/nope")].error == unknown.json()["error"]["message"]
    starts = {e.backend for e in events if e.tool == "upstream/start"}
    assert starts == {"missing", "dies"}
    assert {e.backend for e in events if e.tool == "upstream/exit"} == {"odd"}


async def test_client_that_disconnects_mid_call_loses_no_event_and_the_proxy_stays_up(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    config = write_config(tmp_path, {"odd": {**misbehaving_server(), "memtap": {"timeout": HUNG_TIMEOUT_S}}})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await client.list_tools()
        with anyio.move_on_after(0.3):  # the client gives up and closes its session mid-call
            await client.call_tool("hang", {})
    async with http_client(server.url) as client:
        echoed = await client.call_tool("echo", {"text": "next client"})
    assert echoed.content[0].text == "next client"  # type: ignore[union-attr]
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert [(e.tool, e.status) for e in events] == [("hang", "error"), ("echo", "ok")]
    assert events[0].error == f"upstream 'odd' did not answer tools/call within {HUNG_TIMEOUT_S} s"


async def test_failed_start_backs_off_and_a_call_that_cannot_wait_is_refused_at_once(
    tmp_path: Path, db_path: Path
) -> None:
    recorder = Recorder(db_path).start()
    dies = StdioServerConfig.model_validate(
        {**misbehaving_server(EXIT_AT_START="3"), "memtap": {"timeout": 0.2}}
    )
    pool = UpstreamPool({"dies": dies}, recorder, eager=False)
    upstream = pool.get("dies")
    async with pool.run():
        assert upstream.status()["state"] == "idle"  # lazy: nothing started before the first use
        with pytest.raises(UpstreamUnavailable, match="exited with code 3 during start"):
            await upstream.connection(timeout=10)
        status = upstream.status()
        assert status["state"] == "failed" and 0 < status["retry_in_s"] <= 0.25
        with pytest.raises(UpstreamUnavailable, match=r"next start attempt in 0\.\d s"):
            await upstream.connection()  # 0.2 s of timeout cannot wait out the backoff
        with pytest.raises(UpstreamUnavailable, match="exited with code 3 during start"):
            await upstream.connection(timeout=10)  # this one can: it waits, and the retry fails too
        failed_by = time.monotonic()
        # The second failure, just before failed_by, set the next attempt 2 x 0.25 s after itself
        # (undoubled, it would be at most failed_by + 0.25).
        assert failed_by + 0.4 < upstream.next_attempt <= failed_by + 0.5
    recorder.close()
    store = TraceStore(db_path)
    events = store.list_events()
    store.close()
    assert [(e.tool, e.status, e.backend) for e in events] == [("upstream/start", "error", "dies")] * 2


async def test_an_upstream_that_changes_its_tools_at_run_time_is_listed_and_classified_again(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    """The server sends notifications/tools/list_changed: memtap lists its tools again, offers
    the new one, classifies it like any other (by its name here) and records its calls."""
    from memtap.trace.models import Op
    from memtap.trace.store import TraceStore

    config = write_config(tmp_path, {"odd": misbehaving_server()})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        await client.call_tool("grow", {})
        after = {t.name for t in (await client.list_tools()).tools}
        stored = await client.call_tool("remember_fact", {"text": "Ada likes tea"})
    assert server.stop() == 0
    assert "remember_fact" not in before and after == before | {"remember_fact"}
    assert stored.content[0].text == "stored memory 1"  # type: ignore[union-attr]
    store = TraceStore(server.db)
    (event,) = [e for e in store.list_events() if e.tool == "remember_fact"]
    store.close()
    assert (event.status, event.op, event.backend) == ("ok", Op.WRITE, "odd")
