"""``--jwt-issuer``, ``--jwt-audience``, ``--jwks`` (and ``--jwt-resource``): bearer JWTs from the
command line, for the simple case; the config file's ``memtap.jwt`` holds the rest. Flags given
override the config's fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from memtap.errors import ConfigError

__all__ = ["jwt_authenticators", "jwt_options"]

F = TypeVar("F", bound=Callable[..., Any])


def jwt_options(func: F) -> F:
    options = [
        click.option(
            "--jwt-issuer", metavar="ISS", help="Accept bearer JWTs from this issuer (the iss claim)."
        ),
        click.option(
            "--jwt-audience",
            metavar="AUD",
            help="The aud a JWT must carry (default: --jwt-resource).",
        ),
        click.option(
            "--jwks",
            metavar="FILE_OR_URL",
            help="The issuer's public keys: a JWKS file, or an http(s) URL to fetch them from.",
        ),
        click.option(
            "--jwt-resource",
            metavar="URL",
            help="This server's public MCP URL, for the protected-resource metadata.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def jwt_authenticators(
    config: Any,
    *,
    jwt_issuer: str | None,
    jwt_audience: str | None,
    jwks: str | None,
    jwt_resource: str | None,
) -> list[Any]:
    """The JWT authenticator the flags and the config's ``memtap.jwt`` describe, its key set loaded
    (a missing file or unreachable URL stops the start with a one-line error), or none."""
    base = config.memtap.jwt
    flags = {
        "issuer": jwt_issuer,
        "audience": jwt_audience,
        "jwks": jwks,
        "resource": jwt_resource,
    }
    given = {name: value for name, value in flags.items() if value is not None}
    if base is None and not given:
        return []
    from pydantic import ValidationError

    from memtap.auth.jwt import JwtAuthenticator  # PyJWT and cryptography: only when JWTs are wanted
    from memtap.auth.jwt_config import JwtSettings

    fields = {**(base.model_dump(exclude_unset=True) if base is not None else {}), **given}
    try:
        settings = JwtSettings.model_validate(fields)
    except ValidationError as exc:
        missing = [str(err["loc"][0]) for err in exc.errors() if err["type"] == "missing"]
        if missing:
            named = ", ".join(f"--{'jwks' if m == 'jwks' else 'jwt-' + m}" for m in missing)
            raise ConfigError(f"bearer JWTs need {named} (or memtap.jwt in the config)") from None
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"JWT settings: {problems.replace('Value error, ', '')}") from None
    principals = set(config.memtap.principals)
    if settings.known_principals_only and not principals:
        raise ConfigError("memtap.jwt.known_principals_only needs memtap.principals to know anyone")
    authenticator = JwtAuthenticator(
        settings,
        known_principal=principals.__contains__ if principals else None,
        pinned=config.memtap.pinned_fields(),
    )
    authenticator.start()
    return [authenticator]
