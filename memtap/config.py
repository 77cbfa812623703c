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

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memtap.auth.grants import DEFAULT_GRANTS, Grant, PrincipalPolicy, parse_rights
from memtap.auth.jwt_config import JwtSettings
from memtap.config_servers import (
    HttpServerConfig,
    McpServerConfig,
    StdioServerConfig,
    ToolKindName,
    UpstreamOptions,
    check_server_entry,
)
from memtap.errors import ConfigError
from memtap.findings.settings import FindingsSettings

__all__ = [
    "ApiKeyEntry",
    "CaptureRole",
    "ConfigFile",
    "EmbedderSettings",
    "HttpServerConfig",
    "LiteLLMParams",
    "McpServerConfig",
    "MemoryMode",
    "MemtapSection",
    "ModelEntry",
    "PrincipalEntry",
    "RouteSettings",
    "StdioServerConfig",
    "ToolKindName",
    "UpstreamOptions",
    "load_config",
    "parse_api_keys",
    "resolve_secret",
]

MemoryMode = Literal["off", "auto"]
CaptureRole = Literal["user", "assistant"]
ENV_PREFIX = "os.environ/"


def resolve_secret(value: str | None, what: str) -> str | None:
    """LiteLLM's ``os.environ/NAME`` indirection; a missing variable is a ConfigError naming it."""
    if value is None or not value.startswith(ENV_PREFIX):
        return value
    name = value[len(ENV_PREFIX) :]
    found = os.environ.get(name)
    if not found:
        raise ConfigError(f"{what} refers to environment variable {name}, which is not set")
    return found


def parse_api_keys(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``KEY=PRINCIPAL`` pairs (from options or comma-separated ``MEMTAP_API_KEYS``). The principal
    is what follows the last ``=``, so keys that end in ``=`` (base64) keep their padding."""
    keys: dict[str, str] = {}
    for raw in values:
        for pair in raw.split(","):
            pair = pair.strip()
            if not pair:
                continue
            key, sep, principal = pair.rpartition("=")
            if not sep or not key.strip() or not principal.strip():
                raise ConfigError(
                    f"API key entries look like KEY=PRINCIPAL; got {pair[:4]}… without a principal"
                )
            keys[key.strip()] = principal.strip()
    return keys


class LiteLLMParams(BaseModel):
    """``litellm_params`` of one deployment, as LiteLLM reads it. Keys memtap does not use
    itself are kept: on the pass-through path they become request defaults, on the
    litellm path they are handed to litellm as they are."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(..., min_length=1, description="provider/model, e.g. openai/gpt-4o")
    api_base: str | None = None
    api_key: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    stream_timeout: float | None = Field(default=None, gt=0)

    @property
    def provider(self) -> str:
        """The provider prefix (``openai`` when the model names none, as in LiteLLM)."""
        prefix, sep, _ = self.model.partition("/")
        return prefix if sep else "openai"

    @property
    def upstream_model(self) -> str:
        """The model name the provider itself knows."""
        _, sep, rest = self.model.partition("/")
        return rest if sep else self.model


class ModelEntry(BaseModel):
    """One entry of LiteLLM's ``model_list``: a public alias and the deployment behind it."""

    model_config = ConfigDict(extra="allow")

    model_name: str = Field(..., min_length=1)
    litellm_params: LiteLLMParams
    model_info: dict[str, Any] = Field(default_factory=dict)


class RouteSettings(BaseModel):
    """memtap's settings for one model alias (``memtap.routes.ALIAS``)."""

    model_config = ConfigDict(extra="forbid")

    memory: MemoryMode | None = None
    via: Literal["auto", "passthrough", "litellm"] = "auto"
    extra_fields: list[str] = Field(
        default_factory=list,
        description="request fields beyond OpenAI's to forward to this route (vendor extensions)",
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return _mode_from_yaml(value)

    @field_validator("extra_fields")
    @classmethod
    def _no_connection_fields(cls, value: list[str]) -> list[str]:
        from memtap.proxy.fields import is_forbidden

        bad = [name for name in value if is_forbidden(name)]
        if bad:
            raise ValueError(
                f"{', '.join(bad)} may choose where a call goes or carry credentials; "
                "memtap never forwards such fields from a request"
            )
        return value


class EmbedderSettings(BaseModel):
    """A local embedding model served at ``/v1/embeddings`` under its alias."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(
        ..., min_length=1, description="minilm, hashing, or module:factory for a plug-in embedder"
    )
    options: dict[str, Any] = Field(default_factory=dict)


class ApiKeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(..., min_length=1, description="the key, or os.environ/NAME")
    principal: str = Field(..., min_length=1)


class PrincipalEntry(BaseModel):
    """One principal (``memtap.principals.NAME``): its keys, grants, delegation and upstreams."""

    model_config = ConfigDict(extra="forbid")

    keys: list[str] = Field(default_factory=list, description="bearer keys, each a key or os.environ/NAME")
    grants: dict[str, list[str]] | None = Field(
        default=None,
        description="namespace pattern -> rights (read, write, delete, admin); default: its own namespace",
    )
    act_for: list[str] = Field(default_factory=list, description="requester patterns it may act for")
    upstreams: list[str] = Field(default_factory=lambda: ["*"], description="upstream names it may call")
    namespace: str | None = Field(default=None, min_length=1, description="pin its calls to this namespace")

    @field_validator("grants")
    @classmethod
    def _known_rights(cls, value: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        for pattern, rights in (value or {}).items():
            if isinstance(rights, str):
                raise ValueError(f"grant {pattern!r}: rights are a list, e.g. [read, write]")
            try:
                parse_rights(rights, f"grant {pattern!r}")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    def policy(self, name: str) -> PrincipalPolicy:
        grants = (
            DEFAULT_GRANTS
            if self.grants is None
            else tuple(
                Grant(pattern, parse_rights(rights, f"memtap.principals.{name}.grants.{pattern}"))
                for pattern, rights in self.grants.items()
            )
        )
        return PrincipalPolicy(name, grants, tuple(self.act_for), tuple(self.upstreams))


def _mode_from_yaml(value: object) -> object:
    """YAML 1.1 reads a bare ``off`` as false (and ``on`` as true)."""
    if value is False:
        return "off"
    if value is True:
        return "auto"
    return value


def _user_only() -> list[CaptureRole]:
    return ["user"]


class MemtapSection(BaseModel):
    """memtap's own settings, beside LiteLLM's sections in the same file."""

    model_config = ConfigDict(extra="forbid")

    memory: MemoryMode = "off"
    backend: str = Field(default="builtin", pattern=r"^(builtin|mem0|mcp:[^:\s]+)$")
    mem0: dict[str, Any] = Field(
        default_factory=dict,
        description="mem0's own config dictionary (Memory.from_config), for backend mem0",
    )
    mem0_infer: bool = Field(default=True, description="backend mem0: add asks mem0's LLM for facts")
    api_keys: list[ApiKeyEntry | str] = Field(default_factory=list)
    top_k: int = Field(default=5, ge=0, le=100, description="memories injected in auto mode")
    capture: list[CaptureRole] = Field(default_factory=_user_only)
    max_body_bytes: int = Field(default=8 << 20, ge=1024)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    embeddings: dict[str, EmbedderSettings] = Field(default_factory=dict)
    content_policy: dict[str, Literal["full", "hashed", "none"]] = Field(
        default_factory=dict,
        description="namespace glob: full, hashed or none (what the trace keeps of bodies; first match wins)",
    )
    gate: Literal["observe", "enforce"] | None = Field(
        default=None, description="default: enforce when keys or principals are configured, else observe"
    )
    principals: dict[str, PrincipalEntry] = Field(default_factory=dict)
    context_args: bool = Field(default=False, description="context fields in model-facing tool schemas")
    jwt: JwtSettings | None = Field(
        default=None, description="bearer JWTs from an OAuth issuer (auth/jwt.py)"
    )
    findings: FindingsSettings = Field(default_factory=lambda: FindingsSettings())

    @field_validator("principals")
    @classmethod
    def _grant_patterns(cls, value: dict[str, PrincipalEntry]) -> dict[str, PrincipalEntry]:
        for name, entry in value.items():
            try:
                entry.policy(name)
            except ConfigError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return _mode_from_yaml(value)

    def api_key_map(self) -> dict[str, str]:
        """The configured API keys, key to principal (environment references resolved).

        A ``{key, principal}`` entry is taken as it is, so a key may hold ``=`` or ``,``;
        only the ``KEY=PRINCIPAL`` string form is parsed."""
        keys: dict[str, str] = {}
        for index, entry in enumerate(self.api_keys):
            if isinstance(entry, str):
                keys.update(parse_api_keys([entry]))
            else:
                key = resolve_secret(entry.key, f"memtap.api_keys[{index}].key")
                assert key is not None  # the model requires a non-empty key
                keys[key] = entry.principal
        for name, principal in self.principals.items():
            for index, raw in enumerate(principal.keys):
                key = resolve_secret(raw, f"memtap.principals.{name}.keys[{index}]")
                if key:
                    keys[key] = name
        return keys

    def principal_policies(self) -> list[PrincipalPolicy]:
        return [entry.policy(name) for name, entry in self.principals.items()]

    def pinned_fields(self) -> dict[str, dict[str, str]]:
        """Context fields the operator pinned, by principal (a principal's ``namespace``)."""
        return {name: {"namespace": e.namespace} for name, e in self.principals.items() if e.namespace}


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict, alias="mcpServers")
    model_list: list[ModelEntry] = Field(default_factory=list)
    memtap: MemtapSection = Field(default_factory=lambda: MemtapSection())

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _typed_servers(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name, entry in value.items():
                check_server_entry(str(name), entry)
        return value

    def enabled_servers(self) -> dict[str, McpServerConfig]:
        """The upstreams to wrap: every entry not marked ``disabled``."""
        return {name: server for name, server in self.mcp_servers.items() if not server.disabled}

    @model_validator(mode="after")
    def _references_resolve(self) -> ConfigFile:
        aliases = {entry.model_name for entry in self.model_list}
        for alias in self.memtap.routes:
            if alias not in aliases:
                raise ValueError(f"memtap.routes.{alias} names no model_name in model_list")
        backend = self.memtap.backend
        if backend.startswith("mcp:") and backend[4:] not in self.mcp_servers:
            raise ValueError(f"memtap.backend {backend!r} names no server in mcpServers")
        return self


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
        problems = "; ".join(_problem(err["loc"], err["msg"]) for err in exc.errors())
        raise ConfigError(f"config {path}: {problems}") from None


def _problem(loc: tuple[int | str, ...], message: str) -> str:
    message = message.removeprefix("Value error, ")
    return f"{'.'.join(str(p) for p in loc)}: {message}" if loc else message
