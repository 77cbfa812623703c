"""Bearer JWT verification: tokens signed by key pairs made in the test, checked by the real verifier."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jwt_issuer import AUDIENCE, ISSUER, Issuer, JwksServer, ec_key, rsa_key, unsigned_token
from pydantic import ValidationError

from memtap.auth.grants import Right
from memtap.auth.jwks import KeySource
from memtap.auth.jwt import InvalidToken, JwtAuthenticator, looks_like_jwt
from memtap.auth.jwt_config import JwtSettings
from memtap.errors import ConfigError


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def verifier(jwks: Path | str, *, known: Any = None, **settings: Any) -> JwtAuthenticator:
    authenticator = JwtAuthenticator(
        JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks), **settings), known_principal=known
    )
    authenticator.start()
    return authenticator


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def jwks_file(issuer: Issuer, tmp_path: Path) -> Path:
    return issuer.write_jwks(tmp_path / "jwks.json")


def test_rsa_and_ec_tokens_prove_their_subject_with_scopes_as_rights(issuer: Issuer, jwks_file: Path) -> None:
    auth = verifier(jwks_file)
    by_rsa = auth.authenticate(bearer(issuer.token("alice", scope="memory:read")))
    by_ec = auth.authenticate(
        bearer(issuer.token("bob", key=issuer.keys[1], scope="memory:read memory:write"))
    )
    assert by_rsa is not None and (by_rsa.principal, by_rsa.via, by_rsa.scopes) == (
        "alice",
        "jwt",
        frozenset({Right.READ}),
    )
    assert by_ec is not None and (by_ec.principal, by_ec.scopes) == (
        "bob",
        frozenset({Right.READ, Right.WRITE}),
    )


def test_api_keys_and_missing_credentials_are_left_to_other_authenticators(jwks_file: Path) -> None:
    auth = verifier(jwks_file)
    assert auth.authenticate({}) is None
    assert auth.authenticate(bearer("sekrit-alice")) is None
    assert auth.authenticate({"authorization": "Basic YWxpY2U6cHc="}) is None
    assert looks_like_jwt("a.b.") and not looks_like_jwt("a..c") and not looks_like_jwt("key=with.dot")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("expired", "token expired at "),
        (
            "wrong audience",
            "token audience 'https://elsewhere.test/mcp' is not this server (expected https://memtap.test/mcp)",
        ),
        (
            "wrong issuer",
            "token issuer 'https://evil.test' is not the configured issuer 'https://issuer.test'",
        ),
        ("bad signature", "token signature does not verify with key 'rsa-1'"),
        (
            "unknown kid",
            "token signature cannot be checked: no key with kid 'rotated-away' in the JWKS (it holds 'rsa-1', 'ec-1')",
        ),
        ("alg none", "token algorithm 'none' is not accepted (accepted: RS256, ES256)"),
        ("alg HS256", "token algorithm 'HS256' is not accepted (accepted: RS256, ES256)"),
        ("not yet valid", "token not valid before "),
        ("no exp", "token has no 'exp' claim"),
        ("no sub", "token has no 'sub' claim"),
        ("not a JWT", "bearer token is not a valid JWT"),
        ("no alg", "token header names no algorithm (alg)"),
        (
            "key for another alg",
            "token signature cannot be checked: key 'rsa-1' is for RS256, the token says ES256",
        ),
    ],
)
def test_bad_tokens_get_one_clear_invalid_token_error(
    issuer: Issuer, jwks_file: Path, case: str, expected: str
) -> None:
    import jwt

    now = int(time.time())
    tokens = {
        "expired": issuer.token(ttl=-3600),
        "wrong audience": issuer.token(aud="https://elsewhere.test/mcp"),
        "wrong issuer": issuer.token(iss="https://evil.test"),
        "bad signature": issuer.token(key=rsa_key("rsa-1")),  # a different key pair, same kid
        "unknown kid": issuer.token(kid="rotated-away"),
        "alg none": unsigned_token(iss=ISSUER, aud=AUDIENCE, sub="alice", exp=now + 60, scope="memory:read"),
        "alg HS256": jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 60}, "x" * 32, algorithm="HS256"
        ),
        "not yet valid": issuer.token(nbf=now + 3600),
        "no exp": issuer.token(exp=None),
        "no sub": issuer.token(sub=None),
        "not a JWT": "%%%.eyJ4IjoxfQ.c2ln",
        "no alg": "eyJub3QiOiJqc29uIn0.eyJ4IjoxfQ.c2ln",  # {"not":"json"}.{"x":1}
        "key for another alg": issuer.token(key=ec_key("ec-other"), kid="rsa-1"),
    }
    with pytest.raises(InvalidToken) as refused:
        verifier(jwks_file).authenticate(bearer(tokens[case]))
    assert (refused.value.status, refused.value.error) == (401, "invalid_token")
    assert str(refused.value).startswith(expected), str(refused.value)
    assert tokens[case] not in str(refused.value)


def test_a_token_without_memtaps_scopes_is_insufficient_scope_403(issuer: Issuer, jwks_file: Path) -> None:
    auth = verifier(jwks_file)
    for scope in ("openid profile", None):
        with pytest.raises(InvalidToken) as refused:
            auth.authenticate(bearer(issuer.token(scope=scope)))
        assert (refused.value.status, refused.value.error) == (403, "insufficient_scope")
        assert refused.value.scope == "memory:read memory:write memory:delete memory:admin"
        assert "token grants none of memtap's scopes" in str(refused.value)


def test_scope_claim_and_mapping_are_configurable(issuer: Issuer, jwks_file: Path) -> None:
    auth = verifier(jwks_file, scope_claim="scp", scopes={"mem.rw": ["read", "write"], "mem.all": "admin"})
    caller = auth.authenticate(bearer(issuer.token(scope=None, scp=["mem.rw", "other"])))
    assert caller is not None and caller.scopes == frozenset({Right.READ, Right.WRITE})


def test_unknown_principals_are_refused_when_principals_are_configured(
    issuer: Issuer, jwks_file: Path
) -> None:
    known = {"alice", "app"}.__contains__
    auth = verifier(jwks_file, known=known)
    assert auth.authenticate(bearer(issuer.token("alice"))) is not None
    with pytest.raises(InvalidToken, match=r"token subject 'mallory' is not a principal memtap knows"):
        auth.authenticate(bearer(issuer.token("mallory")))
    open_door = verifier(jwks_file, known=known, known_principals_only=False)
    assert open_door.authenticate(bearer(issuer.token("mallory"))) is not None


def test_a_rewritten_jwks_file_is_read_again_for_a_new_kid(issuer: Issuer, jwks_file: Path) -> None:
    auth = verifier(jwks_file)
    rotated = rsa_key("rsa-2")
    token = issuer.token(key=rotated)
    with pytest.raises(InvalidToken, match="no key with kid 'rsa-2'"):
        auth.authenticate(bearer(token))
    issuer.keys.append(rotated)
    issuer.write_jwks(jwks_file)
    caller = auth.authenticate(bearer(token))
    assert caller is not None and caller.principal == "alice"


@pytest.fixture
def jwks_server(issuer: Issuer) -> Iterator[JwksServer]:
    server = JwksServer(issuer)
    yield server
    server.close()


def test_a_jwks_url_is_fetched_and_refetched_in_the_background_for_a_rotated_key(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    auth = verifier(jwks_server.url, jwks_min_refetch_s=0)
    assert jwks_server.fetches == 1
    assert auth.authenticate(bearer(issuer.token(key=issuer.keys[1]))) is not None
    rotated = ec_key("ec-2")
    issuer.keys.append(rotated)
    token = issuer.token("bob", key=rotated)
    with pytest.raises(
        InvalidToken,
        match=r"no key with kid 'ec-2' .*; fetching http://127\.0\.0\.1:\d+/\.well-known/jwks\.json again",
    ):
        auth.authenticate(bearer(token))
    fetching = auth.keys._fetching
    assert fetching is not None
    fetching.join(timeout=30)
    caller = auth.authenticate(bearer(token))
    assert caller is not None and caller.principal == "bob" and jwks_server.fetches == 2


def test_made_up_kids_do_not_make_memtap_refetch_more_than_once_per_interval(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    auth = verifier(jwks_server.url, jwks_min_refetch_s=3600)
    for n in range(5):
        with pytest.raises(InvalidToken, match=f"no key with kid 'made-up-{n}'"):
            auth.authenticate(bearer(issuer.token(kid=f"made-up-{n}")))
    assert jwks_server.fetches == 1


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}]},
            "keys[0] holds private or symmetric key material (k)",
        ),
        ("private", "keys[0] holds private or symmetric key material (d, dp, dq, p, q, qi)"),
        ({"nokeys": []}, 'has no "keys" list'),
        ("not json", "is not JSON"),
    ],
)
def test_unusable_jwks_files_are_refused_at_start_up(tmp_path: Path, document: Any, expected: str) -> None:
    import jwt

    path = tmp_path / "jwks.json"
    if document == "private":
        document = {"keys": [json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key().private))]}
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(
        ConfigError, match=f"JWKS at {path}: .*" if "keys[0]" in expected else f"JWKS at {path}"
    ):
        KeySource(str(path)).load()
    with pytest.raises(ConfigError) as refused:
        KeySource(str(path)).load()
    assert expected in str(refused.value)


def test_unreachable_jwks_sources_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read JWKS file .*missing\.json: No such file"):
        KeySource(str(tmp_path / "missing.json")).load()
    with pytest.raises(ConfigError, match=r"cannot fetch JWKS from http://127\.0\.0\.1:9/jwks"):
        KeySource("http://127.0.0.1:9/jwks", timeout_s=5).load()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"algorithms": ["HS256"]}, "algorithms ['HS256'] not accepted: use asymmetric ones"),
        ({"algorithms": ["none"]}, "algorithms ['none'] not accepted"),
        ({"audience": []}, "needs an audience (or a resource, which is then the audience)"),
        ({"jwks": "ftp://issuer.test/jwks"}, "jwks must be a file path or an http(s) URL, not ftp://"),
        ({"scopes": {"memory:read": ["peek"]}}, "scopes.memory:read.0"),
    ],
)
def test_bad_jwt_settings_name_the_field(settings: dict[str, Any], expected: str) -> None:
    fields = {"issuer": ISSUER, "audience": AUDIENCE, "jwks": "jwks.json", **settings}
    with pytest.raises(ValidationError) as refused:
        JwtSettings.model_validate(fields)
    text = str(refused.value)
    assert expected in text or expected.replace(".0", "") in text.replace("\n  ", " "), text


def test_the_resource_is_the_default_audience_and_the_issuer_the_default_authorization_server() -> None:
    settings = JwtSettings(issuer=ISSUER, jwks="jwks.json", resource="https://memtap.example/mcp")
    assert settings.audiences == ["https://memtap.example/mcp"]
    assert settings.issuers == [ISSUER]


@pytest.mark.anyio
async def test_the_sdk_token_verifier_interface_gives_an_access_token_or_none(
    issuer: Issuer, jwks_file: Path
) -> None:
    auth = verifier(jwks_file, resource=AUDIENCE)
    token = issuer.token("alice", scope="memory:read openid")
    access = await auth.verify_token(token)
    assert access is not None
    assert (access.subject, access.client_id, access.scopes, access.resource) == (
        "alice",
        "alice",
        ["memory:read", "openid"],
        AUDIENCE,
    )
    assert await auth.verify_token(issuer.token(ttl=-3600)) is None


def test_a_key_removed_from_the_jwks_stops_verifying_remembered_tokens_once_the_set_reloads(
    issuer: Issuer, jwks_file: Path
) -> None:
    auth = verifier(jwks_file)
    old = issuer.token("alice")
    assert auth.authenticate(bearer(old)) is not None
    assert auth.authenticate(bearer(old)) is not None  # remembered: no second signature check
    replacement = rsa_key("rsa-2")
    issuer.keys = [replacement]
    issuer.write_jwks(jwks_file)
    assert auth.authenticate(bearer(issuer.token("bob", key=replacement))) is not None  # new kid: reload
    with pytest.raises(InvalidToken, match=r"no key with kid 'rsa-1' in the JWKS \(it holds 'rsa-2'\)"):
        auth.authenticate(bearer(old))


def test_flags_override_the_configs_jwt_fields_and_what_was_derived_from_them(tmp_path: Path) -> None:
    from memtap.cli.jwt import jwt_authenticators
    from memtap.config import ConfigFile

    jwks = Issuer().write_jwks(tmp_path / "jwks.json")
    config = ConfigFile.model_validate(
        {"memtap": {"jwt": {"issuer": ISSUER, "resource": "https://old.test/mcp", "jwks": str(jwks)}}}
    )
    [auth] = jwt_authenticators(
        config,
        jwt_issuer="https://new-issuer.test",
        jwt_audience=None,
        jwks=None,
        jwt_resource="https://new.test/mcp",
    )
    assert (auth.settings.issuer, auth.settings.audiences, auth.settings.issuers) == (
        "https://new-issuer.test",
        ["https://new.test/mcp"],
        ["https://new-issuer.test"],
    )
    assert (
        jwt_authenticators(ConfigFile(), jwt_issuer=None, jwt_audience=None, jwks=None, jwt_resource=None)
        == []
    )


def test_a_bad_jwt_section_in_the_config_file_is_one_error_naming_the_field(tmp_path: Path) -> None:
    from memtap.config import load_config

    path = tmp_path / "memtap.yaml"
    path.write_text("memtap:\n  jwt:\n    issuer: https://issuer.test\n    audience: aud\n    jwks: j.json\n"
                    "    algorithms: [HS256]\n")  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value).startswith(
        f"config {path}: memtap.jwt.algorithms: algorithms ['HS256'] not accepted: use asymmetric ones"
    )
