"""A test authorization server's keys: RSA and EC key pairs made per test, their JWKS, signed tokens.

Nothing here is memtap's code: it stands in for the identity provider that issues tokens."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://issuer.test"
AUDIENCE = "https://memtap.test/mcp"
ALL_SCOPES = "memory:read memory:write memory:delete"


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    @property
    def public_jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        jwk: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def rsa_key(kid: str = "rsa-1") -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str = "ec-1") -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


@dataclass
class Issuer:
    keys: list[SigningKey] = field(default_factory=lambda: [rsa_key(), ec_key()])
    issuer: str = ISSUER
    audience: str = AUDIENCE

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.public_jwk for key in self.keys]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def token(
        self,
        sub: str = "alice",
        *,
        key: SigningKey | None = None,
        scope: str | None = ALL_SCOPES,
        ttl: int = 300,
        kid: str | None = "",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        key = key or self.keys[0]
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": sub,
            "iat": now,
            "exp": now + ttl,
            **({"scope": scope} if scope is not None else {}),
            **claims,
        }
        payload = {name: value for name, value in payload.items() if value is not None}
        header = {"kid": key.kid if kid == "" else kid, **(headers or {})}
        if header["kid"] is None:
            del header["kid"]
        return jwt.encode(payload, key.private, algorithm=key.alg, headers=header)


def unsigned_token(**claims: Any) -> str:
    """``alg: none``: a token with no signature at all."""
    return jwt.encode(claims, None, algorithm="none")


class JwksServer:
    """A loopback HTTP server publishing a JWKS, counting its fetches."""

    def __init__(self, issuer: Issuer) -> None:
        self.issuer = issuer
        self.fetches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.fetches += 1
                body = json.dumps(owner.issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
