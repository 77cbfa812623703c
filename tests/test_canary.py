"""The isolation canary: `memtap suite gen canary`, replay as N users under their own principals on a
real `memtap serve` (and through the mcp: and openai: targets), and `cross_reads` from the trace.

Expected counts are computed here from the suite file as written (plain JSON), never with memtap's
scorer."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result
from conftest import write_config
from secrets_check import assert_absent

from memtap.cli.main import cli

SCHEMA = Path(__file__).resolve().parent.parent / "memtap" / "scoring" / "memtap-score-1.schema.json"


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def gen(path: Path, *extra: str, seed: int = 7) -> Path:
    result = run_cli("suite", "gen", "canary", "--seed", str(seed), *extra, "-o", str(path))
    assert result.exit_code == 0, result.output
    return path


def small(path: Path, *extra: str) -> Path:
    return gen(path, "--users", "4", "--writes", "240", "--updates", "24", "--searches", "24", *extra)


def episode_of(path: Path) -> dict[str, Any]:
    (line,) = path.read_text().splitlines()
    return dict(json.loads(line))


def turns_of(episode: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for s in episode["sessions"] for t in s["turns"]]


def score(db: Path, run: str) -> dict[str, Any]:
    result = run_cli("score", run, "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    report = dict(json.loads(result.stdout))
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    return report


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


# -- the generator ------------------------------------------------------------------------------


def test_canary_generator_gives_the_same_file_for_the_same_seed_and_the_asked_mix(tmp_path: Path) -> None:
    a = small(tmp_path / "a.jsonl")
    b = small(tmp_path / "b.jsonl")
    c = gen(
        tmp_path / "c.jsonl", "--users", "4", "--writes", "240", "--updates", "24", "--searches", "24", seed=8
    )
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert run_cli("suite", "validate", str(a)).exit_code == 0

    episode = episode_of(a)
    users = [p["id"] for p in episode["participants"]]
    assert len(users) == 4 and episode["paradigm"] == "canary"
    ops = Counter(t["metadata"]["op"] for t in turns_of(episode))
    assert ops == {"write": 240, "update": 24, "search": 24}
    per_user = Counter(t["speaker"] for t in turns_of(episode) if t["metadata"]["op"] == "write")
    assert set(per_user.values()) == {60}
    # Distinct canaries: 3 per user, unique across users, each stated in exactly one write of its owner.
    canaries = episode["metadata"]["canaries"]
    tokens = [t for mine in canaries.values() for t in mine]
    assert len(tokens) == len(set(tokens)) == 12
    for user, mine in canaries.items():
        for token in mine:
            writers = [
                t["speaker"]
                for t in turns_of(episode)
                if token in t["content"] and t["metadata"]["op"] == "write"
            ]
            assert writers == [user]
    # Every update rewrites an earlier write of its own speaker.
    seen: dict[str, str] = {}
    for turn in turns_of(episode):
        if turn["metadata"]["op"] == "write":
            seen[turn["turn_id"]] = turn["speaker"]
        elif turn["metadata"]["op"] == "update":
            assert seen[turn["metadata"]["updates"]] == turn["speaker"]
    # Every user is probed for every other's canaries (own namespace, escape search) plus one escape listing.
    probes = episode["probes"]
    cross = {
        (p["requester"], p["metadata"]["canary_owner"]) for p in probes if p["expected_action"] == "withhold"
    }
    assert len(cross) == 4 * 3
    assert len(probes) == 4 * 3 + 12 * (3 + 3 + 1)  # self controls + per pair: own, escape, listing


def test_canary_stats_and_validation_name_what_is_wrong(tmp_path: Path) -> None:
    path = small(tmp_path / "suite.jsonl")
    stats = run_cli("suite", "stats", str(path), "--json")
    assert json.loads(stats.stdout)["probes_by_type"] == {"canary": 96}
    episode = episode_of(path)
    episode["probes"][0]["metadata"]["canary_owner"] = "mallory"
    first_update = next(t for t in turns_of(episode) if t["metadata"]["op"] == "update")
    first_update["metadata"]["updates"] = "user00-t999"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(episode) + "\n")
    result = CliRunner().invoke(cli, ["suite", "validate", str(bad)])
    assert result.exit_code != 0
    assert (
        "probes[0].metadata.canary_owner" in result.output
        and "'mallory' is not one of the participants" in result.output
    )
    assert (
        ".metadata.updates" in result.output and "'user00-t999' is not an earlier write turn" in result.output
    )


def test_canary_options_are_refused_for_other_generators_and_bad_sizes(tmp_path: Path) -> None:
    out = str(tmp_path / "x.jsonl")
    wrong = CliRunner().invoke(cli, ["suite", "gen", "paradigms", "--users", "3", "-o", out])
    assert wrong.exit_code == 2 and "--users apply to the canary generator only" in wrong.output
    few = CliRunner().invoke(cli, ["suite", "gen", "canary", "--users", "4", "--writes", "5", "-o", out])
    assert few.exit_code != 0 and "--writes 5 is too few" in few.output
    one = CliRunner().invoke(cli, ["suite", "gen", "canary", "--users", "1", "-o", out])
    assert one.exit_code != 0 and "--users must be at least 2" in one.output
    assert not Path(out).exists()


# -- what the scorer must find, computed from the suite file ------------------------------------


def expected_shared_reads(episode: dict[str, Any]) -> Counter[tuple[str, str]]:
    """(reader, owner) -> search events in which the reader is shown the owner's canary when only
    the shared namespace (granted to every user, access tags not enforced) lets canaries cross."""
    in_shared = Counter()
    for turn in turns_of(episode):
        if turn["metadata"].get("namespace") == "shared":
            for owner, mine in episode["metadata"]["canaries"].items():
                for token in mine:
                    if token in turn["content"]:
                        in_shared[token] = owner
    found: Counter[tuple[str, str]] = Counter()
    for probe in episode["probes"]:
        meta = probe["metadata"]
        if (
            meta["target"] == "shared"
            and meta["query"] in in_shared
            and in_shared[meta["query"]] != probe["requester"]
        ):
            found[(probe["requester"], in_shared[meta["query"]])] += 1
    return found


def escape_attempts(episode: dict[str, Any]) -> int:
    return sum(1 for p in episode["probes"] if p["metadata"]["target"] == "owner")


def writes_in(episode: dict[str, Any]) -> int:
    return sum(1 for t in turns_of(episode) if t["metadata"]["op"] in ("write", "update"))


def replay(suite: Path, db: Path, run: str, *extra: str) -> dict[str, Any]:
    result = run_cli(
        "replay", str(suite), "--db", str(db), "--run", run, "--reader", "none", "--json", *extra
    )
    assert result.exit_code == 0, result.output
    summary = dict(json.loads(result.stdout))
    assert (summary["status"], summary["episodes_done"]) == ("completed", 1), summary
    return summary


@pytest.mark.parametrize("shared", [False, True], ids=["isolated", "shared-namespace"])
def test_canary_on_builtin_in_enforce_mode_reads_no_other_users_canaries_and_refuses_every_escape(
    tmp_path: Path, shared: bool
) -> None:
    # With the shared namespace granted to every user, its writes are accepted, and the access gate
    # withholds from each reader what the other users put there (private to them by its tags).
    suite = small(tmp_path / "suite.jsonl", *(["--shared-namespace"] if shared else []))
    episode = episode_of(suite)
    db = tmp_path / "trace.db"
    replay(suite, db, "e1", "--target", "builtin", "--gate", "enforce")
    canary = score(db, "e1")["canary"]

    assert (canary["cross_reads"], canary["pairs_total"]) == (0, 12)
    assert canary["by_channel"] == {c: {"pairs": 0, "events": 0} for c in ("search", "read", "chat")}
    assert canary["episodes"][0]["pairs"] == []
    attempts = escape_attempts(episode)
    assert canary["escapes"] == {"attempted": attempts, "refused": attempts, "disclosed": 0}
    w = canary["writes"]
    assert (w["in_suite"], w["sent"], w["acknowledged"], w["recorded"]) == (writes_in(episode),) * 4
    assert w["all_acknowledged"] is True
    assert canary["own_canaries"] == {"seen": 12, "total": 12}  # the searches work: zero is not vacuous
    # Every escape is an error event in the trace, acting for the reader, naming the owner's namespace.
    refused = rows(db, "SELECT principal, namespace, status, error FROM events WHERE run_id = 'e1'"
                       " AND session = 'probes' AND turn LIKE '%-escape-%'")  # fmt: skip
    assert len(refused) == attempts
    assert all(
        status == "error" and principal != namespace and error
        for principal, namespace, status, error in refused
    )


def test_canary_in_observe_mode_with_a_shared_namespace_counts_exactly_the_cross_reads(
    tmp_path: Path,
) -> None:
    suite = small(tmp_path / "suite.jsonl", "--shared-namespace")
    episode = episode_of(suite)
    db = tmp_path / "trace.db"
    replay(suite, db, "o1", "--target", "builtin", "--gate", "observe")
    report = score(db, "o1")
    canary = report["canary"]

    expected = expected_shared_reads(episode)
    assert expected  # the suite shares canaries on purpose: the count is not vacuously zero
    got = {(p["reader"], p["owner"]): p["events"] for p in canary["episodes"][0]["pairs"]}
    attempts = escape_attempts(episode)
    # Escapes are refused whatever the gate: only the shared namespace lets canaries cross.
    assert {pair: len(ev.get("search", [])) for pair, ev in got.items()} == dict(expected)
    assert canary["cross_reads"] == len(expected)
    assert canary["by_channel"]["search"] == {"pairs": len(expected), "events": sum(expected.values())}
    assert canary["by_channel"]["read"] == canary["by_channel"]["chat"] == {"pairs": 0, "events": 0}
    assert canary["escapes"] == {"attempted": attempts, "refused": attempts, "disclosed": 0}
    assert canary["writes"]["all_acknowledged"] is True
    assert canary["writes"]["recorded"] == writes_in(episode)
    # The exact events are listed, and each one is a retrieval acting for the reader.
    ids = [i for ev in got.values() for i in ev.get("search", [])]
    found = rows(db, f"SELECT id, op, requester FROM events WHERE id IN ({','.join('?' * len(ids))})", *ids)
    assert len(found) == len(ids) and {op for _, op, _ in found} == {"retrieve"}
    assert any("read another user's canaries" in w for w in report["warnings"])
    markdown = run_cli("score", "o1", "--db", str(db), "--markdown", "--no-store").stdout
    assert (
        f"cross_reads {canary['cross_reads']} of 12 pairs" in markdown and "## Isolation canary" in markdown
    )


def test_canary_keys_are_made_per_run_and_never_reach_the_trace_and_a_mixed_suite_authenticates(
    tmp_path: Path,
) -> None:
    import anyio

    from memtap.probes.generators import generate
    from memtap.probes.readers import make_reader
    from memtap.probes.replay import ReplayPlan, replay_suite
    from memtap.probes.runs import RunStore
    from memtap.probes.suitefile import load_suite, write_suite
    from memtap.probes.targets.builtin import BuiltinTarget

    canary = gen(
        tmp_path / "canary.jsonl", "--users", "3", "--writes", "30", "--updates", "3", "--searches", "3"
    )
    write_suite(
        load_suite(canary).episodes + generate("permission", seed=2, episodes=1), tmp_path / "mixed.jsonl"
    )
    suite = load_suite(tmp_path / "mixed.jsonl")
    db = tmp_path / "trace.db"
    target = BuiltinTarget(db, gate="observe")
    store = RunStore(db)
    try:
        store.create_run("k1", suite_path=suite.path, suite_sha256=suite.sha256, episodes=suite.episodes,
                         target="builtin", config={}, reader="none")  # fmt: skip
        plan = ReplayPlan("k1", list(suite.episodes), {})
        summary = anyio.run(
            lambda: replay_suite(suite, plan, target, store, make_reader("none", None), show_progress=False)
        )
    finally:
        store.close()
    # Both episodes played: the permission episode's principal may act for the requesters it names.
    assert (summary["status"], summary["episodes_done"], summary["episodes_failed"]) == ("completed", 2, 0)
    assert summary["target"]["principals"] == "one key per user"
    keys = list(target._keys.values())
    assert len(keys) == 4 and len(set(keys)) == 4
    # Each canary user acted under its own principal (its key), on the namespace named like it.
    principals = {p for (p,) in rows(db, "SELECT DISTINCT principal FROM events WHERE run_id = 'k1'")}
    assert principals == {f"k1/canary/1/user{i:02d}" for i in range(3)} | {"k1/perm-000/1"}
    assert_absent(db, *keys, writer_open=False)  # the run's stores are closed


# -- the same probe through the mcp: and openai: targets ---------------------------------------


def pair_turns(canary: dict[str, Any], db: Path, channel: str) -> dict[tuple[str, str], set[str]]:
    """(reader, owner) -> the turns (probe ids) of the events listed for that pair on ``channel``."""
    out: dict[tuple[str, str], set[str]] = {}
    for pair in canary["episodes"][0]["pairs"]:
        ids = pair["events"].get(channel, [])
        if ids:
            marks = ",".join("?" * len(ids))
            out[(pair["reader"], pair["owner"])] = {
                t for (t,) in rows(db, f"SELECT turn FROM events WHERE id IN ({marks})", *ids)
            }
    return out


def test_canary_through_the_wrapped_reference_server_shows_every_user_reading_every_other(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    suite = gen(
        tmp_path / "suite.jsonl", "--users", "3", "--writes", "30", "--updates", "3", "--searches", "3"
    )
    episode = episode_of(suite)
    config = write_config(tmp_path, {"memory": memory_server})
    db = tmp_path / "trace.db"
    replay(suite, db, "m1", "--target", f"mcp:{config}:memory")
    canary = score(db, "m1")["canary"]
    # The proxy refuses every call that names another user's namespace (the escape searches and graph
    # reads), but the reference server keeps one graph for every caller: a user's search of its own
    # namespace finds the other users' canaries.
    assert (canary["cross_reads"], canary["pairs_total"]) == (6, 6)
    assert canary["by_channel"]["search"]["pairs"] == 6 and canary["by_channel"]["read"]["pairs"] == 0
    attempts = escape_attempts(episode)
    assert canary["escapes"] == {"attempted": attempts, "refused": attempts, "disclosed": 0}
    searched = pair_turns(canary, db, "search")
    for probe in episode["probes"]:
        meta = probe["metadata"]
        if meta["target"] == "own" and meta["canary_owner"] != probe["requester"]:
            assert probe["probe_id"] in searched[(probe["requester"], meta["canary_owner"])]
    assert canary["writes"]["all_acknowledged"] is True and canary["writes"]["recorded"] == writes_in(episode)


def test_canary_through_a_chat_agent_counts_what_its_injected_memory_and_replies_disclose(
    tmp_path: Path, db_path: Path, upstream: Any, start_http_server: Any
) -> None:
    config = tmp_path / "chat.json"
    models = [
        {
            "model_name": "agent",
            "litellm_params": {"model": "openai/reader-json", "api_base": upstream.base_url},
        }
    ]
    # top_k 50: every memory of a user's namespace that shares a word with the question is injected,
    # including the questions other users' probes left there (the agent remembers what it is asked).
    config.write_text(json.dumps({"model_list": models, "memtap": {"memory": "auto", "top_k": 50}}))
    server = start_http_server("--config", str(config))
    suite = gen(
        tmp_path / "suite.jsonl", "--users", "3", "--writes", "30", "--updates", "3", "--searches", "3"
    )
    episode = episode_of(suite)
    replay(suite, db_path, "c1", "--target", f"openai:http://127.0.0.1:{server.port}/v1#agent")
    server.stop()  # flushes the trace
    canary = score(db_path, "c1")["canary"]
    # A keyless chat proxy takes the namespace a request names: every escape chat is answered with the
    # other user's memory injected, canaries included.
    assert (canary["cross_reads"], canary["pairs_total"]) == (6, 6)
    assert canary["by_channel"]["chat"]["pairs"] == 6
    assert canary["by_channel"]["search"] == {"pairs": 0, "events": 0}
    chatted = pair_turns(canary, db_path, "chat")
    for (reader, owner), turns in chatted.items():
        assert turns and all(t.startswith(f"{reader}-{owner}-escape-") for t in turns)
    assert canary["escapes"]["attempted"] == sum(1 for p in episode["probes"] if p["metadata"]["target"] == "owner"
                                                 and p["metadata"]["via"] == "search")  # fmt: skip
    assert canary["writes"]["all_acknowledged"] is True
