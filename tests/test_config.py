from __future__ import annotations

from pathlib import Path

import pytest

from memtap.config import HttpServerConfig, StdioServerConfig, load_config
from memtap.errors import ConfigError


def test_mcp_servers_litellm_model_list_and_memtap_settings_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "memtap.yaml"
    path.write_text(
        """
mcpServers:
  memory: {command: npx, args: ["-y", "@modelcontextprotocol/server-memory"]}
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/OPENAI_API_KEY}
litellm_settings: {drop_params: true}
memtap: {memory: auto}
"""
    )
    config = load_config(path)
    memory = config.mcp_servers["memory"]
    assert isinstance(memory, StdioServerConfig)
    assert (memory.command, memory.args, memory.env) == (
        "npx",
        ["-y", "@modelcontextprotocol/server-memory"],
        {},
    )
    assert config.model_list[0]["litellm_params"]["api_key"] == "os.environ/OPENAI_API_KEY"
    assert config.memtap == {"memory": "auto"}
    assert config.model_extra == {"litellm_settings": {"drop_params": True}}


def test_claude_desktop_json_loads_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text('{"mcpServers": {"m": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "1"}}}}')
    server = load_config(path).mcp_servers["m"]
    assert isinstance(server, HttpServerConfig)
    assert (server.url, server.headers) == ("http://127.0.0.1:9/mcp", {"X": "1"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mcpServers: [unclosed", "not valid YAML or JSON at line 1"),
        ("- just\n- a list\n", "must hold a mapping at the top, not list"),
        ("model_list: {not: a list}", "model_list: Input should be a valid list"),
        ("mcpServers: {m: {args: [x]}}", "mcpServers.m: give command (a stdio server) or url"),
        (
            "mcpServers: {m: {command: a, url: 'http://h/mcp'}}",
            "m: give either command (stdio) or url (HTTP)",
        ),
        ("mcpServers: {m: {url: 'http://h/sse'}}", "m: SSE upstreams are not supported"),
        ("mcpServers: {m: {url: 'ftp://h'}}", "mcpServers.m.http.url: String should match pattern"),
        ("mcpServers: {m: {command: a, memtap: {rules: {x: wipe}}}}", "rules.x: Input should be 'write'"),
        ("mcpServers: {m: {command: a, memtap: {timeout: 0}}}", "timeout: Input should be greater than 0"),
    ],
)
def test_broken_config_names_the_file_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)) as err:
        load_config(path)
    assert message in str(err.value)


def test_missing_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_server_entries_keep_client_keys_and_take_memtap_options(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        """
mcpServers:
  memory:
    command: node
    args: [server.js]
    env: {MEMORY_FILE_PATH: /tmp/m.jsonl}
    cwd: /srv
    alwaysAllow: [read_graph]
    memtap: {profile: server-memory, rules: {"debug_*": other}, timeout: 5}
  unused: {command: x, disabled: true}
"""
    )
    config = load_config(path)
    memory = config.mcp_servers["memory"]
    assert isinstance(memory, StdioServerConfig)
    assert memory.cwd == "/srv" and memory.model_extra == {"alwaysAllow": ["read_graph"]}
    assert (memory.memtap.profile, memory.memtap.rules, memory.memtap.timeout) == (
        "server-memory", {"debug_*": "other"}, 5.0,
    )  # fmt: skip
    assert list(config.enabled_servers()) == ["memory"]
