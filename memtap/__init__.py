"""memtap: a recording proxy between AI agents and their long-term memory backends."""

from __future__ import annotations

__version__ = "0.1.0"

from memtap.errors import (
    AccessDenied,
    BackendError,
    ConfigError,
    ContentTooLarge,
    InvalidArguments,
    ItemNotFound,
    MemtapError,
    ProxyError,
    SchemaTooNew,
    StoreError,
    UnknownTool,
    UnknownUpstream,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRPCError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from memtap.trace.models import (
    AccessTags,
    Context,
    EffectKind,
    ItemVersion,
    MemoryEffect,
    MemoryItem,
    Op,
    Provenance,
    Role,
    TraceEvent,
    Visibility,
)
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

__all__ = [
    "AccessDenied",
    "AccessTags",
    "BackendError",
    "ConfigError",
    "ContentTooLarge",
    "Context",
    "EffectKind",
    "InvalidArguments",
    "ItemNotFound",
    "ItemVersion",
    "MemoryEffect",
    "MemoryItem",
    "MemtapError",
    "Op",
    "Provenance",
    "ProxyError",
    "Recorder",
    "Role",
    "SchemaTooNew",
    "StoreError",
    "TraceEvent",
    "TraceStore",
    "UnknownTool",
    "UnknownUpstream",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamRPCError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "Visibility",
    "__version__",
]
