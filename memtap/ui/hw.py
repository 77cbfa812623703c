"""The hardware probe's figures for the dashboard: a run's energy and CPU per query, session and
episode (``memtap score``'s ``energy`` key, or computed from the trace when the score lacks it),
and one chat call's time split and energy when a hardware probe sampled while it ran."""

from __future__ import annotations

import sqlite3
from typing import Any

from memtap.hw.figures import chat_figures, replay_figures
from memtap.ui.queries import Reader

__all__ = ["QUANTITY_LABELS", "chat_split", "run_energy"]

QUANTITY_LABELS = {
    "energy_j": ("GPU energy", "J"),
    "host_cpu_s": ("host CPU", "core-s"),
    "memtap_cpu_s": ("memtap CPU", "s"),
}


def _probed(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'hw_runs'").fetchone() is not None


def run_energy(reader: Reader, run: dict[str, Any]) -> dict[str, Any] | None:
    """Run ``run``'s hardware figures: its score's ``energy`` when scored, else computed from the
    samples; None when it was not probed."""
    score = run.get("score")
    energy = score.get("energy") if isinstance(score, dict) else None
    if isinstance(energy, dict):
        return energy
    with reader.connect() as conn:
        return replay_figures(conn, run["id"]) if _probed(conn) else None


def chat_split(reader: Reader, event: dict[str, Any]) -> dict[str, Any] | None:
    """Chat event ``event``'s split (memory search, proxy, time to first token, generation) and
    energy, from the hardware run that sampled while it ran; None for other events or unprobed."""
    if event.get("op") != "chat":
        return None
    with reader.connect() as conn:
        if not _probed(conn):
            return None
        found = conn.execute(
            "SELECT id FROM hw_runs WHERE started_at <= ? AND (ended_at IS NULL OR ended_at >= ?)"
            " ORDER BY started_at DESC LIMIT 1",
            (event["started_at"], event["started_at"]),
        ).fetchone()
        if found is None:
            return None
        figures = chat_figures(conn, found[0])
    for call in figures["chats"]:
        if call["id"] == event["id"]:
            return {**call, "hw_run": found[0], "peak_temp_c": figures.get("peak_temp_c")}
    return None
