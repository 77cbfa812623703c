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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from memtap.errors import ConfigError

__all__ = [
    "ConfigFile",
    "HttpServerConfig",
    "McpServerConfig",
    "StdioServerConfig",
    "ToolKindName",
    "UpstreamOptions",
    "load_config",
]

ToolKindName = Literal["write", "update", "delete", "retrieve", "read", "other"]


class UpstreamOptions(BaseModel):
    """memtap's own settings for one upstream: the optional ``memtap`` block of an entry."""

    model_config = ConfigDict(extra="forbid")

    profile: str | None = Field(
        default=None, description="Force a classification profile by name ('none': no profile)"
    )
    rules: dict[str, ToolKindName] = Field(
        default_factory=dict,
        description="Tool name or glob pattern -> class; overrides profiles, annotations and names",
    )
    timeout: float = Field(default=30.0, gt=0, description="Seconds a call (and a start) may take")


class _ServerBase(BaseModel):
    # Clients add keys of their own (alwaysAllow, autoApprove, description, ...): kept, unused.
    model_config = ConfigDict(extra="allow")

    disabled: bool = False
    memtap: UpstreamOptions = Field(default_factory=lambda: UpstreamOptions())


class StdioServerConfig(_ServerBase):
    """An upstream memtap launches and speaks to over its standard input and output."""

    type: Literal["stdio"] | None = None
    command: str = Field(..., min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpServerConfig(_ServerBase):
    """An upstream reached over streamable HTTP."""

    type: Literal["http", "streamable-http", "streamableHttp"] | None = None
    url: str = Field(..., pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)


def _transport_of(value: Any) -> str | None:
    if isinstance(value, StdioServerConfig | HttpServerConfig):
        return "stdio" if isinstance(value, StdioServerConfig) else "http"
    if not isinstance(value, dict):
        return None
    if "command" in value or value.get("type") == "stdio":
        return "stdio"
    if "url" in value or value.get("type") in ("http", "streamable-http", "streamableHttp"):
        return "http"
    return None


McpServerConfig = Annotated[
    Annotated[StdioServerConfig, Tag("stdio")] | Annotated[HttpServerConfig, Tag("http")],
    Discriminator(
        _transport_of,
        custom_error_type="server_transport",
        custom_error_message="give command (a stdio server) or url (a streamable HTTP server)",
    ),
]


def _check_entry(name: str, value: Any) -> None:
    """Mistakes the typed models would report less clearly."""
    if "/" in name or not name.strip():
        raise ValueError(f"server name {name!r} must be non-empty and hold no '/'")
    if not isinstance(value, dict):
        return
    url = str(value.get("url", ""))
    if value.get("type") == "sse" or url.rstrip("/").endswith("/sse"):
        raise ValueError(
            f"{name}: SSE upstreams are not supported; use the server's streamable HTTP endpoint"
        )
    if "command" in value and "url" in value:
        raise ValueError(f"{name}: give either command (stdio) or url (HTTP), not both")


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict, alias="mcpServers")
    model_list: list[dict[str, Any]] = Field(default_factory=list)
    memtap: dict[str, Any] = Field(default_factory=dict)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _typed_servers(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name, entry in value.items():
                _check_entry(str(name), entry)
        return value

    def enabled_servers(self) -> dict[str, McpServerConfig]:
        """The upstreams to wrap: every entry not marked ``disabled``."""
        return {name: server for name, server in self.mcp_servers.items() if not server.disabled}


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
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise ConfigError(f"config {path}: {problems}") from None
