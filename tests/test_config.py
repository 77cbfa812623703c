from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memtap.config import HttpServerConfig, StdioServerConfig, load_config, parse_api_keys
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
    assert config.model_list[0].litellm_params.api_key == "os.environ/OPENAI_API_KEY"
    assert config.model_list[0].litellm_params.provider == "openai"
    assert config.memtap.memory == "auto" and config.memtap.backend == "builtin"
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


def test_a_litellm_proxy_config_loads_unchanged_beside_memtap_settings(tmp_path: Path) -> None:
    path = tmp_path / "litellm.yaml"
    path.write_text(
        """
model_list:
  - model_name: local-llama
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct
      api_base: http://127.0.0.1:8000/v1
      api_key: os.environ/VLLM_KEY
      temperature: 0.2
      rpm: 60
    model_info: {id: llama-1}
  - model_name: claude
    litellm_params: {model: anthropic/claude-sonnet-4-5, api_key: os.environ/ANTHROPIC_API_KEY}
router_settings: {routing_strategy: simple-shuffle}
general_settings: {master_key: sk-1234}
memtap:
  memory: off
  top_k: 3
  capture: [user, assistant]
  routes: {local-llama: {memory: auto}}
  embeddings: {minilm: {provider: minilm}}
"""
    )
    config = load_config(path)
    llama, claude = config.model_list
    assert llama.litellm_params.provider == "hosted_vllm"
    assert llama.litellm_params.upstream_model == "meta-llama/Llama-3.1-8B-Instruct"
    assert llama.litellm_params.model_extra == {"temperature": 0.2, "rpm": 60}
    assert claude.litellm_params.provider == "anthropic"
    assert config.memtap.memory == "off"  # YAML reads a bare `off` as false; memtap reads it as meant
    assert config.memtap.routes["local-llama"].memory == "auto"
    assert config.memtap.capture == ["user", "assistant"]
    assert set(config.model_extra or {}) == {"router_settings", "general_settings"}


@pytest.mark.parametrize(
    ("memtap", "message"),
    [
        ("{routes: {nope: {memory: auto}}}", "memtap.routes.nope names no model_name in model_list"),
        ("{backend: 'mcp:memory'}", "memtap.backend 'mcp:memory' names no server in mcpServers"),
        ("{backend: zep}", "memtap.backend: String should match pattern"),
        ("{memory: sometimes}", "memtap.memory: Input should be 'off' or 'auto'"),
        ("{top_k: -1}", "memtap.top_k: Input should be greater than or equal to 0"),
        ("{colour: blue}", "memtap.colour: Extra inputs are not permitted"),
    ],
)
def test_bad_memtap_settings_are_named(tmp_path: Path, memtap: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        f"model_list: [{{model_name: m, litellm_params: {{model: openai/m}}}}]\nmemtap: {memtap}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)


def test_api_keys_from_the_environment_resolve_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        "memtap:\n  api_keys:\n    - sk-inline=bob\n    - {key: os.environ/ALICE_KEY, principal: alice}\n"
    )
    config = load_config(path)
    monkeypatch.setenv("ALICE_KEY", "sk-from-env")
    assert config.memtap.api_key_map() == {"sk-inline": "bob", "sk-from-env": "alice"}
    monkeypatch.delenv("ALICE_KEY")
    with pytest.raises(
        ConfigError, match=r"memtap.api_keys\[1\].key refers to environment variable ALICE_KEY"
    ):
        config.memtap.api_key_map()


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


def test_a_memtap_setting_at_the_top_of_a_server_entry_is_kept_and_named_where_memtap_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        '{"mcpServers": {"slow": {"command": "x", "timeout": 2, "memtap": {"rules": {"a": "read"}}},'
        ' "set": {"command": "y", "timeout": 3, "memtap": {"timeout": 4}}}}'
    )
    with caplog.at_level(logging.WARNING, logger="memtap.config"):
        config = load_config(path)
    slow, set_ = config.mcp_servers["slow"], config.mcp_servers["set"]
    assert slow.memtap.timeout == 30.0 and slow.model_extra == {"timeout": 2}  # the client's, kept
    assert set_.memtap.timeout == 4.0
    assert [r.getMessage() for r in caplog.records] == [
        "mcpServers.slow.timeout is not read by memtap (a client's setting, kept); memtap's is "
        "mcpServers.slow.memtap.timeout"
    ]  # the entry that sets memtap.timeout too is not named


def test_api_keys_holding_equals_signs_or_commas_keep_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        "memtap:\n  api_keys:\n    - {key: os.environ/B64_KEY, principal: alice}\n    - 'c2s==bob'\n"
    )
    monkeypatch.setenv("B64_KEY", "a,b=c==")
    assert load_config(path).memtap.api_key_map() == {"a,b=c==": "alice", "c2s=": "bob"}
    assert parse_api_keys(["padded==carol,plain=dan"]) == {"padded=": "carol", "plain": "dan"}
