"""Who may touch which memory: the caller of a request, grants, the gate and the context resolver.

A leaf package: it imports only :mod:`memtap.errors`, :mod:`memtap.trace.models`, the standard
library, pydantic and starlette's types, never :mod:`memtap.proxy`. See docs/authorization.md.
"""

from memtap.auth.caller import CALLER_SCOPE_KEY, Caller, caller_in, local_caller
from memtap.auth.gate import (
    ApiKeyAuthenticator,
    Authentication,
    Authenticator,
    Gate,
    LocalAuthenticator,
    bearer_token,
    headers_of,
)
from memtap.auth.grants import (
    ALL_RIGHTS,
    DEFAULT_GRANTS,
    OWN_RIGHTS,
    Grant,
    Policy,
    PrincipalPolicy,
    Right,
    parse_rights,
    right_for,
)
from memtap.auth.resolve import (
    ARGUMENT_FIELDS,
    Clock,
    best_context,
    default_requester,
    fields_from_headers,
    fields_from_meta,
    resolve_context,
)

__all__ = [
    "ALL_RIGHTS",
    "ARGUMENT_FIELDS",
    "CALLER_SCOPE_KEY",
    "DEFAULT_GRANTS",
    "OWN_RIGHTS",
    "ApiKeyAuthenticator",
    "Authentication",
    "Authenticator",
    "Caller",
    "Clock",
    "Gate",
    "Grant",
    "LocalAuthenticator",
    "Policy",
    "PrincipalPolicy",
    "Right",
    "bearer_token",
    "best_context",
    "caller_in",
    "default_requester",
    "fields_from_headers",
    "fields_from_meta",
    "headers_of",
    "local_caller",
    "parse_rights",
    "resolve_context",
    "right_for",
]
