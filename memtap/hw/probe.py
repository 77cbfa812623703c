"""A probed run: the ``hw_runs`` row, its devices, the sampler writing ``hw_samples``, and the
idle baseline measured before the work starts. ``memtap serve``, ``proxy`` and ``replay`` open
one with ``--hw-probe``."""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple
from datetime import UTC, datetime
from pathlib import Path

from memtap.hw.nvml import open_nvml
from memtap.hw.sampler import Sampler, check_interval
from memtap.hw.sources import SAMPLE_FIELDS, HostSource, Sample, Source

__all__ = ["HwProbe", "default_sources", "hw_probe"]


def default_sources() -> tuple[list[Source], str]:
    """The host, and the GPUs when NVML finds any; and the one line saying what was found."""
    gpus, note = open_nvml()
    if gpus is None:
        return [HostSource()], f"hw-probe: {note}; recording host CPU only"
    return [gpus, HostSource()], f"hw-probe: {note}; recording GPUs and host CPU"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


class HwProbe:
    """One probed run over ``conn`` (a connection of the trace database that threads may share)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        sources: Sequence[Source],
        note: str,
        *,
        interval_ms: float,
        command: str,
        replay_run: str | None = None,
        queue_size: int = 256,
    ) -> None:
        self.conn = conn
        self.note = note
        self.run_id = f"hw-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        self.sources = list(sources)
        self.sampler = Sampler(sources, self._write, check_interval(interval_ms), queue_size=queue_size)
        started = time.time()
        conn.execute(
            "INSERT INTO hw_runs (id, command, replay_run_id, started_at, started_ts, interval_ms, note,"
            " status) VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
            (self.run_id, command, replay_run, _iso(started), started, interval_ms, note),
        )
        for source in self.sources:
            for d in source.describe():
                conn.execute(
                    "INSERT INTO hw_devices (run_id, device, kind, name, info) VALUES (?, ?, ?, ?, ?)",
                    (self.run_id, d.device, d.kind, d.name, json.dumps(d.info)),
                )

    _INSERT = (
        f"INSERT INTO hw_samples (run_id, {', '.join(SAMPLE_FIELDS)}) VALUES (?{', ?' * len(SAMPLE_FIELDS)})"
    )

    def _write(self, batch: list[Sample]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(self._INSERT, [(self.run_id, *astuple(s)) for s in batch])
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def start(self, baseline_s: float) -> None:
        """Start sampling; with ``baseline_s``, wait that long first so the run's idle power (and
        host CPU) is measured before any work starts."""
        self.sampler.start()
        if baseline_s > 0:
            threading.Event().wait(baseline_s)
            self.sampler.sample_once()  # closes the window, so it holds two samples however busy the host
            self.conn.execute(
                "UPDATE hw_runs SET baseline_until_ts = ? WHERE id = ?", (time.time(), self.run_id)
            )

    def link(self, replay_run: str) -> None:
        self.conn.execute("UPDATE hw_runs SET replay_run_id = ? WHERE id = ?", (replay_run, self.run_id))

    def stop(self, status: str = "completed") -> None:
        self.sampler.stop()
        for source in self.sources:
            source.close()
        s = self.sampler
        ended = time.time()
        self.conn.execute(
            "UPDATE hw_runs SET ended_at = ?, ended_ts = ?, samples = ?, dropped = ?, gaps = ?,"
            " write_errors = ?, sampler_cpu_s = ?, status = ? WHERE id = ?",
            (
                _iso(ended),
                ended,
                s.samples,
                s.dropped,
                s.gaps,
                s.write_errors,
                s.sampler_cpu_s,
                status,
                self.run_id,
            ),
        )


@contextmanager
def hw_probe(
    db: Path,
    *,
    interval_ms: float,
    baseline_s: float,
    command: str,
    replay_run: str | None = None,
    sources: tuple[list[Source], str] | None = None,
    echo: bool = True,
) -> Iterator[HwProbe]:
    """Probe the hardware while the body runs; prints the probe's one line to stderr."""
    import click

    from memtap.trace.migrations import MIGRATIONS
    from memtap.trace.sqlite import open_database

    check_interval(interval_ms)
    found, note = sources if sources is not None else default_sources()
    if echo:
        click.echo(note, err=True)
    database = open_database(db, MIGRATIONS, check_same_thread=False)
    probe = HwProbe(
        database.conn, found, note, interval_ms=interval_ms, command=command, replay_run=replay_run
    )
    status = "interrupted"
    try:
        probe.start(baseline_s)
        yield probe
        status = "completed"
    finally:
        probe.stop(status)
        database.conn.close()
