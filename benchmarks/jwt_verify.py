"""What a bearer JWT costs the gate per request, against an API key, measured in one run.

* ``api-key``: ``ApiKeyAuthenticator`` with 1,000 keys (every key compared, constant time);
* ``jwt RS256 / ES256 first``: a token verified from scratch (header, signature, claims);
* ``jwt RS256 / ES256 remembered``: the same token again, as every MCP request after the first
  sends it (the verifier remembers verified tokens, memtap/auth/jwt.py).

Blocks are interleaved so drift hits all alike; the medians print with the ratio to the
API-key baseline. ``.venv/bin/python benchmarks/jwt_verify.py``
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

BLOCKS = 15
PER_BLOCK = 200


def per_call_us(fn: Callable[[], object], n: int = PER_BLOCK) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    from jwt_issuer import Issuer

    from memtap.auth import ApiKeyAuthenticator
    from memtap.auth.jwt import JwtAuthenticator
    from memtap.auth.jwt_config import JwtSettings

    issuer = Issuer()
    with tempfile.TemporaryDirectory() as tmp:
        jwks = issuer.write_jwks(Path(tmp) / "jwks.json")
        verifier = JwtAuthenticator(
            JwtSettings(issuer=issuer.issuer, audience=issuer.audience, jwks=str(jwks))
        )
        verifier.start()
        keys = ApiKeyAuthenticator({f"key-{i:04d}-{'x' * 24}": f"p{i}" for i in range(1_000)})
        key_headers = {"authorization": f"Bearer key-0500-{'x' * 24}"}
        rsa = {"authorization": f"Bearer {issuer.token('alice', key=issuer.keys[0])}"}
        ec = {"authorization": f"Bearer {issuer.token('alice', key=issuer.keys[1])}"}

        def first(headers: dict[str, str]) -> Callable[[], object]:
            def run() -> object:
                verifier._verified.clear()
                return verifier.authenticate(headers)

            return run

        cases: dict[str, Callable[[], object]] = {
            "api-key (1,000 keys)": lambda: keys.authenticate(key_headers),
            "jwt RS256 first": first(rsa),
            "jwt ES256 first": first(ec),
            "jwt RS256 remembered": lambda: verifier.authenticate(rsa),
            "jwt ES256 remembered": lambda: verifier.authenticate(ec),
        }
        for fn in cases.values():
            assert fn() is not None
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(BLOCKS):
            for name, fn in cases.items():
                samples[name].append(per_call_us(fn, PER_BLOCK if "first" not in name else PER_BLOCK // 10))
    baseline = statistics.median(samples["api-key (1,000 keys)"])
    print(f"{'authenticator':<24} {'median us':>10} {'x api-key':>10}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<24} {median:>10.1f} {median / baseline:>10.2f}")


if __name__ == "__main__":
    main()
