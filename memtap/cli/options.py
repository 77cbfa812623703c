"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from memtap.errors import ConfigError

__all__ = [
    "content_policy_option",
    "db_option",
    "json_option",
    "limit_options",
    "loop_options",
    "open_store",
    "parse_host_port",
    "serving_config",
]

F = TypeVar("F", bound=Callable[..., Any])


def _default_db() -> Path:
    from memtap.proxy.runtime import default_db_path

    return default_db_path()


def db_option(func: F) -> F:
    return click.option(
        "--db",
        "db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Trace database (default: $MEMTAP_DB or ~/.memtap/memtap.db).",
    )(func)


def content_policy_option(func: F) -> F:
    return click.option(
        "--content-policy",
        "content_policy",
        multiple=True,
        metavar="PATTERN=POLICY",
        help="What the trace keeps of bodies in namespaces matching PATTERN (glob): full, hashed or none "
        "(repeatable; first match wins, before the config's memtap.content_policy; default full).",
    )(func)


def limit_options(func: F) -> F:
    """The caps on client input (memtap.limits), passed on as one ``limits`` argument."""
    import functools

    from memtap.limits import DEFAULT_LIMITS, Limits

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["limits"] = Limits(
            max_field_chars=kwargs.pop("max_field_chars"),
            max_metadata_bytes=kwargs.pop("max_metadata_bytes"),
            max_json_depth=kwargs.pop("max_json_depth"),
            max_header_bytes=kwargs.pop("max_header_bytes"),
        )
        return func(*args, **kwargs)

    options = [
        ("--max-field-chars", DEFAULT_LIMITS.max_field_chars, 16,
         "Longest namespace, session, run, id, principal or X-Memtap-* header, in characters."),
        ("--max-metadata-bytes", DEFAULT_LIMITS.max_metadata_bytes, 2,
         "Largest memory metadata, in bytes of compact UTF-8 JSON."),
        ("--max-json-depth", DEFAULT_LIMITS.max_json_depth, 4,
         "Deepest nesting of a /v1 request body or of memory metadata."),
        ("--max-header-bytes", DEFAULT_LIMITS.max_header_bytes, 1024,
         "Largest HTTP header value, in bytes (64 times this for all headers)."),
    ]  # fmt: skip
    decorated: Any = wrapper
    for flag, default, least, text in reversed(options):
        decorated = click.option(flag, type=click.IntRange(min=least), default=default, show_default=True,
                                 help=text)(decorated)  # fmt: skip
    return decorated  # type: ignore[no-any-return]


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")(func)


def resolve_db(db: Path | None) -> Path:
    return db if db is not None else _default_db()


def open_store(db: Path | None) -> Any:
    """Open an existing trace database for reading; a missing one is an error, not a new file."""
    from memtap.trace.store import TraceStore

    path = resolve_db(db)
    try:
        exists = path.exists()
    except OSError as exc:
        raise ConfigError(f"cannot access trace database {path}: {exc.strerror}") from exc
    if not exists:
        raise ConfigError(f"no trace database at {path} (run 'memtap serve' first, or pass --db)")
    return TraceStore(path, read_only_ok=True)


def serving_config(
    config_path: Path | None, cli_keys: tuple[str, ...], verbose: bool
) -> tuple[Any, dict[str, str]]:
    """What `serve` and `proxy` share: logging, the config file (loaded once), and the API keys
    from --api-key, ``$MEMTAP_API_KEYS`` and the config's ``memtap.api_keys``, merged."""
    import logging
    import os

    from memtap.config import ConfigFile, load_config, parse_api_keys

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(name)s: %(message)s")
    config = load_config(config_path) if config_path is not None else ConfigFile()
    env_keys = os.environ.get("MEMTAP_API_KEYS")
    keys = {**parse_api_keys([*cli_keys, *([env_keys] if env_keys else [])]), **config.memtap.api_key_map()}
    return config, keys


def loop_options() -> dict[str, bool]:
    """uvloop when it is installed (uvicorn[standard] brings it): about halves the event loop's
    cost per proxied call (docs/chat-proxy.md)."""
    import importlib.util

    return {"use_uvloop": importlib.util.find_spec("uvloop") is not None}


def parse_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or a bare ``PORT`` (on 127.0.0.1)."""
    if value.count(":") > 1 and not value.startswith("["):
        raise ConfigError(f"--http takes HOST:PORT; write an IPv6 address in brackets, as [{value}]:PORT")
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"--http takes HOST:PORT; {value!r} has no valid port") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"--http port {number} is out of range 0-65535")
    return host, number


def auth_options(f: Any) -> Any:
    """``--grant``, ``--act-for`` and ``--context-args``, shared by ``serve`` and ``proxy``."""
    f = click.option(
        "--context-args",
        is_flag=True,
        default=None,
        help="Offer the context fields (namespace, session, ...) in the tools' schemas, for clients "
        "with no other channel (also memtap.context_args).",
    )(f)
    f = click.option(
        "--act-for",
        "act_for",
        multiple=True,
        metavar="PRINCIPAL=PATTERN",
        help="Let PRINCIPAL act for requesters matching PATTERN (repeatable).",
    )(f)
    f = click.option(
        "--grant",
        "grants",
        multiple=True,
        metavar="PRINCIPAL=PATTERN:RIGHTS",
        help="Give PRINCIPAL RIGHTS (read,write,delete,admin) on namespaces matching PATTERN "
        "(repeatable; added to its own namespace's read,write,delete unless the config lists its grants).",
    )(f)
    return f


def auth_settings(
    config: Any,
    keys: dict[str, str],
    *,
    grants: tuple[str, ...] = (),
    act_for: tuple[str, ...] = (),
    context_args: bool | None = None,
    gate: str | None = None,
) -> dict[str, Any]:
    """The authorisation part of :class:`~memtap.proxy.runtime.Settings` from the config's
    ``memtap`` section and the command line (which adds to it)."""
    from dataclasses import replace

    from memtap.auth import Grant, Policy, PrincipalPolicy, parse_rights
    from memtap.proxy.policy import GateMode

    section = config.memtap
    policies = {p.name: p for p in section.principal_policies()}
    for raw in grants:
        principal, sep, rest = raw.partition("=")
        pattern, colon, rights = rest.rpartition(":")
        if not sep or not colon or not principal.strip() or not pattern.strip() or not rights.strip():
            raise ConfigError(
                f"--grant takes PRINCIPAL=PATTERN:RIGHTS, e.g. alice=shared/*:read; got {raw!r}"
            )
        name = principal.strip()
        grant = Grant(pattern.strip(), parse_rights(rights.split(","), f"--grant {raw}: principal {name!r}"))
        base = policies.get(name) or PrincipalPolicy(name)
        policies[name] = replace(base, grants=(*base.grants, grant))
    for raw in act_for:
        principal, sep, pattern = raw.partition("=")
        if not sep or not principal.strip() or not pattern.strip():
            raise ConfigError(f"--act-for takes PRINCIPAL=PATTERN, e.g. app=users/*; got {raw!r}")
        name = principal.strip()
        base = policies.get(name) or PrincipalPolicy(name)
        policies[name] = replace(base, act_for=(*base.act_for, pattern.strip()))
    configured = bool(keys or policies)
    mode = gate or section.gate or ("enforce" if configured else "observe")
    return {
        "policy": Policy(policies.values()),
        "pinned": section.pinned_fields(),
        "context_args": section.context_args if context_args is None else context_args,
        "gate": GateMode(mode),
    }
