"""Reconciliation: a wrapped server's writes that memtap could not observe end up in the trace anyway."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from conftest import HUNG_TIMEOUT_S, MEMORY_SERVER, ROOT, ServerProcess, http_client, write_config
from mcp import MCPError

from memtap.adapters.memory_server import observation_id
from memtap.cli.main import cli
from memtap.trace.models import EffectKind
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]
KILL_AFTER_SAVE = ROOT / "tests" / "upstreams" / "kill_after_save.py"
HOLD_WRITE = ROOT / "tests" / "upstreams" / "hold_write.py"
HELD = "moved to Oslo HOLD-UNTIL-RELEASE"


def add(entity: str, text: str) -> dict[str, Any]:
    return {"observations": [{"entityName": entity, "contents": [text]}]}


def upstream_pid(server: ServerProcess, name: str = "memory") -> int:
    """The upstream's pid, once the proxy has finished with every call so far (answered first, a
    call's state read and its event come after): a SIGSTOP then hangs only the next call."""
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as resp:
            health = json.load(resp)
        recorder = health["recorder"]
        if (recorder["open_calls"], recorder["pending"]) == (0, 0) or time.monotonic() > deadline:
            return int(health["upstreams"][name]["pid"])
        time.sleep(0.02)


def file_observations(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if item.get("type") == "entity":
            found[item["name"]] = item["observations"]
    return found


def kill_after_save(tmp_path: Path, **env: str) -> Path:
    """A config wrapping the real memory server behind a shim that kills it right after it saves a
    write whose text holds KILL-AFTER-SAVE (``env``: where the memory file goes)."""
    shim = {
        "command": sys.executable,
        "args": [str(KILL_AFTER_SAVE)],
        "env": {**env, "MEMTAP_TEST_MEMORY_SERVER": str(MEMORY_SERVER)},
    }
    return write_config(tmp_path, {"memory": shim})


def hold_write(tmp_path: Path, memory_file: Path, release: str) -> Path:
    """A config wrapping the real memory server behind a shim that holds a write whose text holds
    HOLD-UNTIL-RELEASE until a later call with RELEASE-HELD (``release``: after that call's answer,
    or with that call, the two handled at once)."""
    shim = {
        "command": sys.executable,
        "args": [str(HOLD_WRITE)],
        "env": {
            "MEMORY_FILE_PATH": str(memory_file),
            "MEMTAP_TEST_MEMORY_SERVER": str(MEMORY_SERVER),
            "MEMTAP_TEST_RELEASE": release,
        },
        "memtap": {"timeout": HUNG_TIMEOUT_S},
    }
    return write_config(tmp_path, {"memory": shim})


async def held_write(client: Any) -> MCPError:
    """dan and erin created, then a write to dan that the hold_write shim holds: its timeout error."""
    await create_person(client, "dan", "likes jazz")
    await create_person(client, "erin", "plays cello")
    with pytest.raises(MCPError) as held:
        await client.call_tool("add_observations", add("dan", HELD))
    return held.value


async def create_person(client: Any, name: str, *observations: str) -> None:
    entity = {"name": name, "entityType": "person", "observations": list(observations)}
    result = await client.call_tool("create_entities", {"entities": [entity]})
    assert not result.is_error, result


async def write_while_hung(
    server: ServerProcess, client: Any, memory_file: Path, entity: str, text: str
) -> MCPError:
    """Add ``text`` while the upstream is stopped (SIGSTOP), so the call times out; resume it and
    wait until the server has saved the write memtap gave up on. The call's error."""
    pid = upstream_pid(server)
    os.kill(pid, signal.SIGSTOP)  # a hung upstream: the write waits in its input
    try:
        with pytest.raises(MCPError) as hung:
            await client.call_tool("add_observations", add(entity, text))
    finally:
        os.kill(pid, signal.SIGCONT)
    with anyio.move_on_after(20):  # the server resumes and saves the write memtap gave up on
        while text not in file_observations(memory_file).get(entity, []):
            await anyio.sleep(0.02)
    assert text in file_observations(memory_file).get(entity, []), f"never saved; the call got: {hung.value}"
    return hung.value


def verify(db: Path, config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["verify", "--db", str(db), "--config", str(config), "--server", "memory", "--json", *extra]
    )
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.output)


async def test_a_write_saved_before_the_upstream_was_killed_is_reconciled_onto_its_failed_event(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    memory_file = tmp_path / "memory.jsonl"
    config = kill_after_save(tmp_path, MEMORY_FILE_PATH=str(memory_file))
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await create_person(client, "alice", "likes tea")
        with pytest.raises(MCPError) as killed:
            await client.call_tool("add_observations", add("alice", "moved to Lyon KILL-AFTER-SAVE"))
        after = await client.call_tool("add_observations", add("alice", "after the restart"))
    assert "upstream 'memory'" in killed.value.message and "exited" in killed.value.message
    assert after.is_error is False
    # The server saved the write it was killed for: the file holds it, and so does the trace.
    assert file_observations(memory_file)["alice"] == [
        "likes tea", "moved to Lyon KILL-AFTER-SAVE", "after the restart",
    ]  # fmt: skip
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = [e for e in store.list_events() if e.tool == "add_observations"]
    saved = store.get_item(observation_id("alice", "moved to Lyon KILL-AFTER-SAVE"))
    store.close()
    failed, ok = events
    assert failed.status == "error" and failed.error == killed.value.message
    [effect] = failed.effects
    assert (effect.kind, effect.content_after, effect.reconciled) == (
        EffectKind.ADD, "moved to Lyon KILL-AFTER-SAVE", True,
    )  # fmt: skip
    assert effect.evidence is not None
    assert effect.evidence["read"] == f"file {memory_file}"
    assert effect.evidence["event"] == failed.id and effect.evidence["entities"] == ["alice"]
    assert "UpstreamUnavailable" in effect.evidence["why"] and effect.evidence["read_at"]
    assert [(e.kind, e.reconciled) for e in ok.effects] == [(EffectKind.ADD, False)]
    assert saved is not None and saved.is_valid and saved.provenance.event_id == failed.id
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])


@pytest.mark.serial  # SIGSTOPs its upstream: runs alone, after the parallel part
async def test_a_write_that_lands_after_its_timeout_is_reconciled_before_the_next_write(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    memory_file = tmp_path / "memory.jsonl"
    config = write_config(tmp_path, {"memory": {**memory_server, "memtap": {"timeout": HUNG_TIMEOUT_S}}})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await create_person(client, "bob", "plays chess")
        hung = await write_while_hung(server, client, memory_file, "bob", "learned go")
        await client.call_tool("add_observations", add("bob", "won a game"))
    assert hung.message == f"upstream 'memory' did not answer tools/call within {HUNG_TIMEOUT_S} s"
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    [timed_out] = [e for e in events if e.status == "error"]
    assert timed_out.tool == "add_observations" and timed_out.effects == []  # not saved when it failed
    [settled] = [e for e in events if e.tool == "upstream/reconcile"]
    assert settled.id > timed_out.id and settled.backend == "memory" and settled.status == "ok"
    [effect] = settled.effects
    assert (effect.kind, effect.item_id, effect.reconciled) == (
        EffectKind.ADD, observation_id("bob", "learned go"), True,
    )  # fmt: skip
    assert effect.evidence is not None and effect.evidence["event"] == timed_out.id
    # Read before the next write (`final` or not: whether the call's late answer, sent right after the
    # save the test waited for, had reached memtap by then; the next test pins `final`).
    assert effect.evidence["read"] == f"file {memory_file}"
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])


async def test_upstream_sigkilled_mid_load_leaves_a_trace_equal_to_its_file(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    memory_file = tmp_path / "memory.jsonl"
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), command="proxy")
    answered: dict[str, int] = {"ok": 0, "error": 0}
    kills = 0

    async def writer(n: int) -> None:
        async with http_client(server.url) as client:
            await client.call_tool("create_entities", {"entities": [{"name": f"e{n}", "entityType": "t",
                                                                     "observations": []}]})  # fmt: skip
            for i in range(40):
                try:
                    result = await client.call_tool("add_observations", add(f"e{n}", f"fact {n}.{i}"))
                    answered["error" if result.is_error else "ok"] += 1
                except MCPError:
                    answered["error"] += 1

    async def killer() -> None:
        nonlocal kills
        while kills < 3:
            # Kill once the file has grown by a few writes since the last kill: always mid-load.
            target = sum(len(v) for v in file_observations(memory_file).values()) + 15
            with anyio.fail_after(30):
                while sum(len(v) for v in file_observations(memory_file).values()) < target:
                    await anyio.sleep(0.01)
            with anyio.fail_after(30):
                while True:
                    try:
                        pid = upstream_pid(server)
                        break
                    except (TypeError, ValueError):
                        await anyio.sleep(0.01)  # restarting: no pid yet
            os.kill(pid, signal.SIGKILL)
            kills += 1

    memory_file.write_text("")
    async with anyio.create_task_group() as tg:
        tg.start_soon(killer)
        for n in range(8):
            tg.start_soon(writer, n)
    assert kills == 3 and answered["error"] >= 3 and answered["ok"] + answered["error"] == 8 * 40
    assert server.stop() == 0
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])
    saved = sum(len(v) for v in file_observations(memory_file).values())
    assert report["backend_items"] == saved + 8  # every observation and entity in the file is a trace item


async def test_a_timed_out_write_carried_out_after_later_writes_were_answered_is_still_reconciled(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    # The server runs its handlers concurrently: a write it was too busy to answer in time can be
    # saved after later writes were answered. Only its own late answer says it has ended.
    memory_file = tmp_path / "memory.jsonl"
    config = hold_write(tmp_path, memory_file, "after")
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        held = await held_write(client)
        await client.call_tool("add_observations", add("dan", "bought a bike"))
        await client.call_tool("add_observations", add("erin", "joined a quartet RELEASE-HELD"))
        with anyio.move_on_after(20):  # let in once that call was answered
            while HELD not in file_observations(memory_file).get("dan", []):
                await anyio.sleep(0.02)
    assert held.message == f"upstream 'memory' did not answer tools/call within {HUNG_TIMEOUT_S} s"
    assert file_observations(memory_file)["dan"] == ["likes jazz", "bought a bike", HELD]
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    [timed_out] = [e for e in events if e.status == "error"]
    [settled] = [e for e in events if e.tool == "upstream/reconcile"]
    [effect] = settled.effects
    assert (effect.kind, effect.item_id, effect.reconciled) == (
        EffectKind.ADD, observation_id("dan", HELD), True,
    )  # fmt: skip
    assert effect.evidence is not None and effect.evidence["event"] == timed_out.id
    assert effect.evidence["final"] is True
    # Its read covers the write answered while it was in flight (a late save may undo that one).
    assert effect.evidence["entities"] == ["dan", "erin"]
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])


async def test_a_late_write_handled_together_with_a_later_one_leaves_the_trace_equal_to_the_file(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    # The held write and a later one are handled at once: each loads the graph and saves what it
    # loaded, so the server loses one of the two (its own lost update), whichever saves first; the
    # trace must end equal to the file either way. (Which one is lost, and whether memtap reads
    # the later write's state before or after the late save, is the server's timing: the test
    # above pins the late answer and the widened read.)
    memory_file = tmp_path / "memory.jsonl"
    config = hold_write(tmp_path, memory_file, "with")
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await held_write(client)
        answered = await client.call_tool("add_observations", add("erin", "joined a quartet RELEASE-HELD"))
    assert answered.is_error is False
    assert server.stop() == 0  # the server has ended: whatever it saved is in the file
    saved = file_observations(memory_file)
    assert (HELD in saved["dan"]) + ("joined a quartet RELEASE-HELD" in saved["erin"]) >= 1
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])


def test_verify_reports_a_builtin_row_written_behind_memtaps_back_and_records_it(db_path: Path) -> None:
    import sqlite3

    from memtap.adapters.builtin import BuiltinBackend
    from memtap.proxy.service import MemoryService
    from memtap.trace.writer import Recorder

    async def session() -> list[str]:
        backend = BuiltinBackend(db_path)
        recorder = Recorder(db_path, durable=True).start()
        service = MemoryService(backend, recorder)
        ids = []
        for text in ("kept", "changed later", "deleted later"):
            outcome = await service.call_tool(
                "memory_add", {"content": text}, principal="ann", front_door="test"
            )
            ids.append(outcome.value["id"])
        await backend.close()
        recorder.close()
        return ids

    kept, changed, deleted = anyio.run(session)
    with sqlite3.connect(db_path) as conn:  # behind memtap's back
        conn.execute(
            "INSERT INTO builtin_memory (item_id, namespace, version, content, created_at, valid_from)"
            " VALUES ('mem_sneaky', 'ann', 1, 'written behind its back', '2026-01-01', '2026-01-01')"
        )
        conn.execute(
            "UPDATE builtin_memory SET content = 'changed behind its back' WHERE item_id = ?", (changed,)
        )
        conn.execute("UPDATE builtin_memory SET valid_to = '2026-01-02' WHERE item_id = ?", (deleted,))
    runner = CliRunner()
    first = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--json"])
    assert first.exit_code == 1, first.output
    report = json.loads(first.output)
    assert [
        (d["kind"], d["item_id"], d["trace_content"], d["backend_content"]) for d in report["differences"]
    ] == [
        ("missing_in_trace", "mem_sneaky", None, "written behind its back"),
        ("content_differs", changed, "changed later", "changed behind its back"),
        ("deleted_in_backend_only", deleted, "deleted later", None),
    ]
    assert report["backend_items"] == 3 and report["recorded_event"] is None
    text = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin"])
    assert text.exit_code == 1 and "3 difference(s)" in text.output and "mem_sneaky" in text.output
    recorded = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--record", "--json"])
    assert recorded.exit_code == 1
    event_id = json.loads(recorded.output)["recorded_event"]
    again = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["differences"] == []
    store = TraceStore(db_path)
    event = store.get_event(event_id)
    sneaky, kept_item = store.get_item("mem_sneaky"), store.get_item(kept)
    store.close()
    assert event is not None and event.tool == "memtap/verify" and event.op == "control"
    assert [(e.kind, e.item_id, e.reconciled) for e in event.effects] == [
        (EffectKind.ADD, "mem_sneaky", True), (EffectKind.UPDATE, changed, True), (EffectKind.DELETE, deleted, True),
    ]  # fmt: skip
    assert event.effects[0].evidence == {
        "why": "memtap verify --record", "read": f"builtin_memory in {db_path}",
        "read_at": event.effects[0].evidence["read_at"], "difference": "missing_in_trace",  # type: ignore[index]
    }  # fmt: skip
    assert sneaky is not None and sneaky.content == "written behind its back" and sneaky.namespace == "ann"
    assert kept_item is not None and kept_item.version == 1  # what matched was left alone


def test_verify_needs_one_backend_and_says_so() -> None:
    result = CliRunner().invoke(cli, ["verify", "--db", "nowhere.db"])
    assert result.exit_code == 2
    assert "give exactly one of --builtin or --server NAME" in result.output


@pytest.mark.serial  # SIGSTOPs its upstream: runs alone, after the parallel part
async def test_a_late_write_with_no_write_after_it_is_reconciled_when_the_proxy_stops(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    memory_file = tmp_path / "memory.jsonl"
    config = write_config(tmp_path, {"memory": {**memory_server, "memtap": {"timeout": HUNG_TIMEOUT_S}}})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await create_person(client, "cy")
        await write_while_hung(server, client, memory_file, "cy", "late but saved")
    assert server.stop() == 0
    store = TraceStore(server.db)
    [settled] = [e for e in store.list_events() if e.tool == "upstream/reconcile"]
    item = store.get_item(observation_id("cy", "late but saved"))
    store.close()
    assert [(e.kind, e.content_after) for e in settled.effects] == [(EffectKind.ADD, "late but saved")]
    assert settled.effects[0].evidence is not None and settled.effects[0].evidence["final"] is True
    assert item is not None and item.is_valid
    code, report = verify(server.db, config)
    assert (code, report["differences"]) == (0, [])


def test_the_memory_file_of_a_wrapped_command_is_read_from_the_environment_it_is_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtap.adapters.memory_server import GraphTap
    from memtap.adapters.upstream import Upstream
    from memtap.config import StdioServerConfig

    mine = tmp_path / "mine.jsonl"
    monkeypatch.setenv("MEMORY_FILE_PATH", str(mine))
    command = StdioServerConfig(command=str(MEMORY_SERVER))
    inherited = GraphTap(Upstream("memory", command, inherit_env=True))  # memtap proxy -- COMMAND
    from_config = GraphTap(Upstream("memory", command, inherit_env=False))  # a config entry without env
    own = GraphTap(
        Upstream(
            "memory", StdioServerConfig(command=str(MEMORY_SERVER), env={"MEMORY_FILE_PATH": "/x/own.jsonl"})
        )
    )
    assert inherited.file is not None and inherited.file.path == mine
    assert (
        from_config.file is not None and from_config.file.path.name == "memory.jsonl"
    )  # the server's default
    assert own.file is not None and own.file.path == Path("/x/own.jsonl")


async def test_without_the_memory_file_a_killed_write_is_reconciled_by_asking_the_restarted_server(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    hidden = tmp_path / "hidden.jsonl"
    config = kill_after_save(tmp_path, MEMTAP_TEST_HIDDEN_FILE=str(hidden))
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await create_person(client, "dee")
        with pytest.raises(MCPError):
            await client.call_tool("add_observations", add("dee", "saved KILL-AFTER-SAVE"))
        await client.call_tool("add_observations", add("dee", "first after"))  # waits for the restart
        await client.call_tool("add_observations", add("dee", "second after"))  # reads the restarted server
    assert server.stop() == 0
    assert file_observations(hidden)["dee"] == ["saved KILL-AFTER-SAVE", "first after", "second after"]
    store = TraceStore(server.db)
    events = store.list_events()
    item = store.get_item(observation_id("dee", "saved KILL-AFTER-SAVE"))
    store.close()
    [failed] = [e for e in events if e.status == "error" and e.front_door == "mcp-http"]
    assert failed.effects == []  # nothing could be read when it failed: the file is unknown, the server down
    [settled] = [e for e in events if e.tool == "upstream/reconcile"]
    [effect] = settled.effects
    assert (effect.kind, effect.content_after, effect.reconciled) == (
        EffectKind.ADD,
        "saved KILL-AFTER-SAVE",
        True,
    )
    assert effect.evidence is not None
    assert (effect.evidence["read"], effect.evidence["event"], effect.evidence["final"]) == (
        "open_nodes",
        failed.id,
        True,
    )
    assert item is not None and item.is_valid


@pytest.mark.serial  # SIGSTOPs its upstream: runs alone, after the parallel part
async def test_a_late_write_is_reconciled_under_the_namespaces_content_policy(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    """The reconciling event is not a served call's: it still holds receipts, never the text."""
    import hashlib

    memory_file = tmp_path / "memory.jsonl"
    config = write_config(tmp_path, {"memory": {**memory_server, "memtap": {"timeout": HUNG_TIMEOUT_S}}})
    server = start_http_server("--config", str(config), "--content-policy", "*=hashed", command="proxy")
    async with http_client(server.url) as client:
        await client.call_tool("create_entities", {"entities": [{"name": "dee", "entityType": "person",
                                                                 "observations": []}]})  # fmt: skip
        pid = upstream_pid(server)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(MCPError) as failed:
                await client.call_tool("add_observations", add("dee", "HOOPOE nests by the river"))
        finally:
            os.kill(pid, signal.SIGCONT)
        with anyio.move_on_after(20):
            while "HOOPOE nests by the river" not in file_observations(memory_file).get("dee", []):
                await anyio.sleep(0.02)
        assert "HOOPOE nests by the river" in file_observations(memory_file).get("dee", []), str(failed.value)
    assert server.stop() == 0
    store = TraceStore(server.db)
    [settled] = [e for e in store.list_events() if e.tool == "upstream/reconcile"]
    store.close()
    text = b"HOOPOE nests by the river"
    assert [(e.kind, e.content_after) for e in settled.effects] == [
        (EffectKind.ADD, f"sha256:{hashlib.sha256(text).hexdigest()};bytes={len(text)}")
    ]
    assert "HOOPOE" not in settled.model_dump_json()


def test_verify_finds_a_hashed_namespaces_receipts_equal_to_the_builtin_rows(db_path: Path) -> None:
    """Under a content policy the trace holds receipts of what the builtin backend holds: the
    same content, not a difference; a row changed behind memtap's back still is one."""
    import sqlite3

    from memtap.adapters.builtin import BuiltinBackend
    from memtap.proxy.service import MemoryService
    from memtap.trace.privacy import ContentPolicy, TracePrivacy
    from memtap.trace.writer import Recorder

    async def session() -> list[str]:
        backend = BuiltinBackend(db_path)
        recorder = Recorder(db_path, durable=True).start()
        recorder.privacy = TracePrivacy(ContentPolicy([("hashed-*", "hashed"), ("dropped-*", "none")]))
        service = MemoryService(backend, recorder)
        ids = []
        for ns in ("hashed-1", "dropped-1", "hashed-2"):
            outcome = await service.call_tool(
                "memory_add", {"content": f"WAGTAIL in {ns}"}, principal="ann", front_door="test",
                layers=({"namespace": ns},),
            )  # fmt: skip
            ids.append(outcome.value["id"])
        await backend.close()
        recorder.close()
        return ids

    hashed, dropped, changed = anyio.run(session)
    store = TraceStore(db_path)
    held = {i: store.get_item(i) for i in (hashed, dropped)}
    store.close()
    assert [str(getattr(held[i], "content", "")).split(":")[0].split(";")[0] for i in (hashed, dropped)] == [
        "sha256", "dropped",
    ]  # fmt: skip
    runner = CliRunner()
    same = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.output)["differences"] == []
    with sqlite3.connect(db_path) as conn:  # behind memtap's back
        conn.execute("UPDATE builtin_memory SET content = 'WAGTAIL moved' WHERE item_id = ?", (changed,))
    differs = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--json"])
    assert differs.exit_code == 1, differs.output
    assert [(d["kind"], d["item_id"]) for d in json.loads(differs.output)["differences"]] == [
        ("content_differs", changed)
    ]
    # Recorded under the serving process's policy, the difference is a receipt too: the moved
    # text is in no trace table, and the trace then equals the backend.
    policy = ["--content-policy", "hashed-*=hashed", "--content-policy", "dropped-*=none"]
    recorded = runner.invoke(
        cli, ["verify", "--db", str(db_path), "--builtin", "--record", "--json", *policy]
    )
    assert recorded.exit_code == 1 and json.loads(recorded.output)["recorded_event"], recorded.output
    with sqlite3.connect(db_path) as conn:
        held_text = [
            conn.execute(f"SELECT count(*) FROM {table} WHERE {where}", ("%WAGTAIL moved%",) * 2).fetchone()[
                0
            ]
            for table, where in [
                ("effects", "content_after LIKE ? OR content_before LIKE ?"),
                ("events", "result LIKE ? OR arguments LIKE ?"),
                ("items", "content LIKE ? OR content LIKE ?"),
                ("item_versions", "content LIKE ? OR content LIKE ?"),
            ]
        ]
    assert held_text == [0, 0, 0, 0]
    after = runner.invoke(cli, ["verify", "--db", str(db_path), "--builtin", "--json"])
    assert after.exit_code == 0 and json.loads(after.output)["differences"] == [], after.output
