"""Score a replayed run from its trace database, and store the score file in it.

:func:`score_run` reads the run back (``trace.load_run``), aligns and counts every episode at
the three levels, attributes each wrong answer, tallies the shortcut baselines, and bootstraps
every measure over episodes. The result is the score file (``memtap-score/1``, see
``docs/scoring.md`` and ``memtap/scoring/memtap-score-1.schema.json``). :func:`store_score`
writes it to ``scores`` and its alignment decisions to ``alignments``.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtap import __version__
from memtap.findings.model import Finding
from memtap.probes.schema import Probe
from memtap.scoring.align import Aligner, DefaultMatcher, Matcher, describe_rows
from memtap.scoring.answer import Verdict
from memtap.scoring.canary import canary_report, canary_warnings
from memtap.scoring.detectors import detector_report, run_findings
from memtap.scoring.measures import HEADLINE, baseline_measures, breakdown_measures
from memtap.scoring.permission import LABELS, classify_permission
from memtap.scoring.profiles import BASELINES, CATEGORIES, LEVELS, attribute, tally_answer, tally_baselines
from memtap.scoring.retrieval import score_retrieval
from memtap.scoring.scorers import AnswerScorer, Choice, choose_scorer
from memtap.scoring.stats import RESAMPLES, SEED, bootstrap, resample_weights
from memtap.scoring.storage import StorageView
from memtap.scoring.trace import Counts, RunTrace, load_run, new_counts, suite_file_sha256

__all__ = ["FORMAT", "Scored", "latest_score", "score_run", "score_trace", "store_score"]

FORMAT = "memtap-score/1"
PermissionJudge = Callable[[Probe, dict[str, Any] | None], tuple[str, str]]


@dataclass
class Scored:
    report: dict[str, Any]
    alignments: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (episode, row)


def _unanswered(record_status: str | None, answer: Any) -> Verdict | None:
    if record_status is None:
        return Verdict("incorrect", "unanswered: no answer row for this probe")
    if record_status != "ok":
        return Verdict("incorrect", f"unanswered: probe status {record_status}")
    if answer is None:
        return Verdict("incorrect", "unanswered: empty answer")
    return None


def _verdict(scorer: AnswerScorer, trace: Any, record: Any, unscored: Counter[str]) -> Verdict:
    """A probe of a type the scorer does not know is skipped (answered or not); else an unanswered
    probe is incorrect; else the scorer's verdict."""
    probe = record.probe
    if scorer.types is not None and probe.type not in scorer.types:
        unscored[probe.type] += 1
        return Verdict("skip", f"answer scorer {scorer.name} does not score probe type {probe.type}")
    return _unanswered(record.status, record.answer) or scorer.score(trace.episode, probe, record.answer)


def _episode(
    trace: Any,
    matcher: Matcher,
    scorer: AnswerScorer,
    answered: bool,
    attribution: list[dict[str, Any]],
    unscored: Counter[str],
) -> tuple[Counts, list[dict[str, Any]], list[dict[str, object]], list[dict[str, Any]], StorageView]:
    aligner = Aligner(trace.episode, matcher)
    view = StorageView.build(trace, aligner)
    counts = view.counts
    probes: list[dict[str, Any]] = []
    for record in trace.probes:
        found = score_retrieval(view, record, counts)
        row: dict[str, Any] = {
            "probe": record.probe.probe_id,
            "type": record.probe.type,
            "support_found": sorted(found.support_found),
            "leaks": [f"{item}: {why}" for item, why in found.leaked_items],
        }
        if answered:
            verdict = _verdict(scorer, trace, record, unscored)
            if verdict.reason.startswith("unanswered"):
                counts["answer.unanswered"] += 1
            tally_answer(trace.episode, record, verdict, counts)
            row.update({"outcome": verdict.outcome, "reason": verdict.reason})
            if verdict.outcome in ("incorrect", "partial"):
                level, category = attribute(view, record, found, verdict)
                counts[f"attr.{level}.{category}"] += 1
                row["attribution"] = [level, category]
                attribution.append(
                    {
                        "episode": trace.episode.episode_id,
                        "probe": record.probe.probe_id,
                        "level": level,
                        "category": category,
                    }
                )
        probes.append(row)
    tally_baselines(trace.episode, counts)
    return counts, probes, view.sessions, describe_rows(aligner.rows), view


def _attribution_table(counts: Counts) -> dict[str, Any]:
    table = {c: {lv: int(counts.get(f"attr.{lv}.{c}", 0)) for lv in LEVELS} for c in CATEGORIES}
    by_level = {lv: sum(row[lv] for row in table.values()) for lv in LEVELS}
    return {
        "levels": list(LEVELS),
        "categories": list(CATEGORIES),
        "counts": table,
        "by_level": by_level,
        "total": sum(by_level.values()),
    }


def score_trace(
    run: RunTrace,
    *,
    matcher: Matcher | None = None,
    permission_judge: PermissionJudge | None = None,
    answer_scorer: Choice | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    findings: list[Finding] | str | None = None,
) -> Scored:
    """``findings``: the detectors' findings over the run (or why there are none), measured
    against the gold in the score file's ``detectors``; None leaves that key out."""
    matcher = matcher or DefaultMatcher()
    judge = permission_judge or classify_permission
    choice = answer_scorer or choose_scorer(None, [t.episode for t in run.episodes], judge=judge)
    unscored: Counter[str] = Counter()
    answered = run.answered
    per_episode: list[Counts] = []
    detail: list[dict[str, Any]] = []
    wrong: list[dict[str, Any]] = []
    alignments: list[tuple[str, dict[str, Any]]] = []
    views: list[StorageView] = []
    for trace in run.episodes:
        counts, probes, sessions, rows, view = _episode(
            trace, matcher, choice.scorer, answered, wrong, unscored
        )
        per_episode.append(counts)
        views.append(view)
        detail.append({"episode": trace.episode.episode_id, "sessions": sessions, "probes": probes})
        alignments += [(trace.episode.episode_id, r) for r in rows]
    totals: Counts = new_counts()
    for counts in per_episode:
        for name, value in counts.items():
            totals[name] += value
    weights = resample_weights(len(per_episode), resamples, seed) if per_episode else None
    measures = bootstrap(HEADLINE, per_episode, weights)
    if not answered:
        for m in HEADLINE:
            if m.level in ("answer", "profile"):
                measures[m.name] = {"value": None, "ci": None, "n": 0}
    names = list(totals)
    breakdowns = {
        "accuracy_by_probe_type": bootstrap(breakdown_measures("type", names), per_episode, weights),
        "accuracy_by_paradigm": bootstrap(breakdown_measures("paradigm", names), per_episode, weights),
        "permission_labels": {label: int(totals.get(f"permission.label.{label}", 0)) for label in LABELS},
    }
    baselines = {name: bootstrap(baseline_measures(name), per_episode, weights) for name in BASELINES}
    coverage = dict(run.coverage)
    coverage["probes_unanswered"] = int(totals.get("answer.unanswered", 0)) if answered else None
    coverage["probes_without_gold"] = int(totals.get("answer.skipped", 0))
    coverage["answers_scored"] = answered
    warnings = list(run.warnings) + canary_warnings(run.canary)
    if not answered and per_episode:  # a canary-only run has no answers to miss
        warnings.append(
            f"run {run.run['id']} has no answers (reader {run.run['reader']}): answer-level measures and "
            "profiles are not measured"
        )
    elif coverage["probes_unanswered"]:
        warnings.append(f"{coverage['probes_unanswered']} probe(s) have no answer and count as wrong")
    if answered:
        for kind, n in sorted(unscored.items()):
            warnings.append(
                f"answer scorer {choice.scorer.name} does not score probe type {kind}: {n} probe(s) skipped"
            )
    report = {
        "format": FORMAT,
        "memtap": __version__,
        "created_at": datetime.now(UTC).isoformat(),
        "run": run.run,
        "matcher": getattr(matcher, "name", "custom"),
        "permission_judge": "rules" if judge is classify_permission else "llm",
        "answer_scorer": choice.describe(),
        "bootstrap": {"resamples": resamples, "seed": seed, "unit": "episode", "interval": 0.95},
        "coverage": coverage,
        "warnings": warnings,
        "measures": measures,
        "breakdowns": breakdowns,
        "baselines": baselines,
        "attribution": _attribution_table(totals),
        "latency": run.latency,
        "episodes": {
            "ids": [t.episode.episode_id for t in run.episodes],
            "counts": [dict(sorted(c.items())) for c in per_episode],
            "probes": detail,
        },
        "wrong_answers": wrong,
        "canary": run.canary,
    }
    if findings is not None:
        injected = str(run.run.get("target", "")).startswith("openai:")
        report["detectors"] = detector_report(
            views, per_episode, findings, answered=answered, injected=injected
        )
    return Scored(report, alignments)


def score_run(
    conn: sqlite3.Connection,
    run_id: str,
    *,
    matcher: Matcher | None = None,
    permission_judge: PermissionJudge | None = None,
    answer_scorer: str | None = None,
    config: Path | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Scored:
    """Score a run; ``answer_scorer`` names the answer scorer (None: by the suite's origin)."""
    row = conn.execute("SELECT suite_path FROM runs WHERE id = ?", (run_id,)).fetchone()
    current = suite_file_sha256(row[0]) if row else None
    run = load_run(conn, run_id, current_sha256=current)
    run.canary = canary_report(conn, run_id, run.canary_attempts)
    choice = choose_scorer(answer_scorer, [t.episode for t in run.episodes], config, permission_judge)
    scored = score_trace(
        run,
        matcher=matcher,
        permission_judge=permission_judge,
        answer_scorer=choice,
        resamples=resamples,
        seed=seed,
        findings=run_findings(conn, run_id),
    )
    from memtap.hw.figures import replay_figures  # the run's hardware figures, when it was probed

    energy = replay_figures(conn, run_id)
    if energy is not None:
        scored.report["energy"] = energy
    return scored


def store_score(conn: sqlite3.Connection, scored: Scored) -> int:
    """Write the score file and its alignment decisions in one transaction; returns the score id."""
    report = scored.report
    conn.execute("BEGIN IMMEDIATE")
    try:
        cursor = conn.execute(
            "INSERT INTO scores (run_id, created_at, format, matcher, json) VALUES (?, ?, ?, ?, ?)",
            (
                report["run"]["id"],
                report["created_at"],
                report["format"],
                report["matcher"],
                json.dumps(report),
            ),
        )
        score_id = int(cursor.lastrowid or 0)
        conn.executemany(
            "INSERT INTO alignments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    score_id,
                    report["run"]["id"],
                    episode,
                    r["item_id"],
                    r["version"],
                    r["gold_key"],
                    int(r["matched"]),
                    r["gold_coverage"],
                    r["item_coverage"],
                    r["reason"],
                )
                for episode, r in scored.alignments
            ],
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return score_id


def latest_score(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT json FROM scores WHERE run_id = ? ORDER BY id DESC LIMIT 1", (run_id,)
    ).fetchone()
    return json.loads(row[0]) if row else None
