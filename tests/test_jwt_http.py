"""memtap serve as an OAuth protected resource: real servers, the official MCP client with bearer
JWTs signed by key pairs made in the test, and raw HTTP for the refusals."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from conftest import ServerProcess, http_client, meta
from jwt_issuer import AUDIENCE, ISSUER, Issuer, ec_key, rsa_key, unsigned_token
from secrets_check import found_in
from test_jwt_verify import _JwksServer

from memtap.cli.main import cli
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def jwks_file(issuer: Issuer, tmp_path: Path) -> Path:
    return issuer.write_jwks(tmp_path / "jwks.json")


@pytest.fixture
def jwks_server(issuer: Issuer) -> Iterator[_JwksServer]:
    server = _JwksServer(issuer)
    yield server
    server.close()


def jwt_flags(jwks: Path | str) -> list[str]:
    return ["--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwks", str(jwks)]


def events_of(db: Path) -> list[Any]:
    store = TraceStore(db)
    try:
        return list(store.list_events())
    finally:
        store.close()


def secret_bytes(issuer: Issuer, tokens: list[str]) -> dict[str, bytes]:
    """Every secret a run must not leave behind: the tokens, and each private key (PEM, and its
    private JWK members as base64url)."""
    import jwt

    found = {f"token {n}": token.encode() for n, token in enumerate(tokens)}
    for key in issuer.keys:
        found[f"{key.kid} PEM"] = key.private_pem().split(b"\n")[1]
        algorithm = jwt.algorithms.RSAAlgorithm if key.alg == "RS256" else jwt.algorithms.ECAlgorithm
        private_jwk = json.loads(algorithm.to_jwk(key.private))
        found[f"{key.kid} d"] = private_jwk["d"].encode()
        found[f"{key.kid} d raw"] = base64.urlsafe_b64decode(private_jwk["d"] + "==")[:16]
    return found


def leftovers(server: ServerProcess, issuer: Issuer, tokens: list[str], log: str) -> list[str]:
    return found_in(server.db, secret_bytes(issuer, tokens), writer_open=False, also=log.encode())


async def test_an_mcp_client_with_a_bearer_jwt_is_served_as_the_tokens_subject(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path
) -> None:
    server = start_http_server(*jwt_flags(jwks_file), "-v", "--console-spans")
    alice = issuer.token("alice")
    bob = issuer.token("bob", key=issuer.keys[1])  # ES256
    async with http_client(server.url, {"Authorization": f"Bearer {alice}"}) as client:
        added = await client.call_tool("memory_add", {"content": "alice prefers green tea"})
        found = await client.call_tool("memory_search", {"query": "green tea"})
    async with http_client(server.url, {"Authorization": f"Bearer {bob}"}) as client:
        bobs = await client.call_tool("memory_add", {"content": "bob takes the night train"})
        bob_search = await client.call_tool("memory_search", {"query": "green tea"})
    assert not added.is_error and not bobs.is_error
    assert found.structured_content is not None and len(found.structured_content["results"]) == 1
    assert bob_search.structured_content is not None and bob_search.structured_content["results"] == []
    assert server.stop() == 0
    log = server.stderr()
    events = events_of(server.db)
    assert [(e.tool, e.context.principal, e.context.namespace) for e in events] == [
        ("memory_add", "alice", "alice"),
        ("memory_search", "alice", "alice"),
        ("memory_add", "bob", "bob"),
        ("memory_search", "bob", "bob"),
    ]
    assert leftovers(server, issuer, [alice, bob], log) == []


async def test_bad_tokens_get_a_bearer_challenge_are_recorded_and_change_nothing(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "memtap.yaml"
    config.write_text(json.dumps({"memtap": {"principals": {"alice": {}, "bob": {}}}}))
    server = start_http_server(*jwt_flags(jwks_file), "--config", str(config), "-v", "--console-spans")
    import time

    now = int(time.time())
    bad = {
        "expired": (issuer.token(ttl=-3600), 401, "token expired at "),
        "wrong audience": (issuer.token(aud="https://elsewhere.test/mcp"), 401, "token audience 'https://elsewhere.test/mcp' is not this server"),
        "wrong issuer": (issuer.token(iss="https://evil.test"), 401, "token issuer 'https://evil.test' is not the configured issuer"),
        "bad signature": (issuer.token(key=rsa_key("rsa-1")), 401, "token signature does not verify with key 'rsa-1'"),
        "unknown kid": (issuer.token(key=ec_key("ec-9")), 401, "token signature cannot be checked: no key with kid 'ec-9'"),
        "alg none": (unsigned_token(iss=ISSUER, aud=AUDIENCE, sub="alice", exp=now + 300, scope="memory:read"), 401, "token algorithm 'none' is not accepted"),
        "unknown principal": (issuer.token("mallory"), 401, "token subject 'mallory' is not a principal memtap knows"),
        "no memtap scope": (issuer.token(scope="openid email"), 403, "token grants none of memtap's scopes"),
    }  # fmt: skip
    metadata_url = f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"
    async with httpx2.AsyncClient() as http:
        bare = await http.post(server.url, json=INITIALIZE, headers=MCP_HEADERS)
        assert bare.status_code == 401
        assert bare.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
        for case, (token, status, message) in bad.items():
            answer = await http.post(
                server.url, json=INITIALIZE, headers={**MCP_HEADERS, "authorization": f"Bearer {token}"}
            )
            assert answer.status_code == status, (case, answer.text)
            body = answer.json()
            assert body["error"]["message"].startswith(message), (case, body)
            assert body["error_description"] == body["error"]["message"]
            challenge = answer.headers["www-authenticate"]
            code = "insufficient_scope" if status == 403 else "invalid_token"
            assert challenge.startswith(f'Bearer error="{code}", error_description="{message}'), (
                case,
                challenge,
            )
            assert challenge.endswith(f'resource_metadata="{metadata_url}"')
            assert token not in answer.text and token not in challenge
        scope_challenge = answer.headers["www-authenticate"]
        assert 'scope="memory:read memory:write memory:delete memory:admin"' in scope_challenge
        assert (await http.get(f"http://127.0.0.1:{server.port}/healthz")).json()["status"] == "ok"
    async with http_client(server.url, {"Authorization": f"Bearer {issuer.token('alice')}"}) as client:
        listed = await client.call_tool("memory_list", {})
    assert listed.structured_content is not None and listed.structured_content["items"] == []
    assert server.stop() == 0
    log = server.stderr()
    assert log.count('"authenticate"') >= len(bad) and "token expired at" in log  # spans, printed
    events = events_of(server.db)
    refused = [e for e in events if e.tool == "authenticate"]
    assert [(e.status, e.op.value, e.context.principal, e.front_door) for e in refused] == [
        ("error", "control", "unauthenticated", "mcp-http")
    ] * len(bad)
    assert [
        e.error.split(": ", 1)[1][: len(m)] for e, (_, _, m) in zip(refused, bad.values(), strict=True)
    ] == [m for _, _, m in bad.values()]
    assert [e.error.split(":", 1)[0] for e in refused] == [f"HTTP {s}" for _, s, _ in bad.values()]
    assert refused[0].arguments == {
        "path": "/mcp", "method": "POST", "scheme": "Bearer", "via": "jwt",
        "claimed": {"sub": "alice", "iss": ISSUER, "kid": "rsa-1"},
    }  # fmt: skip
    assert [e.tool for e in events if e.tool != "authenticate"] == ["memory_list"]
    assert leftovers(server, issuer, [token for token, _, _ in bad.values()], log) == []


async def test_the_protected_resource_metadata_names_the_issuer_and_scopes(
    start_http_server: StartServer, jwks_file: Path
) -> None:
    server = start_http_server(*jwt_flags(jwks_file))
    base = f"http://127.0.0.1:{server.port}"
    async with httpx2.AsyncClient() as http:
        suffixed = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        root = await http.get(f"{base}/.well-known/oauth-protected-resource")
        elsewhere = await http.get(f"{base}/.well-known/oauth-protected-resource/admin")
        openai = await http.get(f"{base}/v1/models")
    expected = {
        "resource": f"{base}/mcp",
        "authorization_servers": [ISSUER],  # as configured: no trailing slash added
        "scopes_supported": ["memory:read", "memory:write", "memory:delete", "memory:admin"],
        "bearer_methods_supported": ["header"],
        "resource_name": "memtap",
    }
    assert suffixed.status_code == 200 and suffixed.json() == expected
    assert root.json() == expected
    assert elsewhere.status_code == 404
    assert openai.status_code == 401
    assert openai.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
    )


async def test_a_configured_resource_is_the_documents_resource_and_the_default_audience(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path
) -> None:
    resource = "https://memtap.example.com/mcp"
    server = start_http_server("--jwt-issuer", ISSUER, "--jwks", str(jwks_file), "--jwt-resource", resource)
    async with httpx2.AsyncClient() as http:
        document = (
            await http.get(f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp")
        ).json()
        for_resource = await http.post(
            server.url,
            json=INITIALIZE,
            headers={**MCP_HEADERS, "authorization": f"Bearer {issuer.token(aud=resource)}"},
        )
        for_other = await http.post(
            server.url, json=INITIALIZE, headers={**MCP_HEADERS, "authorization": f"Bearer {issuer.token()}"}
        )
    assert document["resource"] == resource
    assert for_resource.status_code == 200
    assert for_other.status_code == 401
    assert (
        'resource_metadata="https://memtap.example.com/.well-known/oauth-protected-resource/mcp"'
        in (for_other.headers["www-authenticate"])
    )


async def test_a_jwks_served_over_loopback_http_verifies_tokens(
    start_http_server: StartServer, issuer: Issuer, jwks_server: _JwksServer
) -> None:
    server = start_http_server(*jwt_flags(jwks_server.url))
    async with http_client(
        server.url, {"Authorization": f"Bearer {issuer.token('alice', key=issuer.keys[1])}"}
    ) as c:
        added = await c.call_tool("memory_add", {"content": "fetched keys work"})
    assert not added.is_error and jwks_server.fetches == 1


def test_serve_with_an_unusable_jwks_stops_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = CliRunner().invoke(cli, ["serve", *jwt_flags(missing), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert result.output.strip().endswith(f"cannot read JWKS file {missing}: No such file or directory")
    partial = CliRunner().invoke(cli, ["serve", "--jwt-issuer", ISSUER, "--db", str(tmp_path / "t.db")])
    assert partial.exit_code == 2 and "bearer JWTs need --jwks" in partial.output


async def test_three_principals_with_jwts_get_their_grants_and_every_crossing_is_refused_and_recorded(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path, tmp_path: Path
) -> None:
    """alice and bob hold personal tokens; ``app`` serves end users under ``users/*`` and acts for
    them. Grants come from memtap.principals, the tokens' scopes cap them."""
    config = tmp_path / "memtap.yaml"
    config.write_text(
        json.dumps(
            {
                "memtap": {
                    "principals": {
                        "alice": {},
                        "bob": {},
                        "app": {"grants": {"users/*": ["read", "write", "delete"]}, "act_for": ["users/*"]},
                    }
                }
            }
        )
    )
    server = start_http_server(*jwt_flags(jwks_file), "--config", str(config))
    tokens = {
        "alice": issuer.token("alice"),
        "alice-read": issuer.token("alice", scope="memory:read"),
        "bob": issuer.token("bob", key=issuer.keys[1]),
        "app": issuer.token("app"),
    }

    def bearer(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[name]}"}

    async with http_client(server.url, bearer("alice")) as alice:
        note = await alice.call_tool("memory_add", {"content": "alice's passport number is X123"})
        own = await alice.call_tool("memory_search", {"query": "passport"})
    note_id = note.structured_content["id"]  # type: ignore[index]
    async with http_client(server.url, bearer("alice-read")) as reader:
        read_only_search = await reader.call_tool("memory_search", {"query": "passport"})
        read_only_add = await reader.call_tool("memory_add", {"content": "a read-only token writes"})
    async with http_client(server.url, bearer("bob")) as bob:
        bob_search = await bob.call_tool("memory_search", {"query": "passport"}, meta=meta(namespace="alice"))
        bob_get = await bob.call_tool("memory_get", {"id": note_id}, meta=meta(namespace="alice"))
        bob_add = await bob.call_tool("memory_add", {"content": "planted"}, meta=meta(namespace="alice"))
        bob_update = await bob.call_tool(
            "memory_update", {"id": note_id, "content": "changed"}, meta=meta(namespace="alice")
        )
        bob_delete = await bob.call_tool("memory_delete", {"id": note_id}, meta=meta(namespace="alice"))
        bob_own = await bob.call_tool("memory_add", {"content": "bob's own note"})
    async with http_client(server.url, bearer("app")) as app:
        carol = await app.call_tool(
            "memory_add",
            {"content": "carol likes jazz"},
            meta=meta(namespace="users/carol", requester="users/carol"),
        )
        carol_search = await app.call_tool(
            "memory_search", {"query": "jazz"}, meta=meta(namespace="users/carol", requester="users/carol")
        )
        app_alice = await app.call_tool("memory_search", {"query": "passport"}, meta=meta(namespace="alice"))
    allowed = [note, own, read_only_search, bob_own, carol, carol_search]
    assert [result.is_error for result in allowed] == [False] * len(allowed)
    assert own.structured_content is not None and len(own.structured_content["results"]) == 1
    assert (
        read_only_search.structured_content is not None
        and len(read_only_search.structured_content["results"]) == 1
    )
    assert (
        carol_search.structured_content is not None and len(carol_search.structured_content["results"]) == 1
    )
    refused = [read_only_add, bob_search, bob_get, bob_add, bob_update, bob_delete, app_alice]
    assert [result.is_error for result in refused] == [True] * len(refused)
    assert server.stop() == 0
    events = events_of(server.db)
    refusals = [
        (e.context.principal, e.tool, e.context.namespace, e.error) for e in events if e.status == "error"
    ]
    assert refusals == [
        ("alice", "memory_add", "alice", "principal 'alice' may not write namespace 'alice': its token's scopes (read) do not include it"),
        ("bob", "memory_search", "alice", "principal 'bob' may not read namespace 'alice': none of its grants matches that namespace"),
        ("bob", "memory_get", "alice", "principal 'bob' may not read namespace 'alice': none of its grants matches that namespace"),
        ("bob", "memory_add", "alice", "principal 'bob' may not write namespace 'alice': none of its grants matches that namespace"),
        ("bob", "memory_update", "alice", "principal 'bob' may not write namespace 'alice': none of its grants matches that namespace"),
        ("bob", "memory_delete", "alice", "principal 'bob' may not delete namespace 'alice': none of its grants matches that namespace"),
        ("app", "memory_search", "alice", "principal 'app' may not read namespace 'alice': none of its grants matches that namespace"),
    ]  # fmt: skip
    store = TraceStore(server.db)
    try:
        item = store.get_item(note_id)
    finally:
        store.close()
    assert item is not None and (item.content, item.version, item.valid_to) == (
        "alice's passport number is X123", 1, None,
    )  # fmt: skip
    assert leftovers(server, issuer, list(tokens.values()), "") == []


async def test_the_three_key_end_to_end_test_holds_with_jwts_instead_of_keys(
    start_http_server: StartServer,
    upstream: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    issuer: Issuer,
    jwks_file: Path,
    db_path: Path,
) -> None:
    """tests/test_auth_e2e.py, every step and every asserted refusal, with alice, bob and app
    presenting bearer JWTs (RSA for alice and app, EC for bob) and the config naming no keys."""
    import copy

    import test_auth_e2e as keyed

    config = copy.deepcopy(keyed.CONFIG)
    for entry in config["memtap"]["principals"].values():
        del entry["keys"]
    config["memtap"]["jwt"] = {"issuer": ISSUER, "audience": AUDIENCE, "jwks": str(jwks_file)}
    tokens = {
        "ALICE": issuer.token("alice"),
        "BOB": issuer.token("bob", key=issuer.keys[1]),
        "APP": issuer.token("app"),
    }
    monkeypatch.setattr(keyed, "CONFIG", config)
    for name, token in tokens.items():
        monkeypatch.setattr(keyed, name, token)
    await keyed.test_grants_hold_over_mcp_the_chat_proxy_and_the_replay_clock(
        start_http_server, upstream, tmp_path
    )
    db = db_path
    assert found_in(db, secret_bytes(issuer, list(tokens.values())), writer_open=False) == []
    events = events_of(db)
    assert {e.context.principal for e in events if e.tool.startswith("memory_")} == {"alice", "bob", "app"}
    # The chat upstream got memtap's own credentials, never a caller's token (no passthrough).
    forwarded = json.dumps([upstream.state.received, upstream.state.headers])
    assert upstream.state.headers and not [name for name, token in tokens.items() if token in forwarded]


async def test_memtap_proxy_accepts_jwts_and_names_each_upstreams_metadata(
    tmp_path: Path,
    memory_server: dict[str, Any],
    start_http_server: StartServer,
    issuer: Issuer,
    jwks_file: Path,
) -> None:
    config = tmp_path / "memtap.json"
    config.write_text(json.dumps({"mcpServers": {"memory": memory_server}}))
    server = start_http_server("--config", str(config), *jwt_flags(jwks_file), command="proxy")
    base = f"http://127.0.0.1:{server.port}"
    async with httpx2.AsyncClient() as http:
        document = (await http.get(f"{base}/.well-known/oauth-protected-resource/servers/memory/mcp")).json()
        bare = await http.post(f"{base}/servers/memory/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert document["resource"] == f"{base}/servers/memory/mcp"
    assert bare.status_code == 401
    assert bare.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/servers/memory/mcp"'
    )
    token = issuer.token("alice")
    async with http_client(f"{base}/servers/memory/mcp", {"Authorization": f"Bearer {token}"}) as c:
        names = {tool.name for tool in (await c.list_tools()).tools}
        created = await c.call_tool(
            "create_entities",
            {"entities": [{"name": "gym", "entityType": "place", "observations": ["Tuesdays"]}]},
        )
    assert "create_entities" in names and not created.is_error
    assert server.stop() == 0
    events = [e for e in events_of(server.db) if e.tool == "create_entities"]
    assert [(e.context.principal, e.context.namespace, e.status) for e in events] == [
        ("alice", "alice", "ok")
    ]
    written = b"".join(
        path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()
    )  # status files too
    secrets = secret_bytes(issuer, [token])
    assert [name for name, secret in secrets.items() if secret in written] == []


async def test_a_jwt_caller_is_pinned_to_its_principals_namespace_like_its_key_would_be(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "memtap.json"
    kiosk = {"namespace": "lobby", "grants": {"lobby": ["read", "write"]}}
    config.write_text(json.dumps({"memtap": {"principals": {"kiosk": kiosk}}}))
    server = start_http_server("--config", str(config), *jwt_flags(jwks_file))
    auth = {"Authorization": f"Bearer {issuer.token('kiosk')}"}
    async with http_client(server.url, auth) as client:
        added = await client.call_tool("memory_add", {"content": "welcome"})
    async with http_client(server.url, {**auth, "X-Memtap-Namespace": "office"}) as escaping:
        refused = await escaping.call_tool("memory_search", {"query": "welcome"})
    assert not added.is_error and refused.is_error
    assert refused.content[0].text == (  # type: ignore[union-attr]
        "namespace='office' in the request contradicts namespace='lobby' fixed for principal 'kiosk' by the operator"
    )
    assert server.stop() == 0
    events = events_of(server.db)
    assert [(e.tool, e.status, e.context.principal, e.context.namespace) for e in events] == [
        ("memory_add", "ok", "kiosk", "lobby"),
        ("memory_search", "error", "kiosk", "office"),
    ]


async def test_a_bad_token_at_the_replay_clock_gets_the_challenge_and_is_recorded(
    start_http_server: StartServer, issuer: Issuer, jwks_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "memtap.yaml"
    config.write_text(json.dumps({"memtap": {"principals": {"alice": {}}}}))
    server = start_http_server(*jwt_flags(jwks_file), "--config", str(config))
    mark = f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark"
    expired = issuer.token(ttl=-3600)
    async with httpx2.AsyncClient() as http:
        refused = await http.post(
            mark, json={"namespace": "alice", "turn": "t1"}, headers={"authorization": f"Bearer {expired}"}
        )
        accepted = await http.post(
            mark,
            json={"namespace": "alice", "turn": "t1"},
            headers={"authorization": f"Bearer {issuer.token()}"},
        )
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="token expired at ')
    assert expired not in refused.text and expired not in challenge
    assert accepted.status_code == 200, accepted.text
    assert server.stop() == 0
    recorded = [(e.tool, e.status, e.arguments.get("path")) for e in events_of(server.db)]
    assert recorded == [("authenticate", "error", "/v1/memtap/replay/mark")]
