"""The auth package on its own: grants, delegation, upstreams, the context resolver and the gate."""

from __future__ import annotations

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from memtap.auth import (
    ARGUMENT_FIELDS,
    CALLER_SCOPE_KEY,
    ApiKeyAuthenticator,
    Authentication,
    Caller,
    Grant,
    LocalAuthenticator,
    Policy,
    PrincipalPolicy,
    Right,
    best_context,
    default_requester,
    resolve_context,
)
from memtap.auth.resolve import HEADERS
from memtap.errors import ConfigError, Forbidden, InvalidArguments, PinnedContextViolation

R, W, D, A = Right.READ, Right.WRITE, Right.DELETE, Right.ADMIN
ALICE = Caller("alice", "api-key")
BOB = Caller("bob", "api-key")
APP = Caller("app", "api-key")


def policy() -> Policy:
    return Policy(
        [
            PrincipalPolicy(
                "alice", (Grant("{principal}", frozenset({R, W, D})), Grant("shared/*", frozenset({R})))
            ),
            PrincipalPolicy(
                "app", (Grant("users/*", frozenset({R, W})),), act_for=("users/*",), upstreams=("memory",)
            ),
            PrincipalPolicy("root", (Grant("*", frozenset({A})),)),
        ]
    )


def test_a_key_without_grants_may_use_only_its_own_namespace() -> None:
    rules = policy()
    rules.check(BOB, "bob", R)
    rules.check(BOB, "bob", D)
    with pytest.raises(Forbidden, match=r"'bob' may not read namespace 'alice': it has no grants configured"):
        rules.check(BOB, "alice", R)
    with pytest.raises(Forbidden, match="may not admin"):
        rules.check(BOB, "bob", A)
    assert not rules.may_act_for(BOB, "alice")
    assert rules.may_act_for(BOB, "bob")


def test_grants_give_exactly_their_rights_and_the_message_says_why() -> None:
    rules = policy()
    rules.check(ALICE, "shared/team", R)
    with pytest.raises(Forbidden) as refused:
        rules.check(ALICE, "shared/team", W)
    assert str(refused.value) == (
        "principal 'alice' may not write namespace 'shared/team': its grants there give only read"
    )
    with pytest.raises(Forbidden, match="none of its grants matches that namespace"):
        rules.check(ALICE, "bob", R)


def test_admin_implies_every_right_and_globs_cross_slashes() -> None:
    rules = policy()
    root = Caller("root", "api-key")
    for right in Right:
        rules.check(root, "users/u1/deep", right)
    rules.check(APP, "users/u1/deep", W)
    with pytest.raises(Forbidden):
        rules.check(APP, "users/u1", D)


def test_placeholder_is_the_principal_name_taken_literally() -> None:
    rules = Policy([PrincipalPolicy("a*", (Grant("{principal}/notes", frozenset({R})),))])
    caller = Caller("a*", "api-key")
    rules.check(caller, "a*/notes", R)
    with pytest.raises(Forbidden):
        rules.check(caller, "ab/notes", R)


def test_scopes_cap_the_grants() -> None:
    rules = policy()
    capped = Caller("alice", "jwt", scopes=frozenset({R}))
    rules.check(capped, "alice", R)
    with pytest.raises(Forbidden, match="scopes"):
        rules.check(capped, "alice", W)


def test_local_callers_are_not_restricted() -> None:
    rules = policy()
    local = Caller("local", "local")
    rules.check(local, "anyone", A)
    assert rules.may_act_for(local, "anyone")
    assert rules.may_call_upstream(local, "anything")


def test_delegation_and_upstreams() -> None:
    rules = policy()
    assert rules.may_act_for(APP, "users/u1")
    assert not rules.may_act_for(APP, "alice")
    assert rules.may_call_upstream(APP, "memory")
    assert not rules.may_call_upstream(APP, "files")
    assert rules.may_call_upstream(ALICE, "files")
    with pytest.raises(Forbidden, match="may not call upstream 'files'"):
        rules.check_upstream(APP, "files")


def test_bad_grants_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown placeholder \{user\}"):
        Grant("{user}", frozenset({R}))
    with pytest.raises(ConfigError, match="configured twice"):
        Policy([PrincipalPolicy("a"), PrincipalPolicy("a")])


def test_unmatched_patterns_are_named() -> None:
    rules = policy()
    warnings = rules.unmatched(["alice", "users/u1"])
    assert "grant 'shared/*' of principal 'alice' matches no namespace in the database" in warnings
    assert not any("users/*" in w for w in warnings)


def test_arguments_fill_but_never_change_what_the_connection_set() -> None:
    headers = {"namespace": "alice", "session": "s1"}
    ctx = resolve_context(ALICE, layers=(headers,), arguments={"namespace": "alice", "turn": 3})
    assert (ctx.namespace, ctx.session, ctx.turn) == ("alice", "s1", "3")
    with pytest.raises(
        PinnedContextViolation, match="argument namespace='bob' contradicts namespace='alice'"
    ):
        resolve_context(ALICE, layers=(headers,), arguments={"namespace": "bob"})
    with pytest.raises(PinnedContextViolation, match="session"):
        resolve_context(Caller("local"), layers=(headers,), arguments={"session": "s2"})


def test_without_context_arguments_a_key_cannot_choose_a_namespace_by_argument() -> None:
    with pytest.raises(PinnedContextViolation, match="context arguments are off"):
        resolve_context(ALICE, arguments={"namespace": "shared/x"})
    ctx = resolve_context(ALICE, arguments={"namespace": "shared/x"}, context_args=True)
    assert ctx.namespace == "shared/x"
    assert resolve_context(Caller("local"), arguments={"namespace": "x"}).namespace == "x"


def test_operator_pins_beat_headers_too() -> None:
    pinned = Caller("alice", "api-key", pinned={"namespace": "alice/work"})
    assert resolve_context(pinned).namespace == "alice/work"
    with pytest.raises(PinnedContextViolation, match="fixed for principal 'alice' by the operator"):
        resolve_context(pinned, layers=({"namespace": "alice"},))


def test_grants_and_requesters_are_checked_after_the_clock() -> None:
    rules = policy()
    marked = resolve_context(
        ALICE, clock=lambda c: c.model_copy(update={"turn": "t9"}), policy=rules, right=R
    )
    assert marked.turn == "t9"
    with pytest.raises(Forbidden) as refused:
        resolve_context(
            BOB,
            layers=({"namespace": "alice"},),
            clock=lambda c: c.model_copy(update={"turn": "t9"}),
            policy=rules,
            right=R,
        )
    assert refused.value.context.namespace == "alice"  # type: ignore[attr-defined]
    assert refused.value.context.turn == "t9"  # type: ignore[attr-defined]
    with pytest.raises(Forbidden, match="may not act for requester 'alice'"):
        resolve_context(BOB, layers=({"requester": "alice"},), policy=rules, right=R)


def test_requester_defaults_to_the_namespace_when_the_caller_acts_for_it() -> None:
    rules = policy()
    ctx = resolve_context(APP, layers=({"namespace": "users/u1"},), policy=rules, right=R)
    assert default_requester(rules, APP, ctx) == "users/u1"
    ctx = resolve_context(ALICE, layers=({"namespace": "shared/x"},), policy=rules, right=R)
    assert default_requester(rules, ALICE, ctx) == "alice"


def test_best_context_keeps_what_the_call_asked_for() -> None:
    ctx = best_context(
        ALICE, layers=({"session": "s1"},), arguments={"namespace": "bob", "role": "villain", "session": "s2"}
    )
    assert (ctx.namespace, ctx.session, ctx.role) == ("bob", "s2", None)


def test_invalid_context_names_the_field() -> None:
    with pytest.raises(InvalidArguments, match="role"):
        resolve_context(ALICE, arguments={"role": "villain"})


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    caller: Caller = scope[CALLER_SCOPE_KEY]
    body = f"{caller.principal}:{caller.via}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.anyio
async def test_the_gate_sets_one_caller_or_answers_401() -> None:
    keyed = Authentication([ApiKeyAuthenticator({"k-alice": "alice"})]).gate(_echo)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=keyed), base_url="http://t") as client:
        ok = await client.get("/", headers={"Authorization": "Bearer k-alice"})
        assert ok.text == "alice:api-key"
        refused = await client.get("/", headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"]["type"] == "authentication_error"
    local = Authentication([LocalAuthenticator("me")]).gate(_echo)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=local), base_url="http://t") as client:
        assert (await client.get("/")).text == "me:local"
        assert (await client.get("/", headers={"X-Memtap-Principal": "x"})).text == "x:local"


def test_the_auth_package_is_a_leaf() -> None:
    import ast
    from pathlib import Path

    import memtap.auth

    allowed = ("memtap.auth", "memtap.errors", "memtap.limits", "memtap.trace.models")
    for path in Path(memtap.auth.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memtap"):
                assert node.module.startswith(allowed), f"{path.name} imports {node.module}"


def test_every_context_field_a_tool_accepts_is_one_the_resolver_reads() -> None:
    from memtap.proxy.tools import ContextArgs

    # One list (memtap.auth.resolve.ARGUMENT_FIELDS) serves the resolver, the tool schemas and the
    # fallback context; the model must declare exactly those fields, and the resolver must know
    # each one's header.
    assert tuple(ContextArgs.model_fields) == ARGUMENT_FIELDS
    assert set(ARGUMENT_FIELDS) <= set(HEADERS.values())
