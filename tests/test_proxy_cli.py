"""The proxy's command line: --explain, init-config, status, and bad input, through click's runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import misbehaving_server, write_config

from memtap.cli.main import cli
from memtap.cli.proxy import upstream_name


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_explain_prints_each_tool_class_and_why_with_rules_first(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    memory = {**memory_server, "memtap": {"rules": {"read_graph": "retrieve"}}}
    config = write_config(tmp_path, {"memory": memory, "odd": misbehaving_server()})
    result = run("proxy", "--explain", "--config", str(config), "--rule", "echo=other")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("memory: server 'memory-server', profile server-memory, effects from file ")
    assert lines[1] == "odd: server 'misbehaving', profile mem0"
    rows = {tuple(line.split()[:4]) for line in lines[4:]}
    assert {
        ("memory", "create_entities", "write", "profile"),
        ("memory", "read_graph", "retrieve", "rule"),
        ("memory", "memory__search_nodes", "retrieve", "profile"),
        ("odd", "odd__search_nodes", "retrieve", "name"),
        ("odd", "echo", "other", "rule"),
        ("odd", "hang", "other", "default"),
        ("odd", "add_memory", "write", "profile"),
    } <= rows


def test_explain_of_an_upstream_that_cannot_start_is_an_error_exit(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    result = run("proxy", "--explain", "--", missing, "--flag")
    assert result.exit_code == 2
    assert f"memtap: error: upstream 'nope': command not found: '{missing}'" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to wrap: give --config FILE (mcpServers) or -- COMMAND ARGS..."),
        (["--config", "{config}", "--", "x"], "give either --config FILE or -- COMMAND ARGS..., not both"),
        (["--config", "{config}", "--only", "nope"], "unknown upstream 'nope'; {config} has: odd"),
        (["--config", "{config}", "--profile", "mem1"], "unknown profile 'mem1'"),
        (["--rule", "x=maybe", "--", "x"], "--rule takes TOOL=write|update|delete|retrieve|read|other"),
        (["--config", "{empty}"], "config {empty} has no enabled mcpServers to wrap"),
        (["--http", "0.0.0.0:9", "--", "x"], "refusing to bind 0.0.0.0"),
    ],
)
def test_bad_proxy_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    config = write_config(tmp_path, {"odd": misbehaving_server()})
    empty = write_config(tmp_path, {"off": {"command": "x", "disabled": True}}, name="empty.json")
    paths = {"config": str(config), "empty": str(empty)}
    result = run("proxy", *[a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("memtap: error: ") and message.format(**paths) in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_init_config_routes_a_command_through_memtap_keeping_env_and_cwd(tmp_path: Path) -> None:
    client = tmp_path / "claude_desktop_config.json"
    client.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "memory": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-memory"],
                        "env": {"MEMORY_FILE_PATH": "/data/memory.jsonl"},
                        "cwd": "/data",
                    },
                    "remote": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    result = run("init-config", "--config", str(client), "--db", str(tmp_path / "t.db"))
    assert result.exit_code == 0, result.output
    entries = json.loads(result.output)["mcpServers"]
    memory, remote = entries["memory"], entries["remote"]
    # the memtap executable itself (the console script beside this Python), never `python -m`
    assert Path(memory["command"]).name == "memtap" and Path(remote["command"]).name == "memtap"
    assert Path(memory["command"]) == Path(sys.executable).parent / "memtap"
    prefix: list[str] = []
    assert memory["args"] == [
        *prefix, "proxy", "--stdio", "--name", "memory", "--db", str(tmp_path / "t.db"),
        "--", "npx", "-y", "@modelcontextprotocol/server-memory",
    ]  # fmt: skip
    assert (memory["env"], memory["cwd"]) == ({"MEMORY_FILE_PATH": "/data/memory.jsonl"}, "/data")
    assert remote["args"][len(prefix) :] == [
        "proxy", "--stdio", "--config", str(client.resolve()), "--only", "remote", "--db", str(tmp_path / "t.db"),
    ]  # fmt: skip
    over_http = run(
        "init-config", "--http", "127.0.0.1:8750", "--", "npx", "-y", "@modelcontextprotocol/server-memory"
    )
    assert json.loads(over_http.stdout) == {
        "mcpServers": {
            "server-memory": {"type": "http", "url": "http://127.0.0.1:8750/servers/server-memory/mcp"}
        }
    }


def test_proxy_of_a_command_reads_the_memory_file_its_client_env_names(
    tmp_path: Path, memory_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """init-config keeps the server's env on memtap's entry; memtap must read that file."""
    target = tmp_path / "client-set" / "memory.jsonl"
    monkeypatch.setenv("MEMORY_FILE_PATH", str(target))
    result = run("proxy", "--explain", "--", memory_server["command"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(f"effects from file {target}"), result.output


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["npx", "-y", "@modelcontextprotocol/server-memory"], "server-memory"),
        (["uvx", "mcp-server-fetch"], "mcp-server-fetch"),
        ([sys.executable, "/opt/servers/notes.py"], "notes"),
        (["/usr/local/bin/mem0-mcp", "--port", "1"], "mem0-mcp"),
        (["npx", "-y", "@scope/pkg@1.2.3"], "pkg"),
    ],
)
def test_a_wrapped_command_is_named_after_its_package_not_its_launcher(command: list[str], name: str) -> None:
    assert upstream_name(command) == name


def test_status_without_a_running_proxy_says_so(tmp_path: Path) -> None:
    result = run("proxy", "status", "--db", str(tmp_path / "t.db"))
    assert result.exit_code == 0
    assert f"no running memtap proxy writes to {tmp_path / 't.db'}" in result.output
    nothing = run("proxy", "status", "--url", "http://127.0.0.1:9")
    assert (
        nothing.exit_code == 2
        and "memtap: error: no memtap answered at http://127.0.0.1:9/healthz" in nothing.output
    )
