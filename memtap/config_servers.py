"""The ``mcpServers`` section: upstream MCP servers to wrap, in the format of Claude Desktop
and most MCP clients (``{name: {command, args, env, cwd} | {url, headers}}``), each with an
optional ``memtap`` block of memtap's own settings for it."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = [
    "HttpServerConfig",
    "McpServerConfig",
    "StdioServerConfig",
    "ToolKindName",
    "UpstreamOptions",
    "check_server_entry",
]

ToolKindName = Literal["write", "update", "delete", "retrieve", "read", "other"]

log = logging.getLogger("memtap.config")


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


def check_server_entry(name: str, value: Any) -> None:
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
    # Keys of the entry itself belong to the client that wrote it (some clients read a `timeout`
    # there): kept, but memtap reads its own settings only from the `memtap` block.
    block = value.get("memtap")
    own: dict[str, Any] = block if isinstance(block, dict) else {}
    for key in sorted(set(UpstreamOptions.model_fields) & value.keys() - own.keys()):
        log.warning(
            "mcpServers.%s.%s is not read by memtap (a client's setting, kept); memtap's is "
            "mcpServers.%s.memtap.%s",
            name, key, name, key,
        )  # fmt: skip
