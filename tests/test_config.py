from __future__ import annotations

from pathlib import Path

import pytest

from memtap.config import load_config
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
    assert config.mcp_servers["memory"]["command"] == "npx"
    assert config.model_list[0]["litellm_params"]["api_key"] == "os.environ/OPENAI_API_KEY"
    assert config.memtap == {"memory": "auto"}
    assert config.model_extra == {"litellm_settings": {"drop_params": True}}


def test_claude_desktop_json_loads_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text('{"mcpServers": {"m": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "1"}}}}')
    assert load_config(path).mcp_servers["m"]["url"] == "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mcpServers: [unclosed", "not valid YAML or JSON at line 1"),
        ("- just\n- a list\n", "must hold a mapping at the top, not list"),
        ("model_list: {not: a list}", "model_list: Input should be a valid list"),
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
