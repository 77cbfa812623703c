"""Shared fixtures: real SQLite files under tmp_path, real memtap servers on free ports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import RequestParamsMeta
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtap.errors import MemtapError
from memtap.limits import DEFAULT_LIMITS, install
from memtap.probes.targets._server import announced_port, health, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
MEMORY_SERVER = ROOT / "node_modules" / ".bin" / "mcp-server-memory"
MISBEHAVING = ROOT / "tests" / "upstreams" / "misbehaving.py"
# How long a memtap child may take to say its port and answer /healthz: a readiness wait, not a
# bound under test, so it is generous (a start takes seconds on a 2-core machine at load 8 and more).
START_TIMEOUT_S = 120.0
# The timeout of an upstream a test hangs on purpose (SIGSTOP, a tool that never answers): the call
# must time out, but the upstream's start and its other calls must fit in it on a loaded machine.
HUNG_TIMEOUT_S = 5


def meta(**fields: Any) -> RequestParamsMeta:
    """An MCP request _meta carrying memtap context."""
    return cast(RequestParamsMeta, {"memtap": fields})


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's ~/.memtap or inherits a MEMTAP_DB."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEMTAP_DB", raising=False)
    monkeypatch.delenv("MEMTAP_API_KEYS", raising=False)


@pytest.fixture(autouse=True)
def _default_limits() -> Iterator[None]:
    """A test that serves memtap with other caps (memtap.limits, per process) leaves the defaults."""
    yield
    install(DEFAULT_LIMITS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "trace.db"


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    db: Path
    log: Path | None = None  # its standard error, when started by start_http_server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def stderr(self) -> str:
        if self.log is not None:
            return self.log.read_text(errors="replace")
        return self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""


@pytest.fixture
def memory_server(tmp_path: Path) -> dict[str, Any]:
    """An mcpServers entry for the real reference memory server (npm, pinned in package.json)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed; the reference MCP memory server runs on node")
    if not MEMORY_SERVER.exists():
        pytest.fail(f"{MEMORY_SERVER} is missing: run `make test` (it runs npm ci) or `npm ci` first")
    return {"command": str(MEMORY_SERVER), "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}}


def misbehaving_server(**env: str) -> dict[str, Any]:
    """An mcpServers entry for tests/upstreams/misbehaving.py."""
    return {"command": sys.executable, "args": [str(MISBEHAVING)], "env": env}


def write_config(tmp_path: Path, servers: dict[str, Any], name: str = "memtap.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.fixture
def start_http_server(db_path: Path, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start ``memtap serve --http`` on port 0 (the port it binds is read from what it prints,
    so no other process can take it in between); every server is stopped after the test."""
    started: list[ServerProcess] = []

    def start(
        *extra: str, db: Path | None = None, env: dict[str, str] | None = None, command: str = "serve"
    ) -> ServerProcess:
        target = db or db_path
        cmd = [
            sys.executable,
            "-m",
            "memtap",
            command,
            "--http",
            "127.0.0.1:0",
            "--db",
            str(target),
            *extra,
        ]
        log = tmp_path / f"server-{len(started)}.stderr"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **(env or {})}
            )
        server = ServerProcess(proc, 0, target, log)
        started.append(server)
        server.port = announced_port(server.stderr, proc, START_TIMEOUT_S) or 0
        healthy = server.port and wait_healthy(f"http://127.0.0.1:{server.port}", proc, START_TIMEOUT_S)
        if not healthy:
            raise MemtapError(
                f"memtap {command} did not start (exit {proc.poll()}): {server.stderr()[-500:]}"
            )
        if command == "proxy":
            wait_upstreams_settled(f"http://127.0.0.1:{server.port}")
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


def wait_upstreams_settled(base_url: str, timeout: float = START_TIMEOUT_S) -> None:
    """Until every upstream of a ``memtap proxy`` has finished its first start (ready, failed...),
    as its /healthz says: the proxy offers an upstream's tools once it has listed them, so a call
    made while a slow upstream (node, on a loaded machine) still starts finds no such tool."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = {u["state"] for u in (health(base_url).get("upstreams") or {}).values()}
        except OSError:  # a slow answer on a loaded machine: ask again
            states = {"starting"}
        if not states & {"idle", "starting"}:
            return
        time.sleep(0.05)


@asynccontextmanager
async def http_client(
    url: str, headers: dict[str, str] | None = None, transport: httpx2.AsyncBaseTransport | None = None
) -> AsyncIterator[Client]:
    # 30 s, not httpx's 5 s: on a loaded 2-core machine a burst of writes to the reference
    # server's file can take longer than 5 s to answer; tests of slow answers use server timeouts.
    async with (
        httpx2.AsyncClient(headers=headers or {}, transport=transport, timeout=30.0) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans memtap emits in this process, captured by the SDK's in-memory exporter."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def run_memory_script(client: Client) -> dict[str, str]:
    """The scripted session both MCP transports are tested with; returns the item ids."""
    gym = await client.call_tool(
        "memory_add",
        {
            "content": "The user goes to FitLife on Tuesdays.",
            "session": "s0",
            "turn": "s0-t0",
            "role": "user",
        },
        meta=meta(run="r1", episode="e1"),
    )
    colour = await client.call_tool(
        "memory_add",
        {
            "content": "Favourite colour: green.",
            "access": {"visibility": "participants", "participants": ["bob"]},
        },
        meta=meta(run="r1", episode="e1", session="s0", turn="s0-t1", role="user"),
    )
    ids = {"gym": gym.structured_content["id"], "colour": colour.structured_content["id"]}  # type: ignore[index]
    await client.call_tool(
        "memory_update",
        {"id": ids["gym"], "content": "The user switched to CrossFit Central."},
        meta=meta(run="r1", episode="e1", session="s9", turn="s9-t0", role="user"),
    )
    await client.call_tool(
        "memory_delete", {"id": ids["colour"], "reason": "asked to forget"},
        meta=meta(run="r1", episode="e1", session="s9", turn="s9-t1", role="user"),
    )  # fmt: skip
    found = await client.call_tool(
        "memory_search", {"query": "which gym CrossFit", "requester": "bob"},
        meta=meta(run="r1", episode="e1", session="p", turn="p0"),
    )  # fmt: skip
    assert found.structured_content is not None
    assert [r["id"] for r in found.structured_content["results"]] == [ids["gym"]]
    missing = await client.call_tool("memory_get", {"id": "mem_nope"}, meta=meta(run="r1"))
    assert missing.is_error
    return ids


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[Any]:
    """The fake hosted LLM (an OpenAI-compatible server on a free port), shared by the tests."""
    from fake_openai import FakeUpstream

    upstream = FakeUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def upstream(fake_upstream: Any) -> Any:
    fake_upstream.state.reset()
    return fake_upstream


@pytest.fixture
def serve_memtap(db_path: Path, upstream: Any) -> Iterator[Callable[..., Any]]:
    """Start memtap's app in this process with a config whose model_list points at the fake upstream."""
    from served import ServedMemtap

    started: list[ServedMemtap] = []

    def start(memtap: dict[str, Any] | None = None, *, models: list[dict[str, Any]] | None = None,
              mcp_servers: dict[str, Any] | None = None, **settings: Any) -> ServedMemtap:  # fmt: skip
        model_list = models if models is not None else [
            {"model_name": "gpt-fake", "litellm_params": {"model": "openai/fake-1", "api_base": upstream.base_url,
                                                          "api_key": "sk-upstream-secret"}},
        ]  # fmt: skip
        config = {"model_list": model_list, "memtap": memtap or {}, "mcpServers": mcp_servers or {}}
        served = ServedMemtap(db_path, config, **settings).start()
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
