"""``memtap.jwt``: the settings of bearer JWT authentication (see :mod:`memtap.auth.jwt`).

Light to import (pydantic only): the config file's model holds it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memtap.auth.grants import Right

__all__ = ["ASYMMETRIC_ALGORITHMS", "DEFAULT_SCOPES", "JwtSettings"]

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_SCOPES: dict[str, list[Right]] = {
    "memory:read": [Right.READ],
    "memory:write": [Right.WRITE],
    "memory:delete": [Right.DELETE],
    "memory:admin": [Right.ADMIN],
}


class JwtSettings(BaseModel):
    """``memtap.jwt`` in the config file (or ``--jwt-issuer``, ``--jwt-audience``, ``--jwks``)."""

    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(..., min_length=1, description="the iss every token must carry")
    audience: list[str] = Field(
        default_factory=list, description="accepted aud values (default: the resource)"
    )
    jwks: str = Field(..., min_length=1, description="a JWKS file, or an http(s) URL to fetch it from")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    principal_claim: str = Field("sub", min_length=1)
    scope_claim: str = Field("scope", min_length=1)
    scopes: dict[str, list[Right]] = Field(default_factory=lambda: dict(DEFAULT_SCOPES))
    leeway_s: float = Field(30.0, ge=0, le=600, description="clock skew allowed on exp and nbf")
    resource: str | None = Field(None, description="this server's public MCP URL (RFC 9728 resource)")
    authorization_servers: list[str] = Field(default_factory=list, description="default: [issuer]")
    known_principals_only: bool | None = Field(
        None, description="refuse subjects with no principals entry (default: when principals exist)"
    )
    jwks_refresh_s: float = Field(300.0, gt=0)
    jwks_min_refetch_s: float = Field(10.0, ge=0)

    @field_validator("audience", "authorization_servers", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("scopes", mode="before")
    @classmethod
    def _right_or_rights(cls, value: object) -> object:
        if isinstance(value, dict):
            return {scope: [rights] if isinstance(rights, str) else rights for scope, rights in value.items()}
        return value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        bad = [alg for alg in value if alg not in ASYMMETRIC_ALGORITHMS]
        if bad:
            accepted = ", ".join(sorted(ASYMMETRIC_ALGORITHMS))
            raise ValueError(f"algorithms {bad} not accepted: use asymmetric ones ({accepted})")
        return value

    @field_validator("jwks")
    @classmethod
    def _file_or_http(cls, value: str) -> str:
        if "://" in value and not value.startswith(("http://", "https://")):
            raise ValueError(f"jwks must be a file path or an http(s) URL, not {value.split('://')[0]}://")
        return value

    @model_validator(mode="after")
    def _has_audience(self) -> JwtSettings:
        if not self.audience and self.resource is None:
            raise ValueError("needs an audience (or a resource, which is then the audience)")
        return self

    # The defaults are derived, not stored, so that flags overriding the config's issuer or
    # resource (cli/jwt.py) move what was derived from them too.
    @property
    def audiences(self) -> list[str]:
        """The ``aud`` values accepted: ``audience``, else the resource."""
        return self.audience or ([self.resource] if self.resource is not None else [])

    @property
    def issuers(self) -> list[str]:
        """The authorization servers the metadata names: ``authorization_servers``, else the issuer."""
        return self.authorization_servers or [self.issuer]
