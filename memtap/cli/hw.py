"""``--hw-probe`` and its options for ``serve``, ``proxy`` and ``replay``, and ``memtap hw report``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from memtap.cli.options import db_option, json_option, resolve_db
from memtap.errors import ConfigError

__all__ = ["hw", "hw_options", "hw_session", "render_replay_figures"]

_options = [
    click.option(
        "--hw-probe",
        "hw_probe",
        is_flag=True,
        help="Sample GPU power, energy, utilisation, memory, temperature and clocks (NVML) and host CPU "
        "into the trace database while this runs (docs/hardware.md).",
    ),
    click.option(
        "--hw-interval",
        "hw_interval",
        type=float,
        default=100.0,
        show_default=True,
        metavar="MS",
        help="Sampling interval of --hw-probe in milliseconds (at least 20).",
    ),
    click.option(
        "--hw-baseline",
        "hw_baseline",
        type=click.FloatRange(min=0),
        default=2.0,
        show_default=True,
        metavar="SECONDS",
        help="Idle time sampled before the work starts, subtracted from what calls are given (0: none).",
    ),
]


def hw_options(func: Any) -> Any:
    for option in reversed(_options):
        func = option(func)
    return func


@contextmanager
def hw_session(enabled: bool, db: Path, interval_ms: float, baseline_s: float, command: str) -> Iterator[Any]:
    """The probe (``HwProbe``) while the body runs, or None without ``--hw-probe``."""
    if not enabled:
        yield None
        return
    from memtap.hw.probe import hw_probe

    with hw_probe(db, interval_ms=interval_ms, baseline_s=baseline_s, command=command) as probe:
        yield probe


def _num(value: Any, unit: str = "", digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _header_lines(f: dict[str, Any]) -> list[str]:
    lines = [
        f"hw runs {', '.join(f['hw_runs'])}: {f['samples']} samples every {f['interval_ms']:g} ms "
        f"({f['dropped']} dropped, {f['gaps']} gaps), sampler CPU {_num(f['sampler_cpu_s'], ' s')} "
        f"over {_num(f['wall_s'], ' s', 1)}",
        f"  {f['note']}",
    ]
    for d in f["devices"]:
        extra = f" (driver {d.get('driver')})" if d["kind"] == "gpu" else f" ({d.get('cpus')} CPUs)"
        lines.append(f"  {d['device']}: {d['name']}{extra}")
    base = f["baseline"]
    if base.get("window_s"):
        parts = []
        if "energy_j_per_s" in base:
            parts.append(f"GPU {_num(base['energy_j_per_s'], ' W', 1)}")
        if "host_cpu_s_per_s" in base:
            parts.append(f"host {_num(base['host_cpu_s_per_s'], ' cores', 3)}")
        if "memtap_cpu_s_per_s" in base:
            parts.append(f"memtap {_num(base['memtap_cpu_s_per_s'], ' cores', 3)}")
        lines.append(
            f"  idle baseline over {base['window_s']:.1f} s before the work, subtracted: {', '.join(parts)}"
        )
    else:
        lines.append("  no idle baseline measured (--hw-baseline 0): figures are gross")
    if f["mean_power_w"] is not None:
        agree = f["energy_counter_vs_power"]
        lines.append(
            f"  GPU: mean power {_num(f['mean_power_w'], ' W', 1)}, "
            f"utilisation {_num(f['gpu_util_mean'], '%', 1)}, "
            f"peak temperature {_num(f['peak_temp_c'], ' C', 0)}"
            + (
                f", integrated power vs energy counter {_num(agree['difference_pct'], '%', 2)}"
                if agree
                else ", no energy counter"
            )
        )
    lines.append(f"  host CPU utilisation mean {_num(f['host_cpu_util_mean'], '%', 1)}")
    return lines


def render_replay_figures(f: dict[str, Any]) -> list[str]:
    lines = _header_lines(f)
    names = {
        "energy_j": ("GPU energy", " J"),
        "host_cpu_s": ("host CPU", " core-s"),
        "memtap_cpu_s": ("memtap CPU", " s"),
    }
    for quantity, (label, unit) in names.items():
        if quantity not in f["per_query"]:
            continue
        lines.append(
            f"  {label}: {_num(f['per_query'][quantity], unit, 4)} per query ({f['queries']}), "
            f"{_num(f['per_session'][quantity], unit, 4)} per ingested session ({f['sessions']}), "
            f"{_num(f['per_episode'][quantity], unit, 4)} per episode ({f['episodes']})"
        )
    return lines


def _render_chats(f: dict[str, Any]) -> list[str]:
    s = f["chat_summary"]
    lines = [f"chat calls: {s['calls']}"]
    if not s["calls"]:
        return lines

    def mean(key: str) -> str:
        return "-" if s[key] is None else f"{s[key]['mean']:.1f}"

    lines.append(
        f"  mean split (ms): memory search {mean('memory_ms')} · proxy {mean('proxy_ms')} · model "
        f"{mean('model_ms')} (time to first token {mean('ttft_ms')}, generation {mean('generation_ms')}) "
        f"· total {mean('total_ms')}"
    )
    if s["energy_j"] is not None:
        lines.append(
            f"  GPU energy per chat: mean {s['energy_j']['mean']:.3f} J, p50 {s['energy_j']['p50']:.3f} J"
        )
    header = ["id", "model", "memory", "proxy", "ttft", "generation", "total", "J", "W"]
    rows = [
        [
            c["id"],
            c["model"] or "-",
            *(_num(c[k], "", 1) for k in ("memory_ms", "proxy_ms", "ttft_ms", "generation_ms", "total_ms")),
            _num(c["energy_j"], "", 3),
            _num(c["mean_power_w"], "", 1),
        ]
        for c in f["chats"]
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
    return lines


@click.group()
def hw() -> None:
    """The hardware probe's records (--hw-probe of serve, proxy and replay)."""


@hw.command()
@click.argument("run", required=False)
@db_option
@click.option(
    "--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Chat calls listed (0: all)."
)
@json_option
def report(run: str | None, db: Path | None, limit: int, as_json: bool) -> None:
    """Energy, power and the time split of a probed RUN: a replay run (per query, ingested session
    and episode) or an hw run (each chat call made while it sampled); default: the latest hw run."""
    from memtap.hw.figures import chat_figures, replay_figures
    from memtap.trace.migrations import MIGRATIONS
    from memtap.trace.sqlite import open_database

    path = resolve_db(db)
    if not path.exists():
        raise ConfigError(f"no trace database at {path} (run with --hw-probe first, or pass --db)")
    conn = open_database(path, MIGRATIONS).conn
    try:
        if run is None:
            row = conn.execute("SELECT id FROM hw_runs ORDER BY started_ts DESC LIMIT 1").fetchone()
            if row is None:
                raise ConfigError(f"no probed runs in {path} (run serve, proxy or replay with --hw-probe)")
            run = str(row[0])
        linked = conn.execute("SELECT replay_run_id FROM hw_runs WHERE id = ?", (run,)).fetchone()
        if linked is not None and linked[0]:
            run = str(linked[0])
        figures = replay_figures(conn, run)
        if figures is None:
            if conn.execute("SELECT 1 FROM hw_runs WHERE id = ?", (run,)).fetchone() is None:
                raise ConfigError(f"{run!r} is neither a probed replay run nor an hw run in {path}")
            result, lines = chat_figures(conn, run, limit=limit or None), []
            lines = [*_header_lines(result), *_render_chats(result)]
        else:
            result, lines = figures, [f"replay run {run}", *render_replay_figures(figures)]
    finally:
        conn.close()
    click.echo(json.dumps(result) if as_json else "\n".join(lines))
