"""The CLI through click's runner (and a real subprocess for `trace tail`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from memtap.adapters.builtin import BuiltinBackend
from memtap.cli.main import cli
from memtap.proxy.service import MemoryService
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder


async def _populate(db: Path) -> dict[str, str]:
    recorder = Recorder(db).start()
    backend = BuiltinBackend(db)
    service = MemoryService(backend, recorder)

    async def call(tool: str, args: dict[str, object], **ctx: str) -> dict[str, object]:
        outcome = await service.call_tool(tool, args, principal="alice", front_door="test", layers=(ctx,))
        return outcome.value  # type: ignore[no-any-return]

    gym = await call(
        "memory_add", {"content": "Alice goes to FitLife."}, session="s0", turn="t0", role="user"
    )
    tea = await call("memory_add", {"content": "Alice likes green tea."}, session="s0", turn="t1")
    await call("memory_update", {"id": gym["id"], "content": "Alice goes to CrossFit."}, session="s1")
    await call("memory_delete", {"id": tea["id"]}, session="s1")
    await call("memory_search", {"query": "gym CrossFit"}, session="s2")
    await backend.close()
    recorder.close()
    return {"gym": str(gym["id"]), "tea": str(tea["id"])}


@pytest.fixture
def populated(db_path: Path) -> dict[str, str]:
    return anyio.run(_populate, db_path)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_trace_list_json_prints_one_event_object_per_line(db_path: Path, populated: dict[str, str]) -> None:
    code, out, _ = _run("trace", "list", "--db", str(db_path), "--json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["op"] for e in events] == ["write", "write", "update", "delete", "retrieve"]
    for event in events:
        assert {"id", "op", "tool", "context", "effects", "status"} <= set(event)
    assert events[0]["context"]["session"] == "s0" and events[0]["context"]["role"] == "user"
    assert events[2]["effects"][0]["content_before"] == "Alice goes to FitLife."
    assert events[4]["effects"][0]["item_id"] == populated["gym"]


def test_trace_list_filters_by_op_and_namespace_and_reads_memtap_db(
    db_path: Path, populated: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_DB", str(db_path))
    code, out, _ = _run("trace", "list", "--op", "update", "--json")
    assert code == 0 and [json.loads(line)["tool"] for line in out.splitlines()] == ["memory_update"]
    code, out, _ = _run("trace", "list", "--namespace", "alice", "--json")
    assert code == 0 and len(out.splitlines()) == 5
    code, out, err = _run("trace", "list", "--namespace", "nobody")
    assert code == 0 and out == "" and "no events" in err


def test_trace_show_prints_the_whole_event(db_path: Path, populated: dict[str, str]) -> None:
    _, out, _ = _run("trace", "list", "--db", str(db_path), "--json", "--op", "delete")
    event_id = json.loads(out)["id"]
    code, out, _ = _run("trace", "show", event_id, "--db", str(db_path))
    shown = json.loads(out)
    assert code == 0 and shown["id"] == event_id and shown["effects"][0]["kind"] == "delete"


def test_items_list_show_and_history(db_path: Path, populated: dict[str, str]) -> None:
    code, out, _ = _run("items", "list", "--db", str(db_path), "--json")
    assert code == 0 and [json.loads(line)["item_id"] for line in out.splitlines()] == [populated["gym"]]
    code, out, _ = _run("items", "list", "--all", "--db", str(db_path))
    assert populated["tea"] in out and "closed" in out
    code, out, _ = _run("items", "history", populated["gym"], "--db", str(db_path), "--json")
    versions = [json.loads(line) for line in out.splitlines()]
    assert [(v["version"], v["op"], v["content"]) for v in versions] == [
        (1, "add", "Alice goes to FitLife."),
        (2, "update", "Alice goes to CrossFit."),
    ]
    code, out, _ = _run("items", "show", populated["tea"], "--db", str(db_path))
    assert code == 0 and "deleted at" in out and "session=s0 turn=t1" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("trace", "list", "--db", "{missing}"), "no trace database at"),
        (("trace", "show", "NOPE", "--db", "{db}"), "no event 'NOPE'"),
        (("items", "show", "mem_nope", "--db", "{db}"), "no memory item 'mem_nope'"),
        (("serve", "--http", "0.0.0.0:8750", "--db", "{db}"), "refusing to bind 0.0.0.0"),
        (("serve", "--http", "127.0.0.1:notaport", "--db", "{db}"), "no valid port"),
        (("serve", "--api-key", "justakey", "--db", "{db}"), "KEY=PRINCIPAL"),
    ],
)
def test_errors_are_one_clear_line_with_exit_code_2(
    db_path: Path, populated: dict[str, str], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    argv = [a.format(db=db_path, missing=tmp_path / "missing.db") for a in args]
    code, _, err = _run(*argv)
    assert code == 2
    assert err.startswith("memtap: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_database_from_a_newer_memtap_is_a_clear_cli_error(
    db_path: Path, populated: dict[str, str]
) -> None:
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES ('memtap.trace', 'm999_future', 'x')"
        )
    code, _, err = _run("trace", "list", "--db", str(db_path))
    assert code == 2 and "newer memtap" in err and "m999_future" in err


def test_the_cli_starts_without_loading_the_servers_or_litellm() -> None:
    # Start-up time follows from what is imported (litellm alone takes seconds); timing it here
    # would only measure the machine.
    out = subprocess.run(
        [sys.executable, "-c", "import sys, memtap.cli.main; print(sorted(m for m in sys.modules if m in "
         "{'mcp', 'fastapi', 'uvicorn', 'litellm', 'opentelemetry.sdk'}))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_trace_tail_follows_new_events(db_path: Path, populated: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memtap", "trace", "tail", "--db", str(db_path), "--last", "1", "--count", "2",
         "--json", "--interval", "0.05"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["op"] == "retrieve"  # the backlog: the last recorded event

    async def more() -> None:
        recorder = Recorder(db_path).start()
        backend = BuiltinBackend(db_path)
        service = MemoryService(backend, recorder)
        for text in ("new fact one", "new fact two"):
            await service.call_tool("memory_add", {"content": text}, principal="alice", front_door="test")
        await backend.close()
        recorder.close()

    anyio.run(more)
    followed = [json.loads(proc.stdout.readline()) for _ in range(2)]
    assert proc.wait(timeout=30) == 0
    assert [e["effects"][0]["content_after"] for e in followed] == ["new fact one", "new fact two"]


@pytest.mark.parametrize("command", ["serve", "ui"])
def test_a_port_in_use_is_one_clear_error_and_port_0_takes_a_free_one(
    db_path: Path, command: str, start_http_server: Any
) -> None:
    """The HTTP front doors bind before they say where they serve: a port in use is named in one
    line (exit 2), not a traceback after "serving at"; port 0 serves on the port it prints."""
    TraceStore(db_path).close()  # the dashboard serves an existing trace
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "memtap", command, "--http", f"127.0.0.1:{port}", "--db", str(db_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert done.stderr.strip() == f"memtap: error: cannot listen on 127.0.0.1:{port}: address already in use"
    server = start_http_server(command=command)  # the fixture passes --http 127.0.0.1:0
    assert server.port not in (0, port)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as response:
        assert response.status == 200
