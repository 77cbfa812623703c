"""Privacy of the trace itself: content policies per namespace, and configured secrets kept out.

:class:`TracePrivacy` (``Recorder.privacy``) is applied to every served call's event in
:func:`~memtap.trace.calls.recorded_call`, after the event is built and before its span is finished
and it is handed to the recorder; an event recorded outside a served call (reconciliation's
``upstream/reconcile``) is passed through it before it is handed over.
So whatever the front door (memory tools, the forwarding proxy, chat, embeddings), the
database, its WAL, the spill file and the spans hold only what the policy lets through.

Content policies (``memtap.content_policy`` in the config, ``--content-policy PATTERN=POLICY``
on the command line; glob patterns over the namespace, first match wins, default ``full``):

- ``full``: bodies are recorded as they are;
- ``hashed``: every body is replaced by a receipt ``sha256:<hex>;bytes=<n>`` (the SHA-256 of
  its UTF-8 bytes; for a JSON value that is not a string, of its canonical JSON text);
- ``none``: every body is replaced by ``dropped;bytes=<n>``.

Ids, ops, context, access tags, sizes, ranks, scores and timings stay. What counts as a body
is listed in ``docs/privacy.md``: memory content, metadata, queries and reasons; chat
messages' content and tool-call arguments, answers and embedding inputs; and, for tools of
wrapped upstream servers (whose argument shapes memtap does not know), every argument value
and the whole result.

Secrets: every configured secret (API keys, upstream keys, credentials in wrapped servers'
headers and environment) that appears in any string of an event is replaced by
``[redacted]``, whatever the policy, so a caller cannot smuggle one into the trace through a
header, ``_meta``, a tool argument or a chat field.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, get_args

from memtap.jsontext import json_text
from memtap.trace.models import MemoryEffect, TraceEvent

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "ContentPolicy",
    "PolicyName",
    "RedactingFilter",
    "TracePrivacy",
    "parse_policy_rules",
    "receipt",
    "reduce_bodies",
    "secrets_of",
]

PolicyName = Literal["full", "hashed", "none"]
POLICIES: tuple[str, ...] = get_args(PolicyName)
REDACTED = "[redacted]"
# Shorter values are not treated as secrets: replacing every "1" or "true" in a trace would
# destroy it, and a credential that short protects nothing.
MIN_SECRET_LENGTH = 8

# Keys whose values are bodies, in memtap's own tools' arguments and results, and in chat and
# embedding requests and answers (nested anywhere).
_MEMORY_BODY_KEYS = frozenset({"content", "query", "metadata", "reason"})
_CHAT_BODY_KEYS = frozenset(
    {"content", "arguments", "refusal", "reasoning_content", "input", "audio", "unparsed", "prediction"}
)
_MEMORY_TOOLS = frozenset(
    {
        "memory_add",
        "memory_search",
        "memory_get",
        "memory_list",
        "memory_update",
        "memory_delete",
        "memory_history",
    }
)
_CHAT_TOOLS = frozenset({"chat.completions", "embeddings"})


def _canonical(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def receipt(value: Any, policy: PolicyName) -> str:
    """What a body becomes under ``policy`` (``hashed`` or ``none``)."""
    data = _canonical(value)
    if policy == "none":
        return f"dropped;bytes={len(data)}"
    return f"sha256:{hashlib.sha256(data).hexdigest()};bytes={len(data)}"


def parse_policy_rules(values: Iterable[str]) -> list[tuple[str, PolicyName]]:
    """``PATTERN=POLICY`` pairs from the command line."""
    from memtap.errors import ConfigError

    rules: list[tuple[str, PolicyName]] = []
    for raw in values:
        pattern, sep, policy = raw.rpartition("=")
        if not sep or not pattern:
            raise ConfigError(f"--content-policy takes PATTERN=POLICY (full, hashed or none); got {raw!r}")
        if policy not in POLICIES:
            raise ConfigError(
                f"--content-policy {raw!r}: unknown policy {policy!r}; use full, hashed or none"
            )
        rules.append((pattern, policy))  # type: ignore[arg-type]  # checked just above
    return rules


class ContentPolicy:
    """Namespace glob patterns to policies; the first match wins, ``full`` when none does."""

    def __init__(self, rules: Iterable[tuple[str, PolicyName]] = ()) -> None:
        self.rules = list(rules)
        self._cache: dict[str, PolicyName] = {}

    def __bool__(self) -> bool:
        return any(policy != "full" for _, policy in self.rules)

    def for_namespace(self, namespace: str | None) -> PolicyName:
        key = namespace or ""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found: PolicyName = next(
            (p for pattern, p in self.rules if fnmatch.fnmatchcase(key, pattern)), "full"
        )
        if len(self._cache) < 100_000:
            self._cache[key] = found
        return found


def _reduce(value: Any, keys: frozenset[str], policy: PolicyName) -> Any:
    """``value`` with the values of ``keys`` (anywhere inside) replaced by receipts."""
    if isinstance(value, dict):
        return {
            k: (receipt(v, policy) if k in keys and v is not None else _reduce(v, keys, policy))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_reduce(v, keys, policy) for v in value]
    return value


def reduce_bodies(tool: str, arguments: Any, result: Any, policy: PolicyName) -> tuple[Any, Any]:
    """A call's arguments and result with every body replaced by its receipt under ``policy``."""
    if tool in _MEMORY_TOOLS:
        keys = _MEMORY_BODY_KEYS
    elif tool in _CHAT_TOOLS:
        keys = _CHAT_BODY_KEYS
    else:  # a wrapped server's tool: memtap cannot tell its bodies from its ids
        if isinstance(arguments, dict):
            arguments = {k: receipt(v, policy) for k, v in arguments.items()}
        if result is not None and not (isinstance(result, dict) and set(result) == {"error"}):
            result = receipt(result, policy)
        return arguments, result
    return _reduce(arguments, keys, policy), _reduce(result, keys, policy)


def _escaped(text: str) -> str:
    return json_text(text)[1:-1]


def _trie_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """One regular expression matching any of ``words``, shaped as their prefix trie (so the
    engine rejects a position after one character instead of trying each word), longest first."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def chain(char: str, node: dict[str, Any]) -> str:
        """A run of single-child nodes as one literal (recursion only at branches: a long
        secret, a PEM key say, does not nest one level per character)."""
        run = [char]
        while len(node) == 1 and "" not in node:
            ((char, node),) = node.items()
            run.append(char)
        return re.escape("".join(run)) + render(node)

    def render(node: dict[str, Any]) -> str:
        end = "" in node
        branches = [chain(char, child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if end:
            return f"(?:{body})?"
        return body

    return re.compile(render(trie))


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


class TracePrivacy:
    """The content policy and the secrets, applied to each event before it is recorded."""

    def __init__(self, policy: ContentPolicy | None = None, secrets: Iterable[str] = ()) -> None:
        self.policy = policy or ContentPolicy()
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = tuple(
            sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        )
        # Each secret as it is and as JSON escapes it, in one trie-shaped pattern: a search costs
        # about the same for one secret or thousands.
        spelled = {form for secret in self.secrets for form in (secret, _escaped(secret))}
        self._pattern = _trie_pattern(spelled) if spelled else None
        self._active = bool(self.policy) or bool(self.secrets)

    def policy_for(self, namespace: str | None) -> PolicyName:
        return self.policy.for_namespace(namespace) if self._active else "full"

    def redact(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text

    def contains_secret(self, value: Any) -> bool:
        """Whether any string inside ``value`` holds a configured secret (one JSON encoding in
        pydantic-core and one search of the secrets' pattern)."""
        if self._pattern is None:
            return False
        return self._pattern.search(json_text(value)) is not None

    def apply(self, event: TraceEvent, query: str | None = None) -> str | None:
        """Reduce ``event`` in place under its namespace's policy and redact secrets from it.
        Returns what a span may show of the call's query (None unless the policy is ``full``).

        Only ``event`` changes: its arguments, result and effects are replaced, never modified,
        so values it shares with the call (the backend's effects, which a cancelled call and a
        backend's commit may each build an event from) are left as they are, and applying
        twice to events built from the same values gives the same event."""
        if not self._active:
            return query
        policy = self.policy.for_namespace(event.context.namespace)
        if policy != "full":
            query = None
            self._reduce_event(event, policy)
        elif any(e.namespace not in (None, event.context.namespace) for e in event.effects):
            # An event of a full namespace with effects in others (reconciliation, verify --record):
            # each such effect under its own namespace's policy.
            event.effects = [
                e if e.namespace in (None, event.context.namespace) else self._reduce_effect(e, event, policy)
                for e in event.effects
            ]
        if self.secrets:
            self._redact_event(event)
            query = self.redact(query) if query is not None else None
        return query

    def _reduce_event(self, event: TraceEvent, policy: PolicyName) -> None:
        event.arguments, event.result = reduce_bodies(event.tool, event.arguments, event.result, policy)
        event.effects = [self._reduce_effect(effect, event, policy) for effect in event.effects]

    def _reduce_effect(self, effect: MemoryEffect, event: TraceEvent, policy: PolicyName) -> MemoryEffect:
        if effect.namespace not in (None, event.context.namespace):
            policy = self.policy.for_namespace(effect.namespace)
            if policy == "full":
                return effect
        effect = effect.model_copy()
        if effect.content_before is not None:
            effect.content_before = receipt(effect.content_before, policy)
        if effect.content_after is not None:
            effect.content_after = receipt(effect.content_after, policy)
        if effect.evidence is not None:  # what reconciliation read: the backend's own state
            effect.evidence = {"receipt": receipt(effect.evidence, policy)}
        return effect

    def _redact_event(self, event: TraceEvent) -> None:
        effects = [
            (e.item_id, e.namespace, e.content_before, e.content_after, e.evidence) for e in event.effects
        ]
        # The parts as plain values: a fifth of the cost of encoding the whole model.
        parts = [event.arguments, event.result, event.error, event.gate, event.model, event.tool]
        if not self.contains_secret([*parts, list(event.context.__dict__.values()), effects]):
            return
        fn = self.redact
        event.arguments = _map_strings(event.arguments, fn)
        event.result = _map_strings(event.result, fn)
        event.error = fn(event.error) if event.error else event.error
        event.gate = fn(event.gate) if event.gate else event.gate
        event.model = fn(event.model) if event.model else event.model
        event.tool = fn(event.tool)
        event.context = event.context.model_copy(
            update={
                k: fn(v)
                for k, v in event.context.model_dump(exclude_none=True).items()
                if isinstance(v, str) and k != "role"
            }
        )
        event.effects = [
            effect.model_copy(
                update={
                    "item_id": fn(effect.item_id),
                    "namespace": fn(effect.namespace) if effect.namespace else effect.namespace,
                    "content_before": _map_strings(effect.content_before, fn),
                    "content_after": _map_strings(effect.content_after, fn),
                    "evidence": _map_strings(effect.evidence, fn),
                }
            )
            for effect in event.effects
        ]


class RedactingFilter(logging.Filter):
    """A logging filter that replaces configured secrets in every record's message."""

    def __init__(self, privacy: TracePrivacy) -> None:
        super().__init__()
        self.privacy = privacy

    def filter(self, record: logging.LogRecord) -> bool:
        if self.privacy.secrets:
            message = record.getMessage()
            redacted = self.privacy.redact(message)
            if record.exc_info:
                import traceback

                redacted += "\n" + self.privacy.redact("".join(traceback.format_exception(*record.exc_info)))
                record.exc_info = None
                record.exc_text = None
            if redacted != message or record.args:
                record.msg, record.args = redacted, None
        return True


def secrets_of(config: Any, api_keys: Mapping[str, str], servers: Iterable[Any] = ()) -> list[str]:
    """Every secret a process is configured with: memtap's API keys, the chat upstreams' keys,
    and the credentials of wrapped MCP servers (headers, and environment variables whose name
    says KEY, TOKEN, SECRET or PASSWORD)."""
    from memtap.config import resolve_secret
    from memtap.errors import ConfigError

    found = list(api_keys)
    memtap_section = getattr(config, "memtap", None)
    if memtap_section is not None:
        with contextlib.suppress(ConfigError):  # an unset variable is reported where it is used
            found += list(memtap_section.api_key_map())
    for entry in getattr(config, "model_list", []):
        try:
            key = resolve_secret(entry.litellm_params.api_key, "api_key")
        except ConfigError:
            key = None
        if key:
            found.append(key)
        for name, value in (entry.litellm_params.model_extra or {}).items():
            if isinstance(value, str) and _secret_name(name):
                found.append(value)
    for server in [*getattr(config, "mcp_servers", {}).values(), *servers]:
        for name, value in (getattr(server, "headers", None) or {}).items():
            if isinstance(value, str) and (name.lower() == "authorization" or _secret_name(name)):
                found.append(value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value)
        for name, value in (getattr(server, "env", None) or {}).items():
            if isinstance(value, str) and _secret_name(name):
                found.append(value)
    return found


def _secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"))
