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

__all__ = ["hw", "hw_options", "hw_session"]

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
    from memtap.hw.render import render_chats, render_header, render_replay_figures
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
        figures = replay_figures(conn, run, per_probe=True)
        if figures is None:
            if conn.execute("SELECT 1 FROM hw_runs WHERE id = ?", (run,)).fetchone() is None:
                raise ConfigError(f"{run!r} is neither a probed replay run nor an hw run in {path}")
            result, lines = chat_figures(conn, run, limit=limit or None), []
            lines = [*render_header(result), *render_chats(result)]
        else:
            result, lines = figures, [f"replay run {run}", *render_replay_figures(figures)]
    finally:
        conn.close()
    click.echo(json.dumps(result) if as_json else "\n".join(lines))
