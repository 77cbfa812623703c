"""The key set bearer JWTs are verified against: a JWKS file, or a JWKS URL fetched and cached.

Keys are found by the token's ``kid``. A ``kid`` the cached set does not hold makes the source
look again (the issuer may have rotated its keys): a file is re-read when it changed on disk; a
URL is fetched again in the background, at most once per ``min_refetch_s``, so tokens with
made-up ``kid`` values cannot turn memtap into a load generator against the issuer. A URL's
set is also refreshed when it is older than ``refresh_s`` (issuers publish a new key before
they sign with it, so this refresh usually has it before the first token does). Only public
keys are kept: a set holding private or symmetric key material is refused, so no signing secret
can sit in memtap's memory or logs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from jwt import PyJWK
from jwt.exceptions import PyJWTError

from memtap.errors import ConfigError

__all__ = ["MAX_JWKS_BYTES", "KeySource", "UnknownKey"]

log = logging.getLogger("memtap.auth.jwks")

MAX_JWKS_BYTES = 1 << 20
# Members that only a private or symmetric JWK has (RFC 7518 §6.2.2, §6.3.2, §6.4.1; RFC 8037).
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


class UnknownKey(Exception):
    """No usable key for a token; the message says why (without the token)."""


def _is_url(where: str) -> bool:
    return where.startswith(("http://", "https://"))


def parse_jwks(data: bytes, where: str) -> dict[str | None, dict[str, Any]]:
    """The signing keys of a JWKS document, by ``kid``; ConfigError naming ``where`` if unusable."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"JWKS at {where} is not JSON: {exc}") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ConfigError(f'JWKS at {where} has no "keys" list')
    found: dict[str | None, dict[str, Any]] = {}
    for index, jwk in enumerate(keys):
        if not isinstance(jwk, dict):
            raise ConfigError(f"JWKS at {where}: keys[{index}] is not an object")
        secret = sorted(_PRIVATE_MEMBERS & jwk.keys())
        if secret:
            raise ConfigError(
                f"JWKS at {where}: keys[{index}] holds private or symmetric key material "
                f"({', '.join(secret)}); publish only public keys"
            )
        if jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        found[str(kid) if kid is not None else None] = jwk
    if not found:
        raise ConfigError(f"JWKS at {where} holds no signing keys")
    return found


class KeySource:
    """Public keys by ``kid``, from a file or a URL, with rotation handling (module docstring).

    Lookups never block on the network: the gate asks for keys on the event loop. A URL is
    fetched once at start-up (:meth:`load`); later fetches run on a background thread, and a
    token whose ``kid`` arrived before its key is refused with a message saying the set is
    being fetched again."""

    def __init__(
        self, where: str, *, refresh_s: float = 300.0, min_refetch_s: float = 10.0, timeout_s: float = 5.0
    ) -> None:
        self.where = where
        self.refresh_s = refresh_s
        self.min_refetch_s = min_refetch_s
        self.timeout_s = timeout_s
        # The keys by kid and the PyJWK made from them by (kid, alg): swapped together, in one
        # assignment, so a lookup on the event loop never mixes two generations of the set.
        self._set: tuple[dict[str | None, dict[str, Any]], dict[tuple[str | None, str], PyJWK]] = ({}, {})
        self._loaded_at = float("-inf")
        self._tried_at = float("-inf")
        self._stamp: tuple[int, int] | None = None  # a file's (mtime_ns, size) when read
        self._lock = threading.Lock()
        self._fetching: threading.Thread | None = None
        self.last_error: str | None = None
        self.generation = 0  # counts loads: what was verified with an older set is checked again

    @property
    def is_url(self) -> bool:
        return _is_url(self.where)

    @property
    def kids(self) -> list[str | None]:
        return list(self._set[0])

    def load(self) -> None:
        """Read or fetch the set now; ConfigError when it cannot be used (at start-up: fail fast)."""
        self._tried_at = time.monotonic()
        if self.is_url:
            data, stamp = self._fetch(), None
        else:
            data, stamp = self._read()
        keys = parse_jwks(data, self.where)
        with self._lock:
            self._set, self._stamp = (keys, {}), stamp
            self.generation += 1
            self._loaded_at = time.monotonic()
            self.last_error = None

    def _read(self) -> tuple[bytes, tuple[int, int]]:
        path = Path(self.where)
        try:
            stat = path.stat()
            if stat.st_size > MAX_JWKS_BYTES:
                raise ConfigError(f"JWKS file {path} is larger than {MAX_JWKS_BYTES} bytes")
            return path.read_bytes(), (stat.st_mtime_ns, stat.st_size)
        except OSError as exc:
            raise ConfigError(f"cannot read JWKS file {path}: {exc.strerror or exc}") from None

    def _fetch(self) -> bytes:
        request = urllib.request.Request(self.where, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data: bytes = response.read(MAX_JWKS_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise ConfigError(f"cannot fetch JWKS from {self.where}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConfigError(f"cannot fetch JWKS from {self.where}: {reason}") from None
        if len(data) > MAX_JWKS_BYTES:
            raise ConfigError(f"JWKS at {self.where} is larger than {MAX_JWKS_BYTES} bytes")
        return data

    def _reload_file(self) -> None:
        """Re-read the file if it changed on disk (a cheap ``stat`` otherwise)."""
        try:
            stat = Path(self.where).stat()
        except OSError:
            return
        if (stat.st_mtime_ns, stat.st_size) != self._stamp:
            self._reload("the file changed")

    def _reload(self, why: str) -> None:
        try:
            self.load()
        except ConfigError as exc:
            self.last_error = str(exc)
            log.warning("JWKS reload (%s) failed, keeping the keys held: %s", why, exc)
        else:
            log.info("JWKS reloaded (%s): kids %s", why, self.kids)

    def refetch(self, why: str) -> bool:
        """Fetch the URL again on a background thread, unless one is running or the last try was
        under ``min_refetch_s`` ago; True when a fetch is (now) under way."""
        with self._lock:
            if self._fetching is not None and self._fetching.is_alive():
                return True
            if time.monotonic() - self._tried_at < self.min_refetch_s:
                return False
            self._tried_at = time.monotonic()
            self._fetching = threading.Thread(
                target=self._reload, args=(why,), name="memtap-jwks", daemon=True
            )
            self._fetching.start()
            return True

    def key(self, kid: str | None, alg: str) -> PyJWK:
        """The key for a token's ``kid`` and ``alg``; UnknownKey saying why there is none."""
        if self.is_url and time.monotonic() - self._loaded_at > self.refresh_s:
            self.refetch("refresh_s passed")  # keep serving with the keys held meanwhile
        keys, prepared_keys = self._set
        jwk = _find(keys, kid)
        if jwk is None and not self.is_url:
            self._reload_file()
            keys, prepared_keys = self._set
            jwk = _find(keys, kid)
        if jwk is None:
            held = ", ".join(repr(k) for k in self.kids)
            if kid is None:
                raise UnknownKey(f"the token names no key (kid) and the JWKS holds several ({held})")
            message = f"no key with kid {kid!r} in the JWKS (it holds {held})"
            if self.is_url and self.refetch(f"unknown kid {kid!r}"):
                message += f"; fetching {self.where} again, retry shortly"
            elif self.last_error:
                message += f"; the last reload failed: {self.last_error}"
            raise UnknownKey(message)
        prepared = prepared_keys.get((kid, alg))
        if prepared is None:
            key_alg = jwk.get("alg")
            if key_alg is not None and key_alg != alg:
                raise UnknownKey(f"key {kid!r} is for {key_alg}, the token says {alg}")
            try:
                prepared = PyJWK(jwk, algorithm=alg)
            except PyJWTError as exc:
                raise UnknownKey(f"key {kid!r} ({jwk.get('kty')}) cannot verify {alg}: {exc}") from None
            prepared_keys[(kid, alg)] = prepared
        return prepared


def _find(keys: dict[str | None, dict[str, Any]], kid: str | None) -> dict[str, Any] | None:
    if kid is None:
        return next(iter(keys.values())) if len(keys) == 1 else None
    return keys.get(kid)
