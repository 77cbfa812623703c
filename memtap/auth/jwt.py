"""Bearer JWTs: memtap as an OAuth 2.1 protected resource (the MCP authorization spec).

An access token issued by the configured authorization server is verified here: its signature
against the issuer's key set (:mod:`memtap.auth.jwks`), its issuer, audience, expiry and
not-before; its principal claim (``sub``) becomes the caller's principal and its scopes cap the
principal's rights. Verification is PyJWT's (with ``cryptography``): a maintained library that the
MCP SDK already depends on. Only asymmetric algorithms are accepted, so memtap never holds a
signing secret; ``alg: none`` and HMAC tokens are refused before any key is looked at.

A refused token raises :class:`InvalidToken`, whose ``error`` is the RFC 6750 error code
(``invalid_token``, 401; ``insufficient_scope``, 403). Messages name the problem and the
claimed subject, never the token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

import jwt
from mcp.server.auth.provider import AccessToken

from memtap.auth.caller import Caller
from memtap.auth.gate import bearer_token
from memtap.auth.grants import Right
from memtap.auth.jwks import KeySource, UnknownKey
from memtap.auth.jwt_config import JwtSettings
from memtap.errors import AuthError

__all__ = [
    "InvalidToken",
    "JwtAuthenticator",
    "JwtSettings",
    "looks_like_jwt",
]

_NOTHING: Mapping[str, Any] = MappingProxyType({})
VERIFIED_TTL_S = 60.0
VERIFIED_MAX = 10_000
BearerErrorCode = Literal["invalid_request", "invalid_token", "insufficient_scope"]


class InvalidToken(AuthError):
    """A bearer token memtap refuses; ``error`` is its RFC 6750 code, ``claimed`` what the token
    said about itself (subject, issuer, kid: unverified, for the record)."""

    def __init__(
        self,
        message: str,
        *,
        error: BearerErrorCode = "invalid_token",
        status: int = 401,
        scope: str | None = None,
        claimed: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.error = error
        self.scope = scope
        self.claimed = dict(claimed or {})


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts, header and payload not empty: a JWS in compact form (an
    unsecured ``alg: none`` token has an empty third part). API keys are told apart by this."""
    parts = token.split(".")
    return len(parts) == 3 and bool(parts[0]) and bool(parts[1])


def _short(value: object, limit: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _when(stamp: object) -> str:
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _short(stamp)


class JwtAuthenticator:
    """Verifies bearer JWTs; an ``Authenticator`` for the gate and the SDK's ``TokenVerifier``.

    ``known_principal`` says whether memtap has a principals entry for a subject; with
    ``known_principals_only`` (default: when it is given) tokens for others are refused.
    ``pinned``: by principal, the context fields the operator fixed (as for API keys).
    """

    via = "jwt"

    def __init__(
        self,
        settings: JwtSettings,
        *,
        known_principal: Callable[[str], bool] | None = None,
        pinned: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.settings = settings
        self.keys = KeySource(
            settings.jwks, refresh_s=settings.jwks_refresh_s, min_refetch_s=settings.jwks_min_refetch_s
        )
        only = settings.known_principals_only
        self.known_principal = known_principal if (only is None or only) else None
        if only and known_principal is None:
            self.known_principal = lambda _: False  # asked for, yet no principals: refuse everyone
        self._verified: dict[str, tuple[Caller, float, int]] = {}
        # Context fields the operator fixed, by principal (a principal's config ``namespace``):
        # a token's caller is pinned exactly as the same principal's API key is.
        self._pinned = {name: MappingProxyType(dict(fields)) for name, fields in (pinned or {}).items()}

    def start(self) -> None:
        """Load the key set now (a missing file or unreachable URL is a ConfigError at start-up)."""
        self.keys.load()

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller a bearer JWT proves; None for no bearer token or one that is not a JWT
        (an API key, for the next authenticator); InvalidToken for a JWT memtap refuses."""
        token = bearer_token(headers)
        if token is None or not looks_like_jwt(token):
            return None
        return self.verify(token)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The MCP SDK's ``TokenVerifier``: the token's ``AccessToken``, or None when refused."""
        try:
            claims, caller = self._verify(token)
        except InvalidToken:
            return None
        exp = claims.get("exp")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or caller.principal),
            scopes=self._granted_scopes(claims),
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            resource=self.settings.resource,
            subject=caller.principal,
            claims={"iss": claims.get("iss")},
        )

    def verify(self, token: str) -> Caller:
        """The caller a token proves, or InvalidToken saying why not.

        A verified token is remembered (until it expires, for at most ``VERIFIED_TTL_S``, and
        only while the key set is the one that verified it): an MCP client sends the same token
        with every request, and a signature check costs about a millisecond. Refusals are never
        remembered."""
        now = time.time()
        hit = self._verified.get(token)
        if hit is not None and now < hit[1] and hit[2] == self.keys.generation:
            return hit[0]
        generation = self.keys.generation
        claims, caller = self._verify(token)
        exp = claims.get("exp")
        until = min(float(exp), now + VERIFIED_TTL_S) if isinstance(exp, int | float) else now
        if len(self._verified) >= VERIFIED_MAX:
            self._verified.clear()
        self._verified[token] = (caller, until, generation)
        return caller

    def _verify(self, token: str) -> tuple[dict[str, Any], Caller]:
        settings = self.settings
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"bearer token is not a valid JWT: {exc}") from None
        claimed = {
            name: _short(unverified[claim])
            for name, claim in (("sub", settings.principal_claim), ("iss", "iss"))
            if claim in unverified
        }
        if "kid" in header:
            claimed["kid"] = _short(header["kid"])
        subject = f" (sub {claimed['sub']!r})" if "sub" in claimed else ""
        alg = header.get("alg")
        if alg is None:
            raise InvalidToken(f"token header names no algorithm (alg){subject}", claimed=claimed)
        if alg not in settings.algorithms:
            raise InvalidToken(
                f"token algorithm {_short(alg)!r} is not accepted "
                f"(accepted: {', '.join(settings.algorithms)}){subject}",
                claimed=claimed,
            )
        kid = header.get("kid")
        try:
            key = self.keys.key(None if kid is None else str(kid), str(alg))
        except UnknownKey as exc:
            raise InvalidToken(
                f"token signature cannot be checked: {exc}{subject}", claimed=claimed
            ) from None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[str(alg)],
                audience=settings.audiences,
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options={"require": ["exp", "iss", "aud", settings.principal_claim]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken(
                f"token expired at {_when(unverified.get('exp'))}{subject}", claimed=claimed
            ) from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken(
                f"token not valid before {_when(unverified.get('nbf'))}{subject}", claimed=claimed
            ) from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(
                f"token audience {_short(unverified.get('aud'))!r} is not this server "
                f"(expected {' or '.join(settings.audiences)}){subject}",
                claimed=claimed,
            ) from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(
                f"token issuer {_short(unverified.get('iss'))!r} is not the configured issuer "
                f"{settings.issuer!r}{subject}",
                claimed=claimed,
            ) from None
        except jwt.InvalidSignatureError:
            raise InvalidToken(
                f"token signature does not verify with key {_short(kid)!r}{subject}", claimed=claimed
            ) from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"token has no {exc.claim!r} claim{subject}", claimed=claimed) from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"token refused: {exc}{subject}", claimed=claimed) from None
        principal = claims.get(settings.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(
                f"token claim {settings.principal_claim!r} is not a non-empty string", claimed=claimed
            )
        if self.known_principal is not None and not self.known_principal(principal):
            raise InvalidToken(
                f"token subject {_short(principal)!r} is not a principal memtap knows "
                "(no memtap.principals entry)",
                claimed=claimed,
            )
        rights = self._rights(claims)
        if not rights:
            held = " ".join(self._granted_scopes(claims)) or "none"
            raise InvalidToken(
                f"token grants none of memtap's scopes ({', '.join(settings.scopes)}); it has: {held}"
                f"{subject}",
                error="insufficient_scope",
                status=403,
                scope=" ".join(settings.scopes),
                claimed=claimed,
            )
        return claims, Caller(principal, "jwt", scopes=rights, pinned=self._pinned.get(principal, _NOTHING))

    def _granted_scopes(self, claims: Mapping[str, Any]) -> list[str]:
        raw = claims.get(self.settings.scope_claim)
        if isinstance(raw, str):
            return raw.split()
        if isinstance(raw, list):
            return [each for each in raw if isinstance(each, str)]
        return []

    def _rights(self, claims: Mapping[str, Any]) -> frozenset[Right]:
        mapping = self.settings.scopes
        return frozenset(right for scope in self._granted_scopes(claims) for right in mapping.get(scope, ()))
