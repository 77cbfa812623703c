"""The detector rules that the replayed suites measure: a change statement that leaves the old
value live (stale_coexistence without "from X" phrasing), a re-add that deletes (erasure, the
add asked for no removal), and a wrapped server's retrieval leak judged from the items' tags
when no gate verdict is recorded. Each through a real front door, with the correct case beside it."""

from __future__ import annotations

import re._parser as sre  # a pattern's own parse tree (the spellings test)
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import http_client, meta
from findings_helpers import faulty_server, serve_proxy, settled_findings

from memtap.adapters.memory_server import observation_id
from memtap.findings.facts import facts
from memtap.findings.model import Finding, Severity
from memtap.findings.supersede import clauses, states_change

pytestmark = pytest.mark.anyio

Serve = Callable[..., Any]


async def _write_all(served: Any, *texts: str) -> list[str]:
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as client:
        ids = []
        for n, text in enumerate(texts):
            result = await client.call_tool(
                "memory_add", {"content": text}, meta=meta(session=f"s{n}", turn="t0", role="user")
            )
            assert not result.is_error, result
            ids.append(str(result.structured_content["id"]))  # type: ignore[index]
    return ids


async def test_a_change_that_leaves_the_old_value_live_is_stale_coexistence(serve_memtap: Serve) -> None:
    served = serve_memtap()
    old, new = await _write_all(
        served,
        "Small thing to keep in mind. My dentist is Dr. Lindqvist.",
        "That has changed. My dentist is Dr. Okafor.",
    )
    (stale,) = settled_findings(served, "stale_coexistence")
    assert (stale.severity, stale.item_ids) == (Severity.MEDIUM, [old, new])
    assert stale.evidence == {
        "old_values": ["lindqvist"],
        "new_value": "okafor",
        "subject": "my dentist is dr",
        "stale_content": "Small thing to keep in mind. My dentist is Dr. Lindqvist.",
        "correction": "That has changed. My dentist is Dr. Okafor.",
    }
    assert (
        stale.summary
        == f"{old} still states 'my dentist is dr' is 'lindqvist' after {new} changed it to 'okafor'"
    )


async def test_a_change_with_a_shared_ending_names_the_subject_around_the_value(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _write_all(served, "I eat vegan these days.", "That has changed. I eat pescatarian these days.")
    (stale,) = settled_findings(served, "stale_coexistence")
    assert (stale.evidence["subject"], stale.evidence["old_values"], stale.evidence["new_value"]) == (
        "i eat … these days",
        ["vegan"],
        "pescatarian",
    )


async def test_restatements_that_say_nothing_changed_are_not_stale(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _write_all(
        served,
        "My dentist is Dr. Lindqvist.",
        "I looked at Dr. Okafor again, but nothing changes for me: my dentist is Dr. Lindqvist.",
        "I tried Dr. Okafor once with Omar. Nothing changes for me, but Dr. Okafor was fun.",
        "Funny coincidence: a neighbour sees Dr. Okafor as a dentist.",
    )
    assert settled_findings(served, "stale_coexistence") == []


OLD_TARGET = "The project targets Python 3.13."
CHANGE = (
    "Update: after a load test, that changed because the test showed the old setting was too tight. "
    "The project targets PyPy 3.10."
)
DECOY = "I looked at PyPy 3.10 again, but nothing changes for me: the project targets Python 3.13."


async def _observe_in_turn(db: Path, fault: str, *said: str) -> list[Finding]:
    """``said`` added one by one as the user's observations (a session each) through ``memtap proxy``
    over the faulty reference server; the stale_coexistence findings."""
    served = serve_proxy(db, {"memory": faulty_server(fault)})
    try:
        async with http_client(
            f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}
        ) as client:
            made = {"entities": [{"name": "user", "entityType": "speaker", "observations": []}]}
            await client.call_tool("create_entities", made, meta=meta(session="s0", turn="t0", role="user"))
            for n, text in enumerate(said, start=1):
                add = {"observations": [{"entityName": "user", "contents": [text]}]}
                result = await client.call_tool(
                    "add_observations", add, meta=meta(session=f"s{n}", turn="t0", role="user")
                )
                assert not result.is_error, result
        return settled_findings(served, "stale_coexistence")
    finally:
        served.stop()


async def test_restating_a_corrected_value_beside_its_replacement_is_stale_on_an_overwriting_backend(
    db_path: Path,
) -> None:
    """The overwriting backend drops the old statement when the change arrives (no two items ever
    coexist), but the later "nothing changes for me: <old value>" puts the superseded value back
    while the new one is live in that very item: what the gold calls the superseded memory stored
    beside its replacement."""
    found = await _observe_in_turn(db_path, "overwrite", OLD_TARGET, CHANGE, DECOY)
    (stale,) = found
    decoy, change = observation_id("user", DECOY), observation_id("user", CHANGE)
    assert (stale.item_ids, stale.session) == ([decoy, change], "s3")
    assert stale.evidence == {
        "old_values": ["python 3 13"],
        "new_value": "pypy 3 10",
        "subject": "the project targets",
        "stale_content": DECOY,
        "correction": CHANGE,
    }
    assert stale.summary == (
        f"{decoy} states 'the project targets' is 'python 3 13' again after {change} changed it to "
        "'pypy 3 10', which is still live"
    )


async def test_a_plain_restatement_of_the_old_value_beside_the_live_correction_is_stale(
    db_path: Path,
) -> None:
    """No cue at all ("Context for later: the project targets Python 3.13."), on a backend that
    keeps every observation: the change statement is live, so the old value is back beside it."""
    again = "Context for later: The project targets Python 3.13."
    found = await _observe_in_turn(db_path, "", OLD_TARGET, CHANGE, again)
    restated = [f for f in found if f.session == "s3"]
    assert [f.item_ids for f in restated] == [[observation_id("user", again), observation_id("user", CHANGE)]]
    assert restated[0].evidence["old_values"] == ["python 3 13"]


async def test_restating_the_new_value_or_reverting_with_the_new_value_gone_is_not_stale(
    db_path: Path,
) -> None:
    """After the change, "nothing changes for me: <new value>" restates what is current, and a
    plain "<old value>" on the overwriting backend replaces the new value (nothing coexists)."""
    restated = "I looked at Python 3.13 again, but nothing changes for me: the project targets PyPy 3.10."
    assert await _observe_in_turn(db_path, "overwrite", OLD_TARGET, CHANGE, restated, OLD_TARGET) == []


async def test_forget_requests_are_not_values_of_one_subject(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _write_all(
        served,
        "Please forget what I told you about lead with the verdict; it no longer applies.",
        "Please forget what I told you about vegan; it no longer applies.",
    )
    assert settled_findings(served, "stale_coexistence") == []


def test_change_cues_count_unless_negated_and_titles_do_not_end_a_clause() -> None:
    assert states_change("Update: after a load test, that changed because it was too tight.")
    assert not states_change("I looked at 7 retries again, but nothing changes for me.")
    assert not states_change("That's not right, nothing changed. Let's leave planning for later.")
    assert clauses("That has changed. My dentist is Dr. Okafor. What is yours?") == [
        ("that", "has", "changed"),
        ("my", "dentist", "is", "dr", "okafor"),
    ]


TEA = observation_id("alice", "likes tea")
ALICE = {"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]}
READD = {"observations": [{"entityName": "alice", "contents": ["likes tea"]}]}


async def _play_readd(db: Path, fault: str) -> list[Any]:
    served = serve_proxy(db, {"memory": faulty_server(fault)})
    try:
        async with http_client(
            f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}
        ) as client:
            await client.call_tool("create_entities", ALICE, meta=meta(session="s1", turn="t1", role="user"))
            await client.call_tool("add_observations", READD, meta=meta(session="s2", turn="t1", role="user"))
        return settled_findings(served)
    finally:
        served.stop()


async def test_a_readd_that_deletes_the_memory_is_an_erasure_the_add_did_not_ask_for(db_path: Path) -> None:
    found = await _play_readd(db_path, "readd")
    (erasure,) = [f for f in found if f.kind == "erasure"]
    assert (erasure.severity, erasure.item_ids, erasure.session) == (Severity.HIGH, [TEA], "s2")
    assert erasure.evidence == {
        "removed": "delete",
        "content_before": "likes tea",
        "content_after": None,
        "lost_facts": ["tea"],
        "requested_by_call": False,
        "user_turns_known": 0,
    }


async def test_the_correct_backend_keeps_the_readded_memory_without_erasure(db_path: Path) -> None:
    assert await _play_readd(db_path, "") == []


ACKNOWLEDGEMENTS = [
    "That is a nice coincidence.",
    "Understood, nothing to change then.",
    "Glad you enjoyed it.",
]
OFFER = "I can remind you about the dentist paperwork on Monday."


async def test_a_readd_that_deletes_acknowledgements_erases_no_fact_but_one_that_deletes_a_date_does(
    db_path: Path,
) -> None:
    """Small talk states no fact ("nice coincidence" is what *that* is, "to change" an infinitive):
    the re-adding backend deleting it is a readd_deletes, not an erasure; a day it deletes is."""
    served = serve_proxy(db_path, {"memory": faulty_server("readd")})
    said = [*ACKNOWLEDGEMENTS, OFFER]
    add = {"observations": [{"entityName": "assistant", "contents": said}]}
    try:
        async with http_client(
            f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}
        ) as client:
            made = {"entities": [{"name": "assistant", "entityType": "speaker", "observations": []}]}
            await client.call_tool(
                "create_entities", made, meta=meta(session="s1", turn="t1", role="assistant")
            )
            await client.call_tool(
                "add_observations", add, meta=meta(session="s1", turn="t2", role="assistant")
            )
            await client.call_tool(
                "add_observations", add, meta=meta(session="s2", turn="t1", role="assistant")
            )
        found = settled_findings(served)
    finally:
        served.stop()
    readds = sorted(f.evidence["deleted_content"] for f in found if f.kind == "readd_deletes")
    assert readds == sorted(said)
    (erasure,) = [f for f in found if f.kind == "erasure"]
    assert (erasure.item_ids, erasure.evidence["lost_facts"]) == (
        [observation_id("assistant", OFFER)],
        ["monday"],
    )


def _spellings(items: Any) -> list[str]:
    """Every text the parsed pattern ``items`` matches at its shortest, each optional part both
    left out and taken once, each branch in turn (lookarounds and boundaries match nothing)."""
    out = [""]
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            options = [chr(av)]
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, _, sub = av
            options = ([""] if low == 0 else []) + [s * max(low, 1) for s in _spellings(sub)]
        elif name == "SUBPATTERN":
            options = _spellings(av[-1])
        elif name == "BRANCH":
            options = [s for branch in av[1] for s in _spellings(branch)]
        elif name == "IN":  # a class: one of its members (a space for \s, a letter for \w)
            kind, value = av[0]
            options = [chr(value) if str(kind) == "LITERAL" else " " if "SPACE" in str(value) else "x"]
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            options = [""]
        else:
            raise AssertionError(f"the spelling of {name} is not known here")
        out = [a + b for a in out for b in options]
    return out


def test_the_quick_word_tests_before_the_cue_patterns_let_every_spelling_of_them_through() -> None:
    """``asks_to_forget`` and ``states_change`` skip their patterns in ASCII text that holds none of
    a few words: every text the patterns match (spelled from the patterns themselves, so a word
    added to a pattern and not to its quick test fails here) gets the patterns' own answer."""
    from memtap.findings.facts import _FORGET, asks_to_forget, is_correction
    from memtap.findings.supersede import _NEGATED_CHANGE

    forget = _spellings(sre.parse(_FORGET.pattern, _FORGET.flags))
    negated = _spellings(sre.parse(_NEGATED_CHANGE.pattern, _NEGATED_CHANGE.flags))
    assert len(forget) >= 14 and len(negated) >= 100
    for spelling in forget:
        for text in (f"Please {spelling} that.", f"PLEASE {spelling.upper()} THAT."):
            assert _FORGET.search(text) is not None and asks_to_forget(text), text
    for spelling in negated:
        for text in (f"So {spelling} since then.", f"SO {spelling.upper()} SINCE THEN."):
            assert _NEGATED_CHANGE.search(text) is not None, text
            slow = is_correction(text) and is_correction(_NEGATED_CHANGE.sub(" ", text))
            assert states_change(text) is slow, text


def test_acknowledgements_and_infinitives_state_no_fact_while_values_and_places_do() -> None:
    assert [facts(t) for t in ACKNOWLEDGEMENTS] == [frozenset()] * 3
    assert facts("I need to sort out some paperwork next week.") == frozenset()
    assert facts("I get to work by train.") == {"work train"}
    assert facts("Last year I moved to berlin.") >= {"berlin"}
    assert facts("It is closer to home now.") == {"home"}
    assert facts("My favourite colour is dark blue.") == {"dark blue"}


async def _search_as(served: Any, namespace: str, query: str) -> None:
    url = f"http://127.0.0.1:{served.port}/mcp"
    async with http_client(url, {"X-Memtap-Namespace": namespace}) as client:
        await client.call_tool("search_nodes", {"query": query}, meta=meta(session="s2"))


async def test_a_wrapped_servers_retrieval_is_judged_by_the_items_tags_when_no_verdict_is_recorded(
    db_path: Path, memory_server: dict[str, Any]
) -> None:
    served = serve_proxy(db_path, {"memory": memory_server})
    try:
        url = f"http://127.0.0.1:{served.port}/mcp"
        async with http_client(url, {"X-Memtap-Namespace": "alice"}) as alice:
            entity = {"name": "alice", "entityType": "person", "observations": ["likes green tea"]}
            await alice.call_tool("create_entities", {"entities": [entity]}, meta=meta(session="s1"))
        await _search_as(served, "alice", "tea")  # her own memory: no leak
        await _search_as(served, "bob", "tea")  # the reference server has one graph for everyone
        found = settled_findings(served, "leak_retrieval")
    finally:
        served.stop()
    item = observation_id("alice", "likes green tea")
    assert [(f.severity, f.namespace, f.item_ids) for f in found] == [(Severity.HIGH, "bob", [item])]
    assert found[0].evidence == {
        "gate": "none recorded: judged from the items' tags",
        "requester": "bob",
        "contents": {item: "likes green tea"},
        "tags": {item: {"owner": "alice"}},
    }


def test_a_question_states_no_fact_but_the_statement_beside_it_does() -> None:
    """A chat proxy storing user turns stores questions too: "What do you know about Leo's job?"
    names no fact of Leo's that a reply could leak, or a removal erase."""
    assert facts("What do you know about Leo's job?") == frozenset()
    assert facts("Remind me, what do you have on file for my commute?") == frozenset()
    assert facts("Is it 5 pm? I moved to Berlin on 3 May.") >= {"berlin", "3 may"}
    assert "5" not in facts("Is it 5 pm? I moved to Berlin on 3 May.")
