"""Chart specifications from a score file (memtap-score/1) and a comparison (memtap-compare/1).

Each spec is plain data that ``static/charts.js`` hands to Chart.js: the run page and the static
report draw the same charts from the same specs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compare_charts", "headline_rows", "score_charts"]

Spec = dict[str, Any]


def _bar(chart_id: str, title: str, labels: list[str], series: dict[str, list[Any]], **extra: Any) -> Spec:
    return {"id": chart_id, "title": title, "type": "bar", "labels": labels, "series": series, **extra}


def headline_rows(score: dict[str, Any]) -> list[dict[str, Any]]:
    # Imported here, not at module level: the dashboard is mounted in every `memtap serve`, which
    # then starts without the scoring package until a run page is opened.
    from memtap.scoring.measures import HEADLINE

    measures = score["measures"]
    return [{"level": m.level, "name": m.name, **measures[m.name]} for m in HEADLINE if m.name in measures]


def score_charts(score: dict[str, Any]) -> list[Spec]:
    """Headline measures with intervals, accuracy by probe type and paradigm, plasticity against
    stability (the run and the shortcut baselines), failure attribution by level, latency."""
    charts: list[Spec] = []
    # Rates and proportions on one 0..1 axis (a rank or a count would flatten the rest).
    rows = [r for r in headline_rows(score) if r["value"] is not None and 0 <= r["value"] <= 1]
    charts.append(
        _bar(
            "headline",
            "Headline rates (95% interval)",
            [r["name"] for r in rows],
            {"value": [r["value"] for r in rows]},
            intervals=[r["ci"] for r in rows],
        )
    )
    breakdowns = score.get("breakdowns", {})
    for key, label in (("accuracy_by_probe_type", "probe type"), ("accuracy_by_paradigm", "paradigm")):
        data = breakdowns.get(key) or {}
        if data:
            charts.append(
                _bar(
                    key,
                    f"Answer accuracy by {label}",
                    list(data),
                    {"accuracy": [m["value"] for m in data.values()]},
                    intervals=[m["ci"] for m in data.values()],
                )
            )
    measures = score["measures"]
    points = []
    if measures.get("plasticity", {}).get("value") is not None:
        points.append(
            {
                "label": f"run {score['run']['id']}",
                "x": measures["stability"]["value"],
                "y": measures["plasticity"]["value"],
                "baseline": False,
            }
        )
    for name, b in (score.get("baselines") or {}).items():
        if b["plasticity"]["value"] is not None and b["stability"]["value"] is not None:
            points.append(
                {"label": name, "x": b["stability"]["value"], "y": b["plasticity"]["value"], "baseline": True}
            )
    if points:
        charts.append(
            {"id": "plasticity", "title": "Plasticity against stability", "type": "scatter", "points": points}
        )
    attribution = score.get("attribution") or {}
    if attribution.get("total"):
        levels = list(attribution["levels"])
        charts.append(
            _bar(
                "attribution",
                f"Failure attribution ({attribution['total']} wrong answers, first level that failed)",
                levels,
                {"wrong answers": [attribution["by_level"][lv] for lv in levels]},
            )
        )
    latency = {k: v for k, v in (score.get("latency") or {}).items() if v.get("n")}
    if latency:
        charts.append(
            _bar(
                "latency",
                "Latency (ms)",
                list(latency),
                {"p50": [v["p50"] for v in latency.values()], "p95": [v["p95"] for v in latency.values()]},
            )
        )
    return charts


def compare_charts(result: dict[str, Any]) -> list[Spec]:
    names = [n for n, m in result["measures"].items() if m["difference"]["value"] is not None]
    return [
        _bar(
            "difference",
            f"B ({result['b']['run']}) minus A ({result['a']['run']}), 95% interval",
            names,
            {"B - A": [result["measures"][n]["difference"]["value"] for n in names]},
            intervals=[result["measures"][n]["difference"]["ci"] for n in names],
        )
    ]
