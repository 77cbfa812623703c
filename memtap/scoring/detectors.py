"""The findings detectors measured against a replayed run's gold (``detectors`` in the score file).

``memtap score`` runs every detector offline over the run's events (``memtap check``'s path, nothing
stored) and compares, per episode attempt (the unit; an episode's namespace), "the detector flagged
something here" with "the gold says the failure it looks for happened here", the latter read from
the storage and retrieval counts the scorer already computes:

- ``erasure``: a removal of a memory still valid then (an unsafe deletion, as ``unsafe.unsafe``
  counts, or an update whose new content dropped it) after which no stored item holds that memory
  (the detector's rule: the facts survive in no live item), or a historical erasure
  (``erasure.erased``: a superseded memory none of whose holders was kept);
- ``destructive_update``: an over-update (``over.overwritten``) or any update whose new content
  no longer holds a gold memory its old content held while that memory was still valid;
- ``stale_coexistence``: an under-update in the coexistence sense: from the session that wrote a
  replacing memory on, some session ends with the superseded memory stored next to it (at the
  episode's end, or until a later write took one of the two away: the detector judges each write
  as it happens);
- ``leak_retrieval``: a retrieval leak (``leak.leaked``: a probe returned an item the requester
  may not see, by tags or by the fact it holds);
- ``leak_injection``: an answer leak (``permission.deny_leaked``), only on a chat agent's run
  (``--target openai:``) with answers: there the answers are chat replies in the trace, and the
  memory searches are injected into its prompts, so a retrieval leak counts too (the detector
  flags an injected denied item as well as a reply stating it). On other runs the answers are the
  replay reader's, which no detector sees: ``not_measured`` says so, rather than counting misses.

Per detector: tp, fp, fn, tn (episodes), precision = tp / (tp + fp), recall = tp / (tp + fn)
(None when the denominator is 0). A finding that says it could not judge (``judged: false``,
e.g. no user turn in the trace) is no prediction; it is counted as ``undetermined``. Nor is a
finding whose items are all items of the episode that no gold memory aligns to (an assistant's
"I can remind you about the dentist paperwork on Monday.", small talk): the gold says nothing
about them, so it can neither confirm nor refute it; it is counted as ``outside_gold``.
See ``docs/scoring.md`` for the limits of this mapping.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from memtap.findings.model import Finding
from memtap.scoring.storage import StorageView
from memtap.scoring.trace import Counts

__all__ = ["GOLD", "detector_report", "run_findings"]

Gold = Callable[[StorageView, Counts], bool]


def _erasure(view: StorageView, counts: Counts) -> bool:
    """A historical erasure, or a removal (an unsafe deletion, or an update that dropped it) that
    left a still-valid memory in no stored item (a deleted copy of a memory another item still
    holds erased nothing)."""
    if counts.get("erasure.erased", 0) > 0:
        return True
    valid = view.aligner.valid_at
    return any(any(valid(k, r.pos) and not view.stored_at(k, r.pos) for k in r.keys) for r in view.removals)


def _destructive(view: StorageView, counts: Counts) -> bool:
    if counts.get("over.overwritten", 0) > 0:
        return True
    valid = view.aligner.valid_at
    return any(r.how == "update" and any(valid(k, r.pos) for k in r.keys) for r in view.removals)


def _stale(view: StorageView, counts: Counts) -> bool:
    """From the session that created a replacing memory on (the detector judges each write as it
    happens), some session ends with it stored beside the memory it replaced."""
    gold = view.trace.episode.gold_memory
    end = len(view.trace.episode.sessions)
    for key, memory in gold.items():
        since = max(0, view.aligner.created[key])
        for old in memory.replaces:
            if old in gold and any(
                view.stored_at(key, pos) and view.stored_at(old, pos) for pos in range(since, end + 1)
            ):
                return True
    return False


def _leak_retrieval(view: StorageView, counts: Counts) -> bool:
    return counts.get("leak.leaked", 0) > 0


def _leak_answer(view: StorageView, counts: Counts) -> bool:
    return counts.get("permission.deny_leaked", 0) > 0


GOLD: dict[str, tuple[Gold, str]] = {
    "erasure": (_erasure, "removal leaving a still-valid memory in no item, or historical erasure"),
    "destructive_update": (_destructive, "over-update (a still-valid memory dropped by an update)"),
    "stale_coexistence": (_stale, "under-update (superseded memory stored next to its replacement)"),
    "leak_retrieval": (_leak_retrieval, "retrieval leak"),
    "leak_injection": (_leak_answer, "answer leak"),
}


def run_findings(conn: sqlite3.Connection, run_id: str) -> list[Finding] | str:
    """Every detector's findings over the run's events (not stored); a string says why none could
    be computed (an in-memory database, a detector engine error)."""
    from memtap.findings.check import check_trace
    from memtap.trace.store import TraceStore

    row = conn.execute("PRAGMA database_list").fetchone()
    path = row[2] if row else ""
    if not path:
        return "the trace database has no file to read events from"
    store = TraceStore(path, read_only_ok=True)
    try:
        result = check_trace(store, run=run_id, save=False)
    finally:
        store.close()
    if result.detector_errors:  # a rule that raised flagged nothing: its recall would be a lie
        return f"{result.detector_errors} detector error(s); last: {result.last_error}"
    return result.findings


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def detector_report(
    views: Sequence[StorageView],
    counts: Sequence[Counts],
    findings: list[Finding] | str,
    *,
    answered: bool,
    injected: bool = False,
) -> dict[str, Any]:
    """Per-detector episode-level confusion counts, precision and recall. ``injected``: the run is a
    chat agent's (what its memory searches return goes into its prompts)."""
    if isinstance(findings, str):
        return {"unit": "episode", "measured": False, "reason": findings, "detectors": {}}
    by_ns: dict[str, set[str]] = {}
    undetermined: dict[str, int] = {}
    outside: dict[str, int] = {}
    view_of = {view.trace.namespace: view for view in views}
    for finding in findings:
        view = view_of.get(finding.namespace) if finding.namespace is not None else None
        if finding.evidence.get("judged") is False:  # "could not judge" is no verdict either way
            undetermined[finding.kind] = undetermined.get(finding.kind, 0) + 1
        elif view is not None and finding.item_ids and all(map(view.outside_gold, finding.item_ids)):
            outside[finding.kind] = outside.get(finding.kind, 0) + 1  # the gold cannot judge it
        elif finding.namespace is not None:
            by_ns.setdefault(finding.namespace, set()).add(finding.kind)
    out: dict[str, Any] = {}
    not_measured: dict[str, str] = {}
    for kind, (gold, label) in GOLD.items():
        if kind == "leak_injection" and not answered:
            not_measured[kind] = "the run has no answers"
            continue
        if kind == "leak_injection" and not injected:
            # The answers are the replay reader's, not chat replies recorded in the trace: no
            # detector can see them, so an answer leak there is no miss of this one.
            not_measured[kind] = "the answers are the replay's reader's, not chat replies in the trace"
            continue
        if kind == "leak_injection" and injected:
            label = "answer leak, or retrieval leak (a chat agent injects what it retrieves)"
        tp = fp = fn = tn = 0
        for view, c in zip(views, counts, strict=True):
            truth = gold(view, c) or (kind == "leak_injection" and injected and _leak_retrieval(view, c))
            flagged = kind in by_ns.get(view.trace.namespace, set())
            tp += truth and flagged
            fp += flagged and not truth
            fn += truth and not flagged
            tn += not truth and not flagged
        out[kind] = {
            "gold": label,
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "tn": tn,
            "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + fn),
            "undetermined": undetermined.get(kind, 0),
            "outside_gold": outside.get(kind, 0),
        }
    report: dict[str, Any] = {
        "unit": "episode",
        "measured": True,
        "findings": len(findings),
        "detectors": out,
    }
    if not_measured:
        report["not_measured"] = not_measured
    return report
