"""The score file as a terminal table and as Markdown; the compare table likewise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memtap.scoring.measures import HEADLINE

__all__ = ["render_compare", "render_score"]

LEVEL_TITLES = {"storage": "storage", "retrieval": "retrieval", "answer": "answer", "profile": "profile"}


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _ci(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    cells = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _heading(text: str, markdown: bool) -> str:
    return f"## {text}" if markdown else f"\n{text}"


def _baseline_row(name: str, b: dict[str, Any]) -> list[str]:
    acc = b["accuracy"]
    return [name, _num(acc["value"]), _ci(acc["ci"]), _num(b["plasticity"]["value"]),
            _num(b["stability"]["value"]), _num(b["sp_balance"]["value"]), str(acc["n"])]  # fmt: skip


def render_score(report: dict[str, Any], *, markdown: bool = False) -> str:
    run, cov = report["run"], report["coverage"]
    scorer = report.get("answer_scorer") or {"name": "strict", "version": "1"}
    title = (
        f"Score of run {run['id']} (target {run['target']}, reader {run['reader']}, matcher "
        f"{report['matcher']}, answer scorer {scorer['name']} {scorer['version']}): "
        f"{cov['episodes_scored']} of {cov['episodes_total']} episodes scored"
        + (f" ({cov['episodes_canary']} canary)" if cov.get("episodes_canary") else "")
        + f", {cov['probes_total']} probes; 95% intervals from {report['bootstrap']['resamples']} episode "
        "resamples"
    )
    parts = [f"# {title}" if markdown else title]
    measures = report["measures"]
    rows = [
        [
            m.level,
            m.name,
            _num(measures[m.name]["value"]),
            _ci(measures[m.name]["ci"]),
            str(measures[m.name]["n"]),
        ]
        for m in HEADLINE
    ]
    parts.append(_table(["level", "measure", "value", "95% CI", "n"], rows, markdown))
    breakdowns = report["breakdowns"]
    for key, label in (("accuracy_by_probe_type", "probe type"), ("accuracy_by_paradigm", "paradigm")):
        if breakdowns[key]:
            parts.append(_heading(f"Answer accuracy by {label}", markdown))
            parts.append(
                _table(
                    [label, "accuracy", "95% CI", "n"],
                    [
                        [name, _num(m["value"]), _ci(m["ci"]), str(m["n"])]
                        for name, m in breakdowns[key].items()
                    ],
                    markdown,
                )
            )
    labels = breakdowns["permission_labels"]
    if any(labels.values()):
        parts.append(_heading("Permission labels", markdown))
        parts.append(_table(list(labels), [[str(v) for v in labels.values()]], markdown))
    base = report["baselines"]
    if any(b["accuracy"]["n"] for b in base.values()):
        parts.append(
            _heading(
                "Shortcut baselines (current_value and change_detection of the four paradigms; chance 0.5)",
                markdown,
            )
        )
        parts.append(
            _table(
                ["baseline", "accuracy", "95% CI", "plasticity", "stability", "sp_balance", "n"],
                [_baseline_row(name, b) for name, b in base.items()],
                markdown,
            )
        )
    attribution = report["attribution"]
    if attribution["total"]:
        parts.append(
            _heading(
                f"Failure attribution ({attribution['total']} wrong answers, first level that failed)",
                markdown,
            )
        )
        levels = attribution["levels"]
        rows = [
            [category, *[str(counts[lv]) for lv in levels]]
            for category, counts in attribution["counts"].items()
            if any(counts.values())
        ]
        rows.append(["total", *[str(attribution["by_level"][lv]) for lv in levels]])
        parts.append(_table(["category", *levels], rows, markdown))
    if report.get("canary"):
        parts += _canary_parts(report["canary"], markdown)
    if report.get("detectors"):
        parts += _detector_parts(report["detectors"], markdown)
    latency = report["latency"]
    parts.append(_heading("Latency (ms)", markdown))
    parts.append(
        _table(
            ["what", "p50", "p95", "n"],
            [[name, _num(v["p50"]), _num(v["p95"]), str(v["n"])] for name, v in latency.items()],
            markdown,
        )
    )
    if report.get("energy"):
        from memtap.hw.render import render_replay_figures

        parts.append(_heading("Hardware (--hw-probe)", markdown))
        parts.append("\n".join(line.strip() for line in render_replay_figures(report["energy"])))
    if report["warnings"]:
        parts.append(_heading("Warnings", markdown))
        parts.append("\n".join(f"- {w}" for w in report["warnings"]))
    return ("\n\n" if markdown else "\n").join(parts)


def _detector_parts(det: dict[str, Any], markdown: bool) -> list[str]:
    """Each findings detector's precision and recall against the gold (episode level)."""
    head = _heading("Detectors against the gold (per episode)", markdown)
    if not det.get("measured"):
        return [head, f"not measured: {det.get('reason')}"]
    rows = [
        [
            kind,
            _num(d["precision"]),
            _num(d["recall"]),
            str(d["tp"]),
            str(d["fp"]),
            str(d["fn"]),
            str(d["tn"]),
            str(d.get("outside_gold", 0)),  # older score files lack it
            d["gold"],
        ]
        for kind, d in det["detectors"].items()
    ]
    parts = [
        head,
        _table(
            ["detector", "precision", "recall", "tp", "fp", "fn", "tn", "outside gold", "gold"],
            rows,
            markdown,
        ),
    ]
    parts += [f"{kind}: not measured ({why})" for kind, why in det.get("not_measured", {}).items()]
    return parts


def _canary_parts(canary: dict[str, Any], markdown: bool, shown: int = 20) -> list[str]:
    """The isolation canary: cross reads per channel, escape attempts, writes, and the pairs that leaked."""
    channels = canary["by_channel"]
    esc, w, own = canary["escapes"], canary["writes"], canary["own_canaries"]
    acknowledged = "every write acknowledged" if w["all_acknowledged"] else "NOT every write acknowledged"
    lines = [
        f"cross_reads {canary['cross_reads']} of {canary['pairs_total']} pairs "
        f"(N x (N - 1), {canary['users']} users)",
        "by channel: "
        + ", ".join(f"{c} {v['pairs']} pairs / {v['events']} events" for c, v in channels.items()),
        f"escape attempts: {esc['attempted']}, refused {esc['refused']}, "
        f"disclosed a canary {esc['disclosed']}",
        f"writes: {w['in_suite']} in the suite, {w['sent']} sent, {w['acknowledged']} acknowledged, "
        f"{w['recorded']} recorded, {w['refused_recorded']} refused: {acknowledged}",
        f"own canaries found by their owners: {own['seen']} of {own['total']}",
    ]
    parts = [
        _heading("Isolation canary", markdown),
        "\n".join(f"- {line}" if markdown else line for line in lines),
    ]
    rows = [
        [
            p["reader"],
            p["owner"],
            channel,
            str(len(ids)),
            ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else ""),
        ]
        for part in canary["episodes"]
        for p in part["pairs"]
        for channel, ids in p["events"].items()
    ]
    if rows:
        parts.append(_table(["reader", "owner", "channel", "events", "event ids"], rows[:shown], markdown))
        if len(rows) > shown:
            parts.append(f"({len(rows) - shown} more rows in the score file: canary.episodes[].pairs)")
    return parts


def render_compare(result: dict[str, Any], *, markdown: bool = False) -> str:
    title = (
        f"Paired comparison: B = {result['b']['run']} minus A = {result['a']['run']} over "
        f"{result['paired_episodes']} shared episodes; 95% intervals from {result['bootstrap']['resamples']} "
        "paired episode resamples"
    )
    rows = []
    for name, m in result["measures"].items():
        d = m["difference"]
        flag = "*" if d["ci"] and (d["ci"][0] > 0 or d["ci"][1] < 0) else ""
        diff = "-" if d["value"] is None else f"{d['value']:+.3f}{flag}"
        rows.append([name, _num(m["a"]), _num(m["b"]), diff, _ci(d["ci"]), str(d["n"])])
    parts = [f"# {title}" if markdown else title]
    parts.append(_table(["measure", "A", "B", "B - A", "95% CI", "n"], rows, markdown))
    parts.append("(* the interval excludes 0)")
    for warning in result["warnings"]:
        parts.append(f"- {warning}")
    return ("\n\n" if markdown else "\n").join(parts)
