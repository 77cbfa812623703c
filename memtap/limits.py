"""Caps on what a client may send, and a JSON loader that keeps to them.

Every front door refuses input over these caps with a client error (HTTP 400/413/431, an MCP
tool error) that names the field and the cap, and records the refusal as an error event. The
caps hold per process: :class:`~memtap.proxy.runtime.Runtime` installs its settings' caps
when it opens (:func:`install`); code outside a server uses the defaults.

- ``max_field_chars`` (1,024): context fields (namespace, session, run, ...), the principal,
  memory ids, every ``X-Memtap-*`` header, and short free strings (a delete's ``reason``);
- ``max_metadata_bytes`` (64 KiB): a memory's ``metadata``, as compact UTF-8 JSON;
- ``max_json_depth`` (64): nesting of a ``/v1`` request body and of ``metadata``;
- ``max_header_bytes`` (16 KiB): one HTTP header value (64 times that for all headers).

Content size (``--max-content-bytes``) and the ``/v1`` body size (``memtap.max_body_bytes``)
are capped where they always were; see ``docs/limits.md`` for the whole list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from memtap.errors import ContentTooLarge, InvalidArguments

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_BATCH_ITEMS",
    "MAX_ITEMS",
    "MAX_OFFSET",
    "MAX_TURN",
    "Limits",
    "TooDeep",
    "bound_schema",
    "check_arguments",
    "check_context_fields",
    "check_metadata",
    "check_text",
    "clip",
    "current",
    "first_unencodable",
    "install",
    "json_depth_exceeds",
    "load_json",
    "unencodable",
    "within_caps",
]

# Static bounds of the tool schemas (not configurable: they are part of the tools' contract).
MAX_OFFSET = 1_000_000_000  # memory_list's offset: beyond any namespace, within SQLite's INTEGER
MAX_TURN = 2**53 - 1  # an integer turn: the largest integer every JSON reader keeps exactly
MAX_ITEMS = 1_000  # entries in one access list (participants, allow, deny)
MAX_BATCH_ITEMS = 1_000  # memories in one memory_add_batch call


@dataclass(frozen=True)
class Limits:
    """The caps one memtap process enforces on client input (see the module's table)."""

    max_field_chars: int = 1024
    max_metadata_bytes: int = 64 << 10
    max_json_depth: int = 64
    max_header_bytes: int = 16 << 10

    @property
    def max_headers_bytes(self) -> int:
        """All of a request's headers together."""
        return 64 * self.max_header_bytes


DEFAULT_LIMITS = Limits()
_current = DEFAULT_LIMITS


def install(limits: Limits) -> None:
    """Make ``limits`` the caps of this process (a server's runtime does this when it opens)."""
    global _current
    _current = limits


def current() -> Limits:
    return _current


_ALL_BUT_OPENERS = bytes(range(256)).translate(None, b"[{")


class TooDeep(ValueError):
    """A JSON value nested deeper than the cap."""


def json_depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects more than ``max_depth`` deep.

    Iterative (no recursion to run out of) and stops at the first container too deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children: Iterable[Any] = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def load_json(raw: bytes | str, *, max_depth: int | None = None) -> Any:
    """``json.loads`` that refuses, rather than crashes on, deep nesting: :class:`TooDeep` when the
    value nests more than ``max_depth`` (default: the installed cap) arrays and objects.

    The structure is walked only when the text holds more opening brackets than the cap (a
    typical chat body does not: it costs one ``bytes.translate``); Python's own parser recursion
    limit is caught too."""
    cap = _current.max_json_depth if max_depth is None else max_depth
    try:
        value = json.loads(raw)
    except RecursionError:
        raise TooDeep(f"the JSON nests arrays and objects more than {cap} deep") from None
    if isinstance(value, dict | list):
        text = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
        opened = len(text.translate(None, _ALL_BUT_OPENERS))  # one pass: every "[" and "{"
        if opened > cap and json_depth_exceeds(value, cap):
            raise TooDeep(f"the JSON nests arrays and objects more than {cap} deep")
    return value


def unencodable(text: str) -> bool:
    """Whether ``text`` holds an unpaired surrogate (it cannot be written as UTF-8)."""
    if text.isascii():  # constant time in CPython; most text is ASCII
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clip(value: str | None, limits: Limits | None = None) -> str | None:
    """``value`` cut to ``max_field_chars`` (for informational fields such as a client's name)."""
    cap = (limits or _current).max_field_chars
    if value is None or len(value) <= cap:
        return value
    return value[:cap]


def first_unencodable(value: Any, where: str = "") -> str | None:
    """Where the first string in ``value`` (parsed JSON) that holds an unpaired surrogate is, as
    ``messages[0].content``; None when every string (keys included) is valid Unicode text."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, str):
            if unencodable(node):
                return at or "the value"
        elif isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and unencodable(key):
                    return f"{at}.{key!r}" if at else repr(key)
                stack.append((child, f"{at}.{key}" if at else str(key)))
        elif isinstance(node, list):
            stack.extend((child, f"{at}[{index}]") for index, child in enumerate(node))
    return None


def check_text(where: str, value: str, max_chars: int, flag: str = "--max-field-chars") -> None:
    """Refuse a string over ``max_chars`` characters, or one that is not valid Unicode text."""
    if len(value) > max_chars:
        raise InvalidArguments(f"{where}: {len(value)} characters; the limit is {max_chars} ({flag})")
    if unencodable(value):
        raise InvalidArguments(f"{where}: not valid UTF-8 text (it holds an unpaired surrogate)")


def check_context_fields(fields: Mapping[str, Any], limits: Limits | None = None) -> None:
    """Refuse context fields (namespace, session, ...) longer than ``max_field_chars``."""
    cap = (limits or _current).max_field_chars
    for key, value in fields.items():
        if isinstance(value, str) and (len(value) > cap or unencodable(value)):
            check_text(f"context.{key}", value, cap)


def within_caps(fields: Mapping[str, Any], limits: Limits | None = None) -> dict[str, Any]:
    """``fields`` without the strings over ``max_field_chars`` or not valid Unicode text (for the
    context recorded with a call refused for them)."""
    cap = (limits or _current).max_field_chars
    return {
        key: value
        for key, value in fields.items()
        if not (isinstance(value, str) and (len(value) > cap or unencodable(value)))
    }


def _json_size(value: Any) -> int:
    """The size of ``value`` as compact UTF-8 JSON: pydantic_core's encoder (about 10x
    ``json.dumps`` on a small object: every memory_add pays this); for a value it refuses,
    ``json.dumps``, which raises the error the caller names."""
    try:
        return len(to_json(value))
    except (ValueError, TypeError):
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def check_metadata(where: str, metadata: Any, limits: Limits | None = None) -> None:
    """Refuse metadata nested deeper than ``max_json_depth`` or larger than ``max_metadata_bytes``."""
    if metadata is None:
        return
    lim = limits or _current
    if isinstance(metadata, dict | list) and json_depth_exceeds(metadata, lim.max_json_depth):
        raise InvalidArguments(f"{where}: nested more than {lim.max_json_depth} deep (--max-json-depth)")
    try:
        size = _json_size(metadata)
    except UnicodeEncodeError:
        raise InvalidArguments(f"{where}: not valid UTF-8 text (it holds an unpaired surrogate)") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(f"{where}: not JSON ({exc})") from None
    if size > lim.max_metadata_bytes:
        raise InvalidArguments(
            f"{where}: {size} bytes as JSON; the limit is {lim.max_metadata_bytes} bytes "
            "(--max-metadata-bytes)"
        )


# Tool arguments measured in bytes against --max-content-bytes rather than in characters.
_CONTENT_FIELDS = frozenset({"content", "query"})


def check_arguments(
    tool: str, args: BaseModel, *, max_content_bytes: int, limits: Limits | None = None
) -> None:
    """Refuse a tool call whose strings, metadata or content are over the caps, naming the field."""
    lim = limits or _current
    for name, value in args:
        if value is None:
            continue
        if name in _CONTENT_FIELDS and isinstance(value, str):
            try:  # one encoding both measures the content and finds an unpaired surrogate
                size = len(value) if value.isascii() else len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidArguments(
                    f"{tool}: {name}: not valid UTF-8 text (it holds an unpaired surrogate)"
                ) from None
            if size > max_content_bytes:
                raise ContentTooLarge(
                    f"{name} is {size} bytes; the limit is {max_content_bytes} bytes (--max-content-bytes)"
                )
        elif name == "metadata":
            check_metadata(f"{tool}: metadata", value, lim)
        elif isinstance(value, str):
            check_text(f"{tool}: {name}", value, lim.max_field_chars)
        elif isinstance(value, BaseModel):
            check_arguments(f"{tool}: {name}", value, max_content_bytes=max_content_bytes, limits=lim)
        elif isinstance(value, list):
            for index, entry in enumerate(value):
                if isinstance(entry, str):
                    check_text(f"{tool}: {name}[{index}]", entry, lim.max_field_chars)


def bound_schema(schema: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
    """A tool's JSON schema with ``maxLength`` on every string property but content and query
    (those are capped in UTF-8 bytes), as the installed caps say; ``schema`` is not changed."""
    cap = (limits or _current).max_field_chars

    def bound(node: Any, name: str | None) -> Any:
        if isinstance(node, list):
            return [bound(each, name) for each in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {prop: bound(sub, prop) for prop, sub in value.items()}
            elif key == "$defs" and isinstance(value, dict):
                out[key] = {each: bound(sub, None) for each, sub in value.items()}
            elif key in ("anyOf", "oneOf", "items"):
                out[key] = bound(value, name)
            else:
                out[key] = value
        if out.get("type") == "string" and name not in _CONTENT_FIELDS:
            out.setdefault("maxLength", cap)
        return out

    return bound(schema, None)  # type: ignore[no-any-return]
