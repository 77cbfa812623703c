"""One exception hierarchy for memtap.

Every error memtap raises on purpose derives from :class:`MemtapError`; each
subpackage has one base of its own. The CLI turns these into a one-line message
and exit code 2; the front doors turn them into protocol errors (an MCP tool
error, an HTTP status with a JSON body).
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "AuthError",
    "BackendError",
    "ConfigError",
    "ContentTooLarge",
    "Forbidden",
    "InvalidArguments",
    "ItemNotFound",
    "MemtapError",
    "PinnedContextViolation",
    "ProxyError",
    "SchemaTooNew",
    "StoreError",
    "UnknownTool",
    "UnknownUpstream",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamRPCError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
]


class MemtapError(Exception):
    """Base of every error memtap raises on purpose."""


class ConfigError(MemtapError):
    """Configuration or command-line input that cannot be used."""


class StoreError(MemtapError):
    """The trace database cannot be opened, migrated or written.

    ``transient`` errors (another process holds the lock, the disk is full, an I/O
    error) may succeed when tried again; the others will not.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class SchemaTooNew(StoreError):
    """The database was written by a newer memtap whose migrations we do not know."""


class BackendError(MemtapError):
    """A memory backend refused or failed an operation."""


class ItemNotFound(BackendError):
    """No memory item with that id exists in that namespace."""

    def __init__(self, item_id: str, namespace: str, *, deleted_at: str | None = None) -> None:
        if deleted_at is None:
            message = f"no memory item {item_id!r} in namespace {namespace!r}"
        else:
            message = f"memory item {item_id!r} in namespace {namespace!r} was deleted at {deleted_at}"
        super().__init__(message)
        self.item_id = item_id
        self.namespace = namespace
        self.deleted_at = deleted_at


class ProxyError(MemtapError):
    """A front door received a request it cannot serve."""


class AccessDenied(ProxyError):
    """A call was refused for who is asking: the access gate (enforce mode) would not disclose a
    memory to the requester, or the caller's grants do not cover what it asked for."""

    status = 403


class Forbidden(AccessDenied):
    """The caller's grants do not allow the right it needs on a namespace (or an upstream, or a
    requester it says it acts for). The message says who, which right, which namespace and why."""


class PinnedContextViolation(AccessDenied):
    """A tool argument contradicts a context value the operator or the connection fixed (the
    key's namespace, an ``X-Memtap-*`` header, the request's ``_meta``): an attempted escape."""


class AuthError(ProxyError):
    """Credentials were offered and are not good: answered with ``status`` (401 or 403)."""

    def __init__(self, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


class UnknownTool(ProxyError):
    """A tool call named a tool this server does not offer."""


class UnknownUpstream(ProxyError):
    """A request named an upstream server memtap does not wrap."""


class InvalidArguments(ProxyError):
    """A tool call's arguments do not match the tool's schema."""


class ContentTooLarge(InvalidArguments):
    """Memory content larger than the configured limit."""


class UpstreamError(BackendError):
    """A wrapped MCP server could not serve a call; ``code`` is the JSON-RPC error code to answer with."""

    code = -32603  # internal error

    def __init__(self, message: str, *, upstream: str | None = None) -> None:
        super().__init__(message)
        self.upstream = upstream


class UpstreamUnavailable(UpstreamError):
    """The upstream is not running: it failed to start, exited, or is waiting out a restart backoff."""


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer within the per-call timeout."""

    code = -32001  # request timeout


class UpstreamProtocolError(UpstreamError):
    """The upstream answered with something that is not a valid MCP result."""


class UpstreamRPCError(UpstreamError):
    """The upstream answered with a JSON-RPC error; memtap passes it on unchanged."""

    def __init__(self, code: int, message: str, data: object = None, *, upstream: str | None = None) -> None:
        super().__init__(message, upstream=upstream)
        self.code = code
        self.data = data
