"""The replay clock at /v1/memtap/replay/mark: memory calls an agent makes on its own, without a
turn, are attributed to the turn the replay marked for their namespace."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest
from conftest import ServerProcess, http_client, meta

from memtap.probes.readers import ExtractiveReader, make_reader
from memtap.probes.schema import Probe
from memtap.probes.targets.base import ProbeResult, Retrieved
from memtap.trace.models import Role
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]


async def test_calls_without_a_turn_are_attributed_to_the_marked_turn_of_their_namespace(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    mark_url = f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark"
    async with httpx2.AsyncClient() as http:
        marked = await http.post(mark_url, json={"namespace": "ns-1", "run": "r9", "episode": "e1",
                                                 "session": "s4", "turn": "s4-t2", "role": "user"})  # fmt: skip
        assert marked.status_code == 200 and marked.json()["mark"]["turn"] == "s4-t2"
        assert (await http.get(mark_url, params={"namespace": "ns-1"})).json()["mark"]["session"] == "s4"
        async with http_client(server.url, {"X-Memtap-Namespace": "ns-1"}) as client:
            await client.call_tool("memory_add", {"content": "The user's gym is FitLife."})
            await client.call_tool(
                "memory_add", {"content": "own turn"}, meta=meta(session="s0", turn="s0-t0")
            )
            await client.call_tool("memory_search", {"query": "gym"}, meta=meta(role="assistant"))
        async with http_client(server.url, {"X-Memtap-Namespace": "other"}) as client:
            await client.call_tool("memory_add", {"content": "another namespace"})
        cleared = await http.delete(mark_url, params={"namespace": "ns-1"})
        assert cleared.json() == {"cleared": True}
        assert (await http.get(mark_url, params={"namespace": "ns-1"})).status_code == 404
        async with http_client(server.url, {"X-Memtap-Namespace": "ns-1"}) as client:
            await client.call_tool("memory_add", {"content": "after the episode"})
        assert (await http.post(mark_url, json={"turn": "t"})).status_code == 422
        assert (await http.post(mark_url, json={"namespace": "n", "role": "narrator"})).status_code == 422
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    refused = [e.error for e in events if e.op.value == "control"]
    assert len(refused) == 2 and all(error and error.startswith("HTTP 422: ") for error in refused)
    ctx = [(e.context.namespace, e.context.run, e.context.episode, e.context.session, e.context.turn, e.context.role)
           for e in events if e.op.value != "control"]  # fmt: skip
    assert ctx == [
        ("ns-1", "r9", "e1", "s4", "s4-t2", Role.USER),  # attributed to the mark
        ("ns-1", None, None, "s0", "s0-t0", None),  # its own turn wins: nothing is filled in
        ("ns-1", "r9", "e1", "s4", "s4-t2", Role.ASSISTANT),  # what the call says (its role) wins
        ("other", None, None, None, None, None),  # no mark for that namespace
        ("ns-1", None, None, None, None, None),  # the mark was cleared
    ]


async def test_the_clock_needs_the_api_key_when_keys_are_configured(start_http_server: StartServer) -> None:
    server = start_http_server("--api-key", "sekret=alice")
    mark_url = f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark"
    async with httpx2.AsyncClient() as http:
        assert (await http.post(mark_url, json={"namespace": "alice", "turn": "t"})).status_code == 401
        # The gate answers before the body is read: a caller without a key learns nothing of
        # what a mark must hold (no 422), and is told how to authenticate.
        keyless = await http.post(mark_url, json={"turn": "t", "role": "narrator"})
        assert keyless.status_code == 401 and keyless.headers["www-authenticate"] == "Bearer"
        assert (await http.get(mark_url)).status_code == 401  # no ?namespace= either: 401, not 422
        ok = await http.post(
            mark_url, json={"namespace": "alice", "turn": "t"}, headers={"Authorization": "Bearer sekret"}
        )
        assert ok.status_code == 200
        # A key with no grants may mark only its own namespace.
        other = await http.post(
            mark_url, json={"namespace": "n", "turn": "t"}, headers={"Authorization": "Bearer sekret"}
        )
        assert other.status_code == 403
        assert other.json()["error"]["message"] == (
            "principal 'alice' may not write namespace 'n': "
            "it has no grants configured, so it may use only the namespace named like it"
        )


def _probe(kind: str, question: str) -> Probe:
    return Probe.model_validate(
        {"probe_id": "p", "type": kind, "question": question, "time": "2026-01-01T00:00:00Z"}
    )


def _result(*items: tuple[str, dict[str, object] | None, str]) -> ProbeResult:
    return ProbeResult(
        [Retrieved(f"m{i}", content, i + 1, tags=tags, provenance={"role": role})
         for i, (content, tags, role) in enumerate(items)],
        1.0,
    )  # fmt: skip


def test_extractive_reader_answers_in_each_probe_types_shape_without_inventing_values() -> None:
    reader = ExtractiveReader()
    found = _result(("Noted. The user works out at CrossFit Central now.", None, "user"),
                    ("I go to the dentist on Fridays.", None, "assistant"))  # fmt: skip
    assert reader.answer(_probe("current_value", "Where does the user work out?"), "u", found) == {
        "answer": "The user works out at CrossFit Central now."
    }
    assert reader.answer(_probe("change_detection", "Has the gym changed?"), "u", found)["changed"] is True
    assert (
        reader.answer(_probe("source", "Who said the user works out there?"), "u", found)["source"] == "user"
    )
    nothing = reader.answer(_probe("current_value", "Which gym?"), "u", _result())
    assert nothing == {"answer": None}
    abstain = reader.answer(_probe("abstention", "Why did Dana move to Oslo?"), "u", found)
    assert abstain == {"action": "abstain", "answer": None}


def test_extractive_reader_keeps_titles_and_initials_with_the_name_that_follows() -> None:
    found = _result(("Noted. My dentist is Dr. Patel on Elm St. since May.", None, "user"))
    answer = ExtractiveReader().answer(_probe("current_value", "Who is the user's dentist?"), "u", found)
    assert answer == {"answer": "My dentist is Dr. Patel on Elm St. since May."}


def test_extractive_reader_withholds_what_the_tags_deny_the_requester() -> None:
    private = {
        "owner": "ns",
        "visibility": "participants",
        "participants": ["alex", "maya"],
        "allow": ["alex"],
    }
    found = _result(("Maya said: I'm interviewing at Lumen Labs.", private, "third_party"))
    probe = _probe("permission", "What did Maya say about interviewing?")
    assert ExtractiveReader().answer(probe, "maya", found) == {
        "action": "disclose",
        "answer": "Maya said: I'm interviewing at Lumen Labs.",
    }
    assert ExtractiveReader().answer(probe, "anonymous", found) == {"action": "withhold", "answer": None}
    assert make_reader("none").answer(probe, "maya", found) is None
