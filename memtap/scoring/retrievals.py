"""``memtap compare RUN_A RUN_B --retrievals``: what each run's backend returned, probe by probe.

For two runs of the same episodes (two targets fed the same suite, or the same recorded traffic
through ``replay --from-trace``), each probe both answered is paired by episode and probe id.
A retrieved item is compared by its content as the trace recorded it at retrieval time
(the ``retrieve`` effects of the probe's own calls), case and surrounding space folded, so two
backends that keep the same text under different ids agree. Per probe:

- ``overlap_at_k``: the contents both top-k lists hold, over the longer of the two top-k lists
  (1.0 when both returned nothing);
- ``same_first``: whether both put the same content first;
- ``only_a`` / ``only_b``: the contents only one of them returned in its top k;
- ``ms_a`` / ``ms_b``: each probe's retrieval time as the replay measured it;
- ``gate_a`` / ``gate_b``: the access gate's verdict on the probe's retrieval as recorded (for
  example ``observe:would-deny=1``; None when the gate had nothing to say or did not run);
- ``refused_a`` / ``refused_b``: the target's error when it refused the retrieval (None when not).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections.abc import Iterable
from typing import Any

from memtap.scoring.errors import ScoringError

__all__ = ["RETRIEVALS_FORMAT", "compare_retrievals", "format_ms", "median_ms", "render_retrievals"]

RETRIEVALS_FORMAT = "memtap-compare-retrievals/1"


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _probes(conn: sqlite3.Connection, run: str) -> dict[tuple[str, str], dict[str, Any]]:
    rows = conn.execute(
        "SELECT episode_id, probe_id, attempt, retrieved, retrieve_ms, status, error FROM run_probes"
        " WHERE run_id = ? ORDER BY attempt",
        [run],
    ).fetchall()
    if not rows:
        raise ScoringError(f"run {run!r} has no answered probes in this database")
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for episode, probe, _attempt, retrieved, ms, status, error in rows:  # the latest attempt wins
        found[(episode, probe)] = {"ids": json.loads(retrieved), "ms": ms, "status": status, "error": error,
                                   "gate": None}  # fmt: skip
    for episode, probe, gate in conn.execute(  # the gate's verdict on the probe's retrievals, the latest
        "SELECT episode, turn, gate FROM events WHERE run_id = ? AND session = 'probes' AND op = 'retrieve'"
        " AND gate IS NOT NULL ORDER BY id",
        [run],
    ):
        if (episode, probe) in found:
            found[(episode, probe)]["gate"] = gate
    contents: dict[str, str] = {}
    for item, content in conn.execute(
        "SELECT f.item_id, f.content_after FROM events e JOIN effects f ON f.event_id = e.id"
        " WHERE e.run_id = ? AND f.kind = 'retrieve' AND f.content_after IS NOT NULL",
        [run],
    ):
        contents[item] = content
    for probe in found.values():
        probe["contents"] = [_fold(contents.get(i, i)) for i in probe["ids"]]
    return found


def compare_retrievals(
    conn_a: sqlite3.Connection, run_a: str, conn_b: sqlite3.Connection, run_b: str, *, k: int = 5
) -> dict[str, Any]:
    a, b = _probes(conn_a, run_a), _probes(conn_b, run_b)
    shared = [key for key in a if key in b]
    if not shared:
        raise ScoringError(f"runs {run_a} and {run_b} answered no probe in common; nothing to pair")
    probes = []
    for episode, probe in shared:
        top_a, top_b = a[(episode, probe)]["contents"][:k], b[(episode, probe)]["contents"][:k]
        both = set(top_a) & set(top_b)
        longest = max(len(set(top_a)), len(set(top_b)))
        probes.append({
            "episode": episode, "probe": probe,
            "overlap_at_k": 1.0 if longest == 0 else len(both) / longest,
            "same_first": bool(top_a and top_b and top_a[0] == top_b[0]) or not (top_a or top_b),
            "only_a": [c for c in top_a if c not in both], "only_b": [c for c in top_b if c not in both],
            "ms_a": a[(episode, probe)]["ms"], "ms_b": b[(episode, probe)]["ms"],
            "gate_a": a[(episode, probe)]["gate"], "gate_b": b[(episode, probe)]["gate"],
            "refused_a": _refused(a[(episode, probe)]), "refused_b": _refused(b[(episode, probe)]),
        })  # fmt: skip
    return {
        "format": RETRIEVALS_FORMAT,
        "runs": {"a": run_a, "b": run_b},
        "k": k,
        "paired": len(probes),
        "unpaired": {"a": len(a) - len(shared), "b": len(b) - len(shared)},
        "mean_overlap_at_k": statistics.fmean(p["overlap_at_k"] for p in probes),
        "same_first_rate": sum(p["same_first"] for p in probes) / len(probes),
        "median_ms": {side: median_ms(p[f"ms_{side}"] for p in probes) for side in ("a", "b")},
        "probes": probes,
    }


def render_retrievals(result: dict[str, Any]) -> str:
    runs, k = result["runs"], result["k"]
    ms = result["median_ms"]
    lines = [
        f"retrievals of {runs['a']} (A) and {runs['b']} (B): {result['paired']} probes paired, "
        f"mean overlap@{k} {result['mean_overlap_at_k']:.2f}, same first {result['same_first_rate']:.0%}, "
        f"median retrieval ms A {format_ms(ms['a'])} B {format_ms(ms['b'])}",
    ]
    for p in result["probes"]:
        lines.append(f"{p['episode']} {p['probe']}: overlap@{k} {p['overlap_at_k']:.2f}"
                     f"{'' if p['same_first'] else ', different first'}")  # fmt: skip
        for side in ("a", "b"):
            if p[f"refused_{side}"]:
                lines.append(f"  {side.upper()} refused: {p[f'refused_{side}']}")
        gates = (p["gate_a"], p["gate_b"])
        if gates[0] != gates[1] or any(g and not g.endswith(":allow") for g in gates):
            lines.append(f"  gate A: {gates[0] or '-'}, B: {gates[1] or '-'}")
        lines.extend(f"  only A: {c}" for c in p["only_a"])
        lines.extend(f"  only B: {c}" for c in p["only_b"])
    return "\n".join(lines)


def _refused(probe: dict[str, Any]) -> str | None:
    return None if probe["status"] == "ok" else str(probe["error"] or probe["status"])


def median_ms(values: Iterable[float | None]) -> float | None:
    """The median of the measured times (None ones left out); None when none was measured."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
