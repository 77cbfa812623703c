"""memtap: a recording proxy between AI agents and their long-term memory backends.

The names below load on first use (PEP 562): ``import memtap`` (and so every ``memtap``
command and the pytest plugin, which pytest imports in every session) stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.lazy import load_export

__version__ = "0.1.0"

if TYPE_CHECKING:
    from memtap.auth import Caller, Grant, Policy, PrincipalPolicy, Right
    from memtap.errors import (
        AccessDenied,
        AuthError,
        BackendError,
        ConfigError,
        ContentTooLarge,
        Forbidden,
        InvalidArguments,
        ItemNotFound,
        MemtapError,
        PinnedContextViolation,
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

# Each public name and the module that defines it.
_EXPORTS = {
    "AccessDenied": "memtap.errors",
    "AccessTags": "memtap.trace.models",
    "AuthError": "memtap.errors",
    "BackendError": "memtap.errors",
    "Caller": "memtap.auth",
    "ConfigError": "memtap.errors",
    "ContentTooLarge": "memtap.errors",
    "Context": "memtap.trace.models",
    "EffectKind": "memtap.trace.models",
    "Forbidden": "memtap.errors",
    "Grant": "memtap.auth",
    "InvalidArguments": "memtap.errors",
    "ItemNotFound": "memtap.errors",
    "ItemVersion": "memtap.trace.models",
    "MemoryEffect": "memtap.trace.models",
    "MemoryItem": "memtap.trace.models",
    "MemtapError": "memtap.errors",
    "Op": "memtap.trace.models",
    "PinnedContextViolation": "memtap.errors",
    "Policy": "memtap.auth",
    "PrincipalPolicy": "memtap.auth",
    "Provenance": "memtap.trace.models",
    "ProxyError": "memtap.errors",
    "Recorder": "memtap.trace.writer",
    "Right": "memtap.auth",
    "Role": "memtap.trace.models",
    "SchemaTooNew": "memtap.errors",
    "StoreError": "memtap.errors",
    "TraceEvent": "memtap.trace.models",
    "TraceStore": "memtap.trace.store",
    "UnknownTool": "memtap.errors",
    "UnknownUpstream": "memtap.errors",
    "UpstreamError": "memtap.errors",
    "UpstreamProtocolError": "memtap.errors",
    "UpstreamRPCError": "memtap.errors",
    "UpstreamTimeout": "memtap.errors",
    "UpstreamUnavailable": "memtap.errors",
    "Visibility": "memtap.trace.models",
}

__all__ = [
    "AccessDenied",
    "AccessTags",
    "AuthError",
    "BackendError",
    "Caller",
    "ConfigError",
    "ContentTooLarge",
    "Context",
    "EffectKind",
    "Forbidden",
    "Grant",
    "InvalidArguments",
    "ItemNotFound",
    "ItemVersion",
    "MemoryEffect",
    "MemoryItem",
    "MemtapError",
    "Op",
    "PinnedContextViolation",
    "Policy",
    "PrincipalPolicy",
    "Provenance",
    "ProxyError",
    "Recorder",
    "Right",
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


def __getattr__(name: str) -> Any:
    return load_export(__name__, _EXPORTS, globals(), name)


def __dir__() -> list[str]:
    return sorted(__all__)
