"""The hardware figures of probed runs, read back from the trace database: per replay run
(energy per query, per ingested session, per episode, baseline, peak temperature) and per chat
call (energy, mean power, and the split of its time into memory search, proxy and model).

Quantities: ``energy_j`` (the GPUs, summed; from each device's energy counter where it has one,
else its integrated power), ``host_cpu_s`` (host busy core-seconds) and ``memtap_cpu_s`` (this
memtap process's CPU seconds). Calls share them as ``attribution.py`` says; queries among
queries, episodes among episodes. A run's ingest is its episodes less their queries.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memtap.hw.attribution import Point, Segment, Share, attribute, baseline_rate, integrate, segments

__all__ = ["QUANTITIES", "HwRuns", "chat_figures", "replay_figures", "to_ts"]

QUANTITIES = {
    "energy_j": ("power_w", "energy_j"),
    "host_cpu_s": (None, "cpu_busy_s"),
    "memtap_cpu_s": (None, "proc_cpu_s"),
}
"""quantity: (rate column, counter column) of ``hw_samples``."""


def to_ts(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class HwRuns:
    """The samples of some hw runs, as segments per (run, device) and quantity."""

    def __init__(self, conn: sqlite3.Connection, run_ids: Sequence[str]) -> None:
        previous, conn.row_factory = conn.row_factory, sqlite3.Row
        self.runs = [
            dict(conn.execute("SELECT * FROM hw_runs WHERE id = ?", (r,)).fetchone()) for r in run_ids
        ]
        self.devices = [
            dict(row, info=json.loads(row["info"]))
            for r in run_ids
            for row in conn.execute("SELECT * FROM hw_devices WHERE run_id = ? ORDER BY device", (r,))
        ]
        self.rows: dict[tuple[str, str], list[sqlite3.Row]] = {}
        for d in self.devices:
            self.rows[(d["run_id"], d["device"])] = list(
                conn.execute(
                    "SELECT * FROM hw_samples WHERE run_id = ? AND device = ? ORDER BY ts",
                    (d["run_id"], d["device"]),
                )
            )
        conn.row_factory = previous

    def gpus(self) -> list[dict[str, Any]]:
        return [d for d in self.devices if d["kind"] == "gpu"]

    def series(self, quantity: str, *, use: str = "best") -> list[tuple[dict[str, Any], list[Segment]]]:
        """(hw run, segments) per device that carries ``quantity``."""
        rate, counter = QUANTITIES[quantity]
        kind = "gpu" if quantity == "energy_j" else "host"
        runs = {r["id"]: r for r in self.runs}
        out = []
        for d in self.devices:
            if d["kind"] != kind:
                continue
            points = [
                Point(row["ts"], row[rate] if rate else None, row[counter])
                for row in self.rows[(d["run_id"], d["device"])]
            ]
            out.append((runs[d["run_id"]], segments(points, use=use)))
        return out

    def attribute(
        self, quantity: str, calls: Sequence[tuple[str, float, float]]
    ) -> tuple[dict[str, Share], float | None]:
        """Each call's share of ``quantity`` over every device, and the idle baseline rate summed
        over devices (averaged over the runs, for a resumed replay; None when none was measured)."""
        total = {key: Share(duration_s=max(0.0, end - start)) for key, start, end in calls}
        per_run: dict[str, float] = {}
        for run, segs in self.series(quantity):
            base = None
            if run["baseline_until_ts"] is not None:
                base = baseline_rate(segs, run["started_ts"], run["baseline_until_ts"])
            if base is not None:
                per_run[run["id"]] = per_run.get(run["id"], 0.0) + base
            for key, share in attribute(segs, calls, base or 0.0).items():
                t = total[key]
                t.gross += share.gross
                t.net += share.net
                t.covered_s = max(t.covered_s, share.covered_s)
        return total, sum(per_run.values()) / len(per_run) if per_run else None

    def header(self) -> dict[str, Any]:
        """What was probed: the note, devices, sample counts, drops, gaps, peak temperature, mean
        power and utilisation, and the energy counter against integrated power."""
        gpu_rows = [row for d in self.gpus() for row in self.rows[(d["run_id"], d["device"])]]
        temps = [row["temp_c"] for row in gpu_rows if row["temp_c"] is not None]
        utils = [row["gpu_util"] for row in gpu_rows if row["gpu_util"] is not None]
        host_utils = [
            row["cpu_util"]
            for (_, dev), rows in self.rows.items()
            if dev == "host"
            for row in rows
            if row["cpu_util"] is not None
        ]
        counter = integrated = seconds = 0.0
        compared = False
        mean_power = None
        energy_total = energy_s = 0.0
        for (_run, best), (_, by_rate), (_, by_counter) in zip(
            self.series("energy_j"),
            self.series("energy_j", use="rate"),
            self.series("energy_j", use="counter"),
            strict=True,
        ):
            amount, secs = integrate(best)
            energy_total += amount
            energy_s = max(energy_s, secs)
            if any(s.amount is not None for s in by_counter):
                compared = True
                both = [
                    (r, c)
                    for r, c in zip(by_rate, by_counter, strict=True)
                    if r.amount is not None and c.amount is not None
                ]
                integrated += sum(r.amount or 0.0 for r, _ in both)
                counter += sum(c.amount or 0.0 for _, c in both)
                seconds = max(seconds, sum(r.t1 - r.t0 for r, _ in both))
        if energy_s > 0:
            mean_power = energy_total / energy_s
        return {
            "hw_runs": [r["id"] for r in self.runs],
            "note": self.runs[0]["note"] if self.runs else None,
            "interval_ms": self.runs[0]["interval_ms"] if self.runs else None,
            "devices": [
                {"device": d["device"], "kind": d["kind"], "name": d["name"], **d["info"]}
                for d in self.devices
            ],
            "samples": sum(r["samples"] for r in self.runs),
            "dropped": sum(r["dropped"] for r in self.runs),
            "gaps": sum(r["gaps"] for r in self.runs),
            "sampler_cpu_s": _r(sum(r["sampler_cpu_s"] or 0.0 for r in self.runs)),
            "wall_s": _r(sum((r["ended_ts"] or r["started_ts"]) - r["started_ts"] for r in self.runs), 3),
            "peak_temp_c": max(temps) if temps else None,
            "gpu_util_mean": _r(sum(utils) / len(utils), 2) if utils else None,
            "host_cpu_util_mean": _r(sum(host_utils) / len(host_utils), 2) if host_utils else None,
            "mean_power_w": _r(mean_power, 3),
            "energy_counter_vs_power": {
                "counter_j": _r(counter, 3),
                "integrated_j": _r(integrated, 3),
                "seconds": _r(seconds, 3),
                "difference_pct": _r(100 * (integrated - counter) / counter, 3) if counter else None,
            }
            if compared
            else None,
        }


def _figures(
    hw: HwRuns, calls: Sequence[tuple[str, float, float]]
) -> tuple[dict[str, dict[str, Share]], dict[str, float | None]]:
    shares, baselines = {}, {}
    for quantity in QUANTITIES:
        if not hw.series(quantity):
            continue
        shares[quantity], baselines[quantity] = hw.attribute(quantity, calls)
    return shares, baselines


def replay_figures(
    conn: sqlite3.Connection, run_id: str, *, per_probe: bool = False
) -> dict[str, Any] | None:
    """Energy and CPU per query, per ingested session and per episode of a replay run (with
    ``per_probe``, each probe's too), or None when it was not probed."""
    have = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'hw_runs'").fetchone()
    if not have:
        return None
    run_ids = [
        r[0]
        for r in conn.execute("SELECT id FROM hw_runs WHERE replay_run_id = ? ORDER BY started_ts", (run_id,))
    ]
    if not run_ids:
        return None
    hw = HwRuns(conn, run_ids)
    probes = [
        (f"{e}/{a}/{p}", to_ts(at) - (ms or 0.0) / 1000, to_ts(at))
        for e, a, p, at, ms in conn.execute(
            "SELECT episode_id, attempt, probe_id, answered_at, latency_ms FROM run_probes WHERE run_id = ?",
            (run_id,),
        )
    ]
    episodes = [
        (f"{e}/{a}", to_ts(start), to_ts(end), done)
        for e, a, start, end, done in conn.execute(
            "SELECT episode_id, attempt, started_at, ended_at, sessions_done FROM run_episodes"
            " WHERE run_id = ? AND ended_at IS NOT NULL",
            (run_id,),
        )
    ]
    sessions = sum(e[3] for e in episodes)
    q_shares, baselines = _figures(hw, probes)
    e_shares, _ = _figures(hw, [e[:3] for e in episodes])
    out: dict[str, Any] = {
        **hw.header(),
        "queries": len(probes),
        "sessions": sessions,
        "episodes": len(episodes),
    }
    out["baseline"] = {
        "window_s": _r(_baseline_window(hw), 3),
        **{f"{q}_per_s": _r(b) for q, b in baselines.items()},
    }
    for name in ("per_query", "per_session", "per_episode", "totals"):
        out[name] = {}
    for quantity in q_shares:
        query = sum(s.net for s in q_shares[quantity].values())
        episode = sum(s.net for s in e_shares[quantity].values())
        ingest = episode - query
        out["totals"][quantity] = {"queries": _r(query), "ingest": _r(ingest), "episodes": _r(episode)}
        out["per_query"][quantity] = _r(query / len(probes)) if probes else None
        out["per_session"][quantity] = _r(ingest / sessions) if sessions else None
        out["per_episode"][quantity] = _r(episode / len(episodes)) if episodes else None
    if per_probe:
        out["probes"] = [
            {
                "probe": key,
                "seconds": _r(end - start, 6),
                **{q: _r(q_shares[q][key].net, 6) for q in q_shares},
                **(
                    {"mean_power_w": _r(q_shares["energy_j"][key].mean_rate, 3)}
                    if "energy_j" in q_shares
                    else {}
                ),
            }
            for key, start, end in probes
        ]
    return out


def _baseline_window(hw: HwRuns) -> float | None:
    windows = [
        r["baseline_until_ts"] - r["started_ts"] for r in hw.runs if r["baseline_until_ts"] is not None
    ]
    return sum(windows) / len(windows) if windows else None


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def chat_figures(conn: sqlite3.Connection, hw_run: str, *, limit: int | None = None) -> dict[str, Any]:
    """The chat calls made while ``hw_run`` sampled: each one's time split and energy, and the
    run's summary of both."""
    hw = HwRuns(conn, [hw_run])
    run = hw.runs[0]
    end = run["ended_at"] or datetime.now(UTC).isoformat()
    rows = list(
        conn.execute(
            "SELECT id, started_at, ended_at, model, status, memory_ms, overhead_ms, backend_ms, ttft_ms,"
            " total_ms FROM events WHERE op = 'chat' AND started_at >= ? AND started_at <= ?"
            " ORDER BY started_at",
            (run["started_at"], end),
        )
    )
    calls = [(r[0], to_ts(r[1]), to_ts(r[2])) for r in rows]
    shares, baselines = _figures(hw, calls)
    out_calls = []
    for r in rows:
        energy = shares.get("energy_j", {}).get(r[0])
        cpu = shares.get("host_cpu_s", {}).get(r[0])
        total, ttft = r[9], r[8]
        out_calls.append(
            {
                "id": r[0],
                "started_at": r[1],
                "model": r[3],
                "status": r[4],
                "memory_ms": _ms(r[5]),
                "proxy_ms": _ms(r[6]),
                "model_ms": _ms(r[7]),
                "ttft_ms": _ms(ttft),
                "generation_ms": _ms(total - ttft) if total is not None and ttft is not None else None,
                "total_ms": _ms(total),
                "energy_j": _r(energy.net) if energy else None,
                "mean_power_w": _r(energy.mean_rate, 3) if energy else None,
                "host_cpu_s": _r(cpu.net, 6) if cpu else None,
            }
        )
    summary: dict[str, Any] = {"calls": len(out_calls)}
    for key in (
        "memory_ms",
        "proxy_ms",
        "model_ms",
        "ttft_ms",
        "generation_ms",
        "total_ms",
        "energy_j",
        "host_cpu_s",
    ):
        values = sorted(c[key] for c in out_calls if c[key] is not None)
        summary[key] = (
            {"mean": _r(sum(values) / len(values), 4), "p50": values[len(values) // 2], "n": len(values)}
            if values
            else None
        )
    return {
        **hw.header(),
        "baseline": {
            "window_s": _r(_baseline_window(hw), 3),
            **{f"{q}_per_s": _r(b) for q, b in baselines.items()},
        },
        "chat_summary": summary,
        "chats": out_calls[-limit:] if limit else out_calls,
    }
