"""The configuration file: formats people already have, side by side in one file.

- ``mcpServers``: the MCP client format of Claude Desktop and most MCP clients
  (``{name: {command, args, env, cwd} | {url, headers}}``), the upstreams to wrap;
- ``model_list`` (and LiteLLM's other top-level sections): LiteLLM's proxy config,
  accepted unchanged, the chat upstreams;
- ``memtap``: memtap's own settings.

YAML or JSON (YAML is a superset). Unknown top-level sections are kept, so an
existing LiteLLM config loads as it is. Each section is typed by the part of
memtap that uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memtap.errors import ConfigError

__all__ = ["ConfigFile", "load_config"]


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    mcp_servers: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="mcpServers")
    model_list: list[dict[str, Any]] = Field(default_factory=list)
    memtap: dict[str, Any] = Field(default_factory=dict)


def load_config(path: str | Path) -> ConfigFile:
    """Read a config file, or raise ConfigError naming the file and what is wrong."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config {path} is not valid YAML or JSON{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must hold a mapping at the top, not {type(data).__name__}")
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"config {path}: {problems}") from None
