"""What authorisation adds to a call: the grant check and the pinned-context merge, with 1,000
principals configured (about 3,000 namespace patterns), against the same work without grants.

Shared by ``mcp_overhead.py`` (the MCP memory tools) and ``openai_overhead.py`` (the chat
proxy's auto mode); runnable on its own: ``.venv/bin/python benchmarks/auth_cost.py``.

Measured in one run, interleaved in blocks so drift hits both alike:

* ``resolve``: the context resolver alone, a keyless ``local`` caller with no policy (what
  every call paid before) against an API-key caller checked against the 1,000-principal
  policy (pinned-context merge, requester check, grant check, default requester), on a
  namespace it has used before (the policy caches per principal and namespace) and on a
  new namespace each call (every pattern of the principal matched);
* ``service``: ``MemoryService.call_tool("memory_get")`` over a real runtime (builtin
  backend, recorder) with each caller;
* ``chat``: what the chat front door does per auto-mode request: resolve the context from
  the request's ``user`` and the headers, check that the caller acts for the user, and
  check read on the namespace.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PRINCIPALS = 1_000


def big_policy(n: int = PRINCIPALS) -> Any:
    """n principals with three patterns each, plus ``app`` acting for ``users/*``."""
    from memtap.auth import Grant, Policy, PrincipalPolicy, Right

    rwd = frozenset({Right.READ, Right.WRITE, Right.DELETE})
    principals = [
        PrincipalPolicy(
            f"p{i}",
            (
                Grant("{principal}", rwd),
                Grant(f"team-{i % 50}/*", frozenset({Right.READ})),
                Grant(f"proj-{i}/docs/*", frozenset({Right.READ, Right.WRITE})),
            ),
            act_for=(f"users-{i}/*",),
        )
        for i in range(n)
    ]
    rw = frozenset({Right.READ, Right.WRITE})
    principals.append(
        PrincipalPolicy("app", (Grant("users/*", rw), Grant("user-*", rw)), act_for=("users/*", "user-*"))
    )
    return Policy(principals)


def _p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _timed(fn: Callable[[int], object], n: int) -> list[float]:
    clock = time.perf_counter
    out = []
    for i in range(n):
        t0 = clock()
        fn(i)
        out.append(clock() - t0)
    return out


def resolve_rows(n: int = 20_000, blocks: int = 10) -> list[tuple[str, float, float]]:
    """(case, p50 µs without grants, p50 µs with 1,000 principals) for the resolver alone."""
    from memtap.auth import Caller, Policy, Right, default_requester, local_caller, resolve_context

    policy, empty = big_policy(), Policy()
    local, keyed = local_caller("local"), Caller("p517", "api-key")
    headers = {"namespace": "p517", "session": "s1", "run": "bench"}
    meta = {"turn": "t3", "role": "user"}
    args = {"namespace": None, "session": "s1", "turn": None, "role": None, "requester": None, "run": None,
            "episode": None}  # fmt: skip

    def base(_: int) -> object:
        context = resolve_context(local, layers=(headers, meta), arguments=args, client="bench", policy=empty)
        return default_requester(empty, local, context)

    def checked(_: int) -> object:
        context = resolve_context(
            keyed, layers=(headers, meta), arguments=args, client="bench", policy=policy, right=Right.READ
        )
        return default_requester(policy, keyed, context)

    def cold(i: int) -> object:  # a namespace never seen: every pattern of p517 is tried
        layer = {**headers, "namespace": f"proj-517/docs/{i}"}
        context = resolve_context(
            keyed, layers=(layer, meta), arguments=args, client="bench", policy=policy, right=Right.WRITE
        )
        return default_requester(policy, keyed, context)

    def cold_base(i: int) -> object:
        layer = {**headers, "namespace": f"proj-517/docs/{i}"}
        return resolve_context(local, layers=(layer, meta), arguments=args, client="bench", policy=empty)

    samples: dict[str, list[float]] = {name: [] for name in ("base", "checked", "cold_base", "cold")}
    fns = {"base": base, "checked": checked, "cold_base": cold_base, "cold": cold}
    for fn in fns.values():  # warm-up
        _timed(fn, 500)
    for _ in range(blocks):
        for name, fn in fns.items():
            samples[name] += _timed(fn, n // blocks)
    return [
        ("resolve, namespace seen before", _p50_us(samples["base"]), _p50_us(samples["checked"])),
        ("resolve, new namespace each call", _p50_us(samples["cold_base"]), _p50_us(samples["cold"])),
    ]


def gate_rows(n: int = 20_000, blocks: int = 10) -> list[tuple[str, float, float]]:
    """The HTTP gate making the request's caller: keyless (``local``) against one of 1,001 keys."""
    from memtap.auth import ApiKeyAuthenticator, Authentication, LocalAuthenticator

    keys = {f"k-bench-{i}": f"p{i}" for i in range(PRINCIPALS)}
    keys["k-bench-app"] = "app"
    keyed, keyless = Authentication([ApiKeyAuthenticator(keys)]), Authentication([LocalAuthenticator()])
    with_key = {"authorization": "Bearer k-bench-app", "x-memtap-session": "s1"}
    without = {"x-memtap-session": "s1"}
    fns = {"base": lambda _: keyless.authenticate(without), "checked": lambda _: keyed.authenticate(with_key)}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        _timed(fn, 500)
    for _ in range(blocks):
        for name, fn in fns.items():
            samples[name] += _timed(fn, n // blocks)
    return [("gate: one key of 1,001", _p50_us(samples["base"]), _p50_us(samples["checked"]))]


def chat_rows(n: int = 20_000, blocks: int = 10) -> list[tuple[str, float, float]]:
    """The chat front door's per-request authorisation in auto mode, with and without grants."""
    from memtap.auth import Caller, Policy, Right, fields_from_headers, local_caller, resolve_context

    policy, empty = big_policy(), Policy()
    local, app = local_caller("local"), Caller("app", "api-key")
    headers = {"x-memtap-session": "s1", "x-memtap-run": "bench", "user-agent": "bench"}

    def step(caller: Caller, rules: Policy) -> Callable[[int], object]:
        def run(i: int) -> object:
            user = f"user-{i % 50}"
            layers = ({"namespace": user}, fields_from_headers(headers))
            context = resolve_context(caller, layers=layers, client="bench", policy=rules)
            if caller.restricted:
                rules.check_act_for(caller, user)
                rules.check(caller, context.namespace, Right.READ)
            return context

        return run

    fns = {"base": step(local, empty), "checked": step(app, policy)}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        _timed(fn, 500)
    for _ in range(blocks):
        for name, fn in fns.items():
            samples[name] += _timed(fn, n // blocks)
    return [("chat auto: context + act-for + read", _p50_us(samples["base"]), _p50_us(samples["checked"]))]


async def service_rows(n: int = 4_000, blocks: int = 10) -> list[tuple[str, float, float]]:
    """``memory_get`` through ``MemoryService.call_tool`` with a local caller and no grants, and
    with an API-key caller under the 1,000-principal policy (the same runtime and item)."""
    from memtap.auth import Caller, Policy, local_caller
    from memtap.proxy.runtime import Runtime, Settings

    with tempfile.TemporaryDirectory(prefix="memtap-auth-bench-") as tmp:
        runtime = Runtime(Settings(db=Path(tmp) / "auth.db"))
        try:
            service = runtime.service
            keyed, local = Caller("p517", "api-key"), local_caller("p517")
            added = await service.call_tool("memory_add", {"content": "the gym is FitLife"}, caller=local,
                                            front_door="bench")  # fmt: skip
            item = added.value["id"]
            policy, empty = big_policy(), Policy()
            layers = ({"session": "s1", "run": "bench"},)

            async def block(caller: Caller, rules: Policy, count: int, out: list[float] | None) -> None:
                service.policy = rules
                for _ in range(count):
                    t0 = time.perf_counter()
                    outcome = await service.call_tool(
                        "memory_get", {"id": item}, caller=caller, front_door="bench", layers=layers
                    )
                    if out is not None:
                        out.append(time.perf_counter() - t0)
                    if outcome.is_error:
                        raise RuntimeError(outcome.value)
                runtime.recorder.flush(60)

            base: list[float] = []
            checked: list[float] = []
            await block(local, empty, 200, None)
            await block(keyed, policy, 200, None)
            for index in range(blocks):  # alternate which goes first
                runs = [(local, empty, base), (keyed, policy, checked)]
                for caller, rules, out in runs if index % 2 == 0 else runs[::-1]:
                    await block(caller, rules, n // blocks, out)
        finally:
            await runtime.aclose()
    return [("service memory_get (in-process)", _p50_us(base), _p50_us(checked))]


def print_rows(title: str, rows: list[tuple[str, float, float]]) -> None:
    print(
        f"\n== {title}: p50 per call, µs ({PRINCIPALS:,} principals, ~{3 * PRINCIPALS:,} patterns configured)"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'case'.ljust(width)}  {'no grants':>10}  {'grants':>10}  {'added':>8}  {'ratio':>6}")
    for case, base, checked in rows:
        added, ratio = checked - base, checked / base
        print(f"{case.ljust(width)}  {base:10.2f}  {checked:10.2f}  {added:8.2f}  {ratio:6.2f}")


def main() -> None:
    print_rows("authorisation, the gate", gate_rows())
    print_rows("authorisation, resolver alone", resolve_rows())
    print_rows("authorisation, chat front door step", chat_rows())
    print_rows("authorisation, memory service", asyncio.run(service_rows()))


if __name__ == "__main__":
    main()
