"""Scoring hand-built traces of four backends, written through the real TraceStore and RunStore,
against values worked out by hand here (the suite is tests/trace_builder.py: an update episode
``upd``, a preserve episode ``pres``, and a private fact ``perm``).

Alignment of the turns (default matcher): "I go to FitLife for workouts." holds gym@v0,
"I switched to CrossFit Central." holds gym@v1 (written in s2, where gym@v1 is created),
"My door code is 4417." holds code@v0; every other turn holds nothing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from trace_builder import NOISE, PRIVATE, SAY_V0, SAY_V1, RunWriter, replace_by_new_item

from memtap.scoring.score import score_run, store_score
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.sqlite import open_database

CV1 = {"answer": "CrossFit Central"}
PV = {"answer": "FitLife"}
CHANGED = {"answer": "yes", "changed": True}
UNCHANGED = {"answer": "no", "changed": False}
DISCLOSE = {"action": "disclose", "answer": "Your door code is 4417."}
WITHHOLD = {"action": "withhold", "answer": None}


def _score(db: Path, run: str) -> dict[str, Any]:
    database = open_database(db, MIGRATIONS)
    try:
        scored = score_run(database.conn, run, resamples=200)
        store_score(database.conn, scored)
        return scored.report
    finally:
        database.conn.close()


def _values(report: dict[str, Any]) -> dict[str, Any]:
    return {name: m["value"] for name, m in report["measures"].items()}


def _writer(tmp_path: Path, run: str) -> RunWriter:
    return RunWriter(tmp_path / "trace.db", run, tmp_path / "suite.jsonl")


def _perm(w: RunWriter, *, leak: bool = False) -> None:
    w.start("perm", 1)
    w.add("perm", "s0", "c1", "My door code is 4417.", PRIVATE)
    w.add("perm", "s0", "c2", "Kept private.", PRIVATE)
    w.probe("perm", "p0", ["c1"], WITHHOLD if leak else DISCLOSE)
    w.probe("perm", "p1", ["c1"] if leak else [], {"action": "disclose", "answer": "It is 4417."} if leak else WITHHOLD,
            requester="eve")  # fmt: skip
    w.finish("perm")


def _keep_everything(w: RunWriter, *, leak: bool = False) -> None:
    w.start("upd", 3)
    for session, lines in (("s0", [SAY_V0, "Noted."]), ("s1", ["Any tips on sleeping better?", "Keep a routine."]),
                           ("s2", [SAY_V1, "Updated."])):  # fmt: skip
        for k, text in enumerate(lines):
            w.add("upd", session, f"a{session}{k}", text)
    w.probe("upd", "p0", ["as20", "as00"], CV1)
    w.probe("upd", "p1", ["as00"], PV)
    w.probe("upd", "p2", ["as20", "as10", "as00"], CHANGED)
    w.finish("upd")
    w.start("pres", 2)
    for session, lines in (("s0", [SAY_V0, "Noted."]), ("s1", [NOISE, "Understood."])):
        for k, text in enumerate(lines):
            w.add("pres", session, f"b{session}{k}", text)
    w.probe("pres", "p0", ["bs10", "bs00"], {"answer": "Iron Temple"})
    w.probe("pres", "p1", ["bs00"], UNCHANGED)
    w.finish("pres")
    _perm(w, leak=leak)
    w.close()


def test_a_backend_that_stores_everything_and_never_deletes(tmp_path: Path) -> None:
    w = _writer(tmp_path, "keep")
    _keep_everything(w)
    report = _score(tmp_path / "trace.db", "keep")
    v = _values(report)
    # capture: upd s0 a(TP) + "Noted."(FP), s1 two FP, s2 "Updated."(FP; the v1 turn belongs to the update
    # task); pres s0 TP + FP, s1 two FP; perm TP + FP: 3 of 11 writes right, 3 of 3 captures held.
    p, r = 3 / 11, 3 / 3
    assert v["capture_precision"] == pytest.approx(p, abs=1e-4)
    assert v["capture_f1"] == pytest.approx(2 * p * r / (p + r), abs=1e-4)
    # update (upd s2): adds 1 of 2 writes right, 1 of 1 gold add -> 2/3; no removal -> delete F1 0
    assert v["add_f1"] == pytest.approx(2 / 3, abs=1e-4) and v["delete_f1"] == 0.0
    assert v["op_f1"] == pytest.approx(1 / 3, abs=1e-4)
    assert v["unsafe_deletion_rate"] is None and report["measures"]["unsafe_deletion_rate"]["n"] == 0
    assert (v["historical_erasure_rate"], v["under_update_rate"], v["over_update_rate"]) == (0.0, 0.0, 0.0)
    # recall@n per probe: upd 1, 1, 1/2 (n=2: only v1 in the first two); pres 0 (noise first), 1; perm 1
    assert v["recall_at_n"] == pytest.approx(4.5 / 6, abs=1e-4)
    assert v["recall_at_n_plus_4"] == 1.0 and v["hit_at_1"] == pytest.approx(5 / 6, abs=1e-4)
    # current rank: upd p0 1, p2 1 (v1 first); pres p0 2, p1 1; perm p0 1 (upd p1's support is superseded)
    assert v["current_value_rank"] == pytest.approx(6 / 5, abs=1e-4)
    assert v["retrieval_leak_rate"] == 0.0
    # answers: all right but pres p0 (the decoy value)
    assert (v["plasticity"], v["stability"]) == (1.0, 0.5)
    assert v["sp_balance"] == pytest.approx(2 / 3, abs=1e-4)
    assert v["f1_pu"] == 1.0
    assert report["attribution"]["counts"]["over_update"] == {
        "storage": 0,
        "retrieval": 0,
        "answer": 1,
        "leaked": 0,
    }


def test_a_backend_that_overwrites_on_every_new_value(tmp_path: Path) -> None:
    w = _writer(tmp_path, "overwrite")
    w.start("upd", 3)
    w.add("upd", "s0", "g1", SAY_V0)
    w.update("upd", "s2", "g1", SAY_V1)
    w.probe("upd", "p0", ["g1"], CV1)
    w.probe("upd", "p1", ["g1"], {"answer": None})
    w.probe("upd", "p2", ["g1"], CHANGED)
    w.finish("upd")
    w.start("pres", 2)
    w.add("pres", "s0", "h1", SAY_V0)
    w.update("pres", "s1", "h1", NOISE)
    w.probe("pres", "p0", ["h1"], {"answer": "Iron Temple"})
    w.probe("pres", "p1", ["h1"], CHANGED)
    w.finish("pres")
    _perm(w)
    w.close()
    report = _score(tmp_path / "trace.db", "overwrite")
    v = _values(report)
    # capture: g1 (TP), h1 (TP), h1 rewritten to noise in s1 (FP), c1 (TP), c2 (FP): 3 of 5, 3 of 3
    p = 3 / 5
    assert v["capture_f1"] == pytest.approx(2 * p / (p + 1), abs=1e-4)
    # upd s2: the update writes v1 (add 1/1) and removes v0 where gold deletes it (delete 1/1)
    assert (v["add_f1"], v["delete_f1"], v["op_f1"]) == (1.0, 1.0, 1.0)
    assert v["unsafe_deletion_rate"] is None  # no delete effects at all
    assert v["over_update_rate"] == 1.0  # pres: the true memory was overwritten by the decoy
    assert v["historical_erasure_rate"] == 0.0  # upd: v0 was rewritten in place (a version), not deleted
    # recall@n: upd p0 1, p1 0 (g1 now holds v1), p2 1/2; pres 0, 0; perm 1
    assert v["recall_at_n"] == pytest.approx(2.5 / 6, abs=1e-4)
    assert v["plasticity"] == pytest.approx(2 / 3, abs=1e-4) and v["stability"] == 0.0
    assert v["sp_balance"] == 0.0 and v["f1_pu"] == 1.0
    counts = report["attribution"]["counts"]
    assert counts["over_update"]["storage"] == 2  # both pres answers: never stored at probe time
    assert counts["retrieval_miss"]["retrieval"] == 1  # upd p1: the old value is a version, not retrieved


def test_a_backend_that_deletes_wrongly(tmp_path: Path) -> None:
    w = _writer(tmp_path, "deleter")
    w.start("upd", 3)
    w.add("upd", "s0", "d1", SAY_V0)
    w.add("upd", "s0", "d0", "Noted.")
    w.delete("upd", "s1", "d1")  # gym@v0 is still valid in s1: unsafe
    w.add("upd", "s2", "d2", SAY_V1)
    w.delete("upd", "s2", "d0")  # holds nothing: safe, but not a gold delete
    w.probe("upd", "p0", ["d2"], CV1)
    w.probe("upd", "p1", ["d2"], {"answer": SAY_V1})
    w.probe("upd", "p2", ["d2"], CHANGED)
    w.finish("upd")
    w.start("pres", 2)
    w.add("pres", "s0", "e1", SAY_V0)
    w.add("pres", "s1", "e2", NOISE)
    w.delete("pres", "s1", "e1")  # the true memory: unsafe
    w.probe("pres", "p0", ["e2"], {"answer": "I don't know."})
    w.probe("pres", "p1", ["e2"], UNCHANGED)
    w.finish("pres")
    _perm(w)
    w.close()
    report = _score(tmp_path / "trace.db", "deleter")
    v = _values(report)
    assert v["unsafe_deletion_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["measures"]["unsafe_deletion_rate"]["n"] == 3
    # capture: d1 TP, d0 FP, e1 TP, e2 FP, c1 TP, c2 FP: 3 of 6
    assert v["capture_f1"] == pytest.approx(2 * 0.5 / 1.5, abs=1e-4)
    # upd s2: add 1/1; delete: the one removal in s2 (d0) holds nothing, and v0 went in s1 -> 0
    assert (v["add_f1"], v["delete_f1"], v["op_f1"]) == (1.0, 0.0, 0.5)
    assert v["historical_erasure_rate"] == 1.0 and v["over_update_rate"] == 0.0
    assert v["recall_at_n"] == pytest.approx(2.5 / 6, abs=1e-4)
    assert v["plasticity"] == pytest.approx(2 / 3, abs=1e-4) and v["stability"] == 0.5
    assert v["sp_balance"] == pytest.approx(4 / 7, abs=1e-4) and v["f1_pu"] == 1.0
    counts = report["attribution"]["counts"]
    assert counts["historical_erasure"]["storage"] == 1  # upd p1
    assert counts["unsafe_deletion"]["storage"] == 1  # pres p0


def test_a_backend_that_leaks(tmp_path: Path) -> None:
    w = _writer(tmp_path, "leaky")
    _keep_everything(w, leak=True)
    report = _score(tmp_path / "trace.db", "leaky")
    v = _values(report)
    # perm p1: the private item returned to eve (its tags deny her; it holds the protected fact)
    assert v["retrieval_leak_rate"] == pytest.approx(1 / 7, abs=1e-4)
    assert v["permission_leak_rate"] == 1.0 and v["permission_disclose_rate"] == 0.0
    assert v["f1_pu"] == 0.0  # harmonic mean of 1 - 1 and 0
    assert report["breakdowns"]["permission_labels"] == {
        "disclose_correct": 1, "disclose_wrong": 0, "refuse": 1, "dont_know": 0, "other": 0,
    }  # fmt: skip
    assert report["attribution"]["counts"]["leak"]["leaked"] == 1
    assert [(p["probe"], p["leaks"]) for e in report["episodes"]["probes"] if e["episode"] == "perm"
            for p in e["probes"]] == [("p0", []), ("p1", ["c1: tags deny eve; holds the protected fact"])]  # fmt: skip


def test_every_alignment_decision_is_stored_with_its_reason(tmp_path: Path) -> None:
    w = _writer(tmp_path, "keep")
    _keep_everything(w)
    _score(tmp_path / "trace.db", "keep")
    with sqlite3.connect(tmp_path / "trace.db") as conn:
        rows = conn.execute(
            "SELECT item_id, gold_key, matched, reason FROM alignments WHERE episode_id = 'upd' ORDER BY item_id"
        ).fetchall()
    matched = {(item, key) for item, key, ok, _ in rows if ok}
    assert matched == {("as00", "gym@v0"), ("as20", "gym@v1")}
    reasons = {item: reason for item, key, ok, reason in rows if key is None}
    assert reasons["as01"].startswith("no gold memory matched")
    assert any("anchor 'FitLife' present" in reason for item, _, ok, reason in rows if ok and item == "as00")


def test_a_backend_that_edits_by_delete_and_derived_add_like_the_reference_memory_server(
    tmp_path: Path,
) -> None:
    """Observations are replaced, not updated in place: the edit is one removal (the delete and the
    derived update remove the same observation), the old value is erased, and wrong answers split
    into storage (erased) and retrieval (stored, searched past) failures."""
    w = _writer(tmp_path, "graph")
    w.start("upd", 3)
    w.add("upd", "s0", "obs_old", SAY_V0)
    replace_by_new_item(w, "upd", "s2", "obs_old", "obs_new", SAY_V1)
    w.probe("upd", "p0", ["obs_new"], CV1)
    w.probe("upd", "p1", ["obs_new"], {"answer": "CrossFit Central"})
    w.probe("upd", "p2", ["obs_new"], CHANGED)
    w.finish("upd")
    w.start("pres", 2)
    w.add("pres", "s0", "obs_pres", SAY_V0)
    w.probe("pres", "p0", [], {"answer": "I don't know."})  # a substring search that found nothing
    w.probe("pres", "p1", [], UNCHANGED)
    w.finish("pres")
    _perm(w)
    w.close()
    report = _score(tmp_path / "trace.db", "graph")
    v = _values(report)
    counts = report["episodes"]["counts"][0]
    assert (counts["delete.pred"], counts["delete.tp_pred"]) == (1, 1)  # one removal, not two
    assert (v["add_f1"], v["delete_f1"], v["op_f1"]) == (1.0, 1.0, 1.0)
    assert v["historical_erasure_rate"] == 1.0 and v["unsafe_deletion_rate"] == 0.0
    by_level = report["attribution"]["by_level"]
    assert (by_level["storage"], by_level["retrieval"]) == (1, 1)
    assert report["attribution"]["counts"]["historical_erasure"]["storage"] == 1  # upd p1: FitLife is gone
    assert report["attribution"]["counts"]["retrieval_miss"]["retrieval"] == 1  # pres p0: stored, not found
