"""The hardware probe: its one line without a GPU (through the real NVML bindings), attribution
of recorded sample series to calls with exact joules, gaps, drops, the interval floor, and a
replay and chats probed end to end on this machine's host CPU."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from click.testing import CliRunner
from served import ServedMemtap, chats

import memtap.scoring
from memtap.cli.main import cli
from memtap.hw import (
    HostSource,
    HwError,
    HwRuns,
    ReplaySource,
    attribute,
    baseline_rate,
    chat_figures,
    check_interval,
    default_sources,
    hw_probe,
    segments,
)
from memtap.hw.attribution import Point
from memtap.hw.probe import HwProbe
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.sqlite import open_database

DATA = Path(__file__).parent / "data" / "hw"


def _nvml_finds_a_gpu() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


no_gpu = pytest.mark.skipif(_nvml_finds_a_gpu(), reason="this machine has an NVIDIA driver")


@no_gpu
def test_probe_without_a_driver_says_so_in_one_line_and_samples_the_host_only() -> None:
    sources, note = default_sources()
    assert note == "hw-probe: no NVIDIA driver (NVML: NVML Shared Library Not Found); recording host CPU only"
    assert [type(s) for s in sources] == [HostSource]
    [host] = sources[0].sample()
    assert host.device == "host" and host.proc_cpu_s is not None and host.cpu_busy_s is not None


def _recorded(db: Path, name: str, baseline: tuple[float, float] | None) -> tuple[sqlite3.Connection, str]:
    """Play a recorded file through a real HwProbe into ``db``, one tick per ``sample_once``."""
    conn = open_database(db, MIGRATIONS, check_same_thread=False).conn
    source = ReplaySource(DATA / name)
    probe = HwProbe(conn, [source], "hw-probe: replayed", interval_ms=1000, command="test")
    while not source.exhausted:
        probe.sampler.sample_once()
    probe.stop()
    if baseline is not None:  # the recording's own idle window stands for the measured one
        conn.execute(
            "UPDATE hw_runs SET started_ts = ?, baseline_until_ts = ? WHERE id = ?", (*baseline, probe.run_id)
        )
    return conn, probe.run_id


def test_recorded_power_series_is_split_among_overlapping_calls_with_exact_joules(tmp_path: Path) -> None:
    conn, run = _recorded(tmp_path / "t.db", "gpu_ramp.jsonl", baseline=(100.0, 101.0))
    hw = HwRuns(conn, [run])
    # Power 50, 50, 150, 250, 250, 150, 50 W at t = 100..106 s, no energy counter: trapezoids of
    # 50, 100, 200, 250, 200, 100 J. A runs 101-103, B 102-105, C 104.5-106.
    #   101-102 (100 J): A alone            A 100
    #   102-103 (200 J): A and B            A 100, B 100
    #   103-104 (250 J): B alone            B 250
    #   104-104.5 (100 J of 200 J/s): B     B 100
    #   104.5-105 (100 J): B and C          B 50, C 50
    #   105-106 (100 J): C alone            C 100
    # Idle baseline 50 W (the 100-101 window), subtracted per share of time: A 1 + 1/2 s,
    # B 1/2 + 1.5 + 1/4 s, C 1/4 + 1 s.
    shares, base = hw.attribute("energy_j", [("A", 101.0, 103.0), ("B", 102.0, 105.0), ("C", 104.5, 106.0)])
    assert base == 50.0
    assert {k: s.gross for k, s in shares.items()} == {"A": 200.0, "B": 500.0, "C": 150.0}
    assert {k: s.net for k, s in shares.items()} == {"A": 125.0, "B": 387.5, "C": 87.5}
    assert shares["A"].mean_rate == 100.0 and shares["C"].mean_rate == 100.0
    header = hw.header()
    assert header["peak_temp_c"] == 66.0
    assert header["mean_power_w"] == round(900.0 / 6, 3)  # 900 J over 6 s
    assert header["energy_counter_vs_power"] is None


def test_energy_counter_wins_over_power_and_a_lost_device_is_a_gap_the_sampler_survives(
    tmp_path: Path,
) -> None:
    conn, run = _recorded(tmp_path / "t.db", "gpu_lost.jsonl", baseline=None)
    stored = conn.execute("SELECT ts, energy_j, error FROM hw_samples WHERE run_id = ? ORDER BY ts", (run,))
    rows = [(e, err) for _, e, err in stored]
    assert rows[:2] == [(1000.0, None), (1100.0, None)]
    assert rows[2] == (None, "HwSourceError: GPU is lost")  # the gap, recorded
    assert rows[3:] == [(1400.0, None), (1500.0, None)]  # and sampling went on
    assert conn.execute("SELECT gaps FROM hw_runs WHERE id = ?", (run,)).fetchone() == (1,)
    # The counter gives 100 J over 0-1 s and 100 J over 3-4 s (power alone would say 300 J);
    # 1-3 s is a gap. X runs 0.5-3.5 s: half of each measured second.
    shares, base = HwRuns(conn, [run]).attribute("energy_j", [("X", 0.5, 3.5)])
    assert base is None
    assert (shares["X"].gross, shares["X"].net, shares["X"].covered_s) == (100.0, 100.0, 1.0)


def test_counter_and_trapezoid_segments_and_the_baseline_rate_by_hand() -> None:
    points = [Point(0.0, rate=10.0, counter=5.0), Point(2.0, rate=30.0, counter=4.0), Point(3.0, rate=30.0)]
    # 0-2: the counter went backwards (a reset), so the trapezoid (10 + 30) / 2 * 2 = 40 J; 2-3: 30 J.
    segs = segments(points)
    assert [s.amount for s in segs] == [40.0, 30.0]
    assert baseline_rate(segs, 0.0, 3.0) == 70.0 / 3.0
    assert attribute(segs, [("whole", 0.0, 3.0), ("none", 5.0, 6.0)])["none"].gross == 0.0


def test_an_interval_below_what_nvml_delivers_is_refused_with_the_minimum(tmp_path: Path) -> None:
    with pytest.raises(HwError, match=r"--hw-interval 5 ms is below the 20 ms NVML can deliver"):
        check_interval(5)
    suite = tmp_path / "suite.jsonl"
    write_suite(generate("paradigms", seed=3, episodes=1), suite)
    result = CliRunner().invoke(
        cli, ["replay", str(suite), "--target", "builtin", "--db", str(tmp_path / "t.db"), "--hw-probe",
              "--hw-interval", "5"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "memtap: error: --hw-interval 5 ms is below the 20 ms NVML can deliver (its power reading refreshes "
        "every 20 ms at best); use 20 or more"
    ]


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_an_interval_that_is_not_a_finite_number_is_refused(value: str) -> None:
    with pytest.raises(HwError, match=rf"--hw-interval {value} is not a number of milliseconds"):
        check_interval(float(value))


def test_samples_the_database_cannot_take_are_dropped_and_counted_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    db = tmp_path / "t.db"
    conn = open_database(db, MIGRATIONS, check_same_thread=False).conn
    source = ReplaySource(DATA / "gpu_ramp.jsonl")
    probe = HwProbe(conn, [source], "hw-probe: replayed", interval_ms=100, command="test", queue_size=2)
    for _ in range(5):
        probe.sampler.sample_once()  # the writer is not draining: two ticks queue, three are dropped
    assert (probe.sampler.samples, probe.sampler.dropped) == (5, 3)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        probe.sampler.stop()  # the two queued ticks meet the lock: lost, counted, nothing raised
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (probe.sampler.dropped, probe.sampler.write_errors) == (5, 1)
    probe.stop()
    assert conn.execute("SELECT samples, dropped, write_errors FROM hw_runs").fetchone() == (5, 5, 1)
    assert conn.execute("SELECT count(*) FROM hw_samples").fetchone() == (0,)


def test_replay_with_hw_probe_stores_host_samples_and_reports_per_query_figures(tmp_path: Path) -> None:
    suite, db = tmp_path / "suite.jsonl", tmp_path / "t.db"
    write_suite(generate("paradigms", seed=3, episodes=2), suite)
    result = CliRunner().invoke(
        cli, ["replay", str(suite), "--target", "builtin", "--db", str(db), "--run", "r1", "--hw-probe",
              "--hw-baseline", "0.05", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    if not _nvml_finds_a_gpu():
        assert "hw-probe: no NVIDIA driver" in result.stderr
    figures = json.loads(result.stdout)["hw"]
    probes = sqlite3.connect(db).execute("SELECT count(*) FROM run_probes WHERE run_id = 'r1'").fetchone()[0]
    assert figures["queries"] == probes > 0 and figures["episodes"] == 2 and figures["sessions"] > 0
    for quantity in ("host_cpu_s", "memtap_cpu_s"):
        assert figures["per_query"][quantity] is not None
        assert figures["baseline"][f"{quantity}_per_s"] is not None
    # memtap's own CPU during the run is real work: more per episode than the idle baseline takes away
    assert figures["per_episode"]["memtap_cpu_s"] > 0
    [hw_run] = figures["hw_runs"]
    conn = sqlite3.connect(db)
    host = conn.execute(
        "SELECT count(*), min(proc_cpu_s) FROM hw_samples WHERE run_id = ? AND device = 'host'", (hw_run,)
    )
    count, cpu = host.fetchone()
    assert count >= 3 and cpu > 0  # the start, the baseline's close and the final tick at least
    assert conn.execute("SELECT replay_run_id, status FROM hw_runs").fetchall() == [("r1", "completed")]
    scored = CliRunner().invoke(cli, ["score", "r1", "--db", str(db), "--json", "--no-store"])
    assert scored.exit_code == 0, scored.output
    score_file = json.loads(scored.stdout)
    assert score_file["energy"]["per_query"] == figures["per_query"]
    schema = json.loads((Path(memtap.scoring.__file__).parent / "memtap-score-1.schema.json").read_text())
    jsonschema.validate(score_file, schema)
    shown = CliRunner().invoke(cli, ["hw", "report", "r1", "--db", str(db)])
    assert "memtap CPU:" in shown.stdout and f"per query ({probes})" in shown.stdout
    listed = json.loads(CliRunner().invoke(cli, ["hw", "report", "r1", "--db", str(db), "--json"]).stdout)
    assert len(listed["probes"]) == probes  # each probe with its own share
    assert sum(p["memtap_cpu_s"] for p in listed["probes"]) == pytest.approx(
        figures["totals"]["memtap_cpu_s"]["queries"], abs=1e-4
    )


def test_each_chat_gets_its_time_split_and_host_cpu_while_the_probe_runs(
    serve_memtap: Any, db_path: Path
) -> None:
    memtap: ServedMemtap = serve_memtap()
    client = openai.OpenAI(api_key="sk-x", base_url=memtap.base_url)
    sources = ([HostSource()], "hw-probe: host only (test)")
    with hw_probe(
        db_path, interval_ms=20, baseline_s=0, command="test", sources=sources, echo=False
    ) as probe:
        for _ in range(3):
            client.chat.completions.create(
                model="gpt-fake", messages=[{"role": "user", "content": "hi [chunks 5]"}]
            )
        memtap.events(chats(3))
    conn = sqlite3.connect(db_path)
    figures = chat_figures(conn, probe.run_id)
    assert figures["chat_summary"]["calls"] == 3
    for call in figures["chats"]:
        assert call["model"] == "gpt-fake" and call["host_cpu_s"] is not None
        assert call["total_ms"] is not None and call["ttft_ms"] is not None and call["proxy_ms"] is not None
        assert call["generation_ms"] == round(call["total_ms"] - call["ttft_ms"], 3)
    assert figures["baseline"]["window_s"] is None  # --hw-baseline 0: gross figures


@no_gpu
def test_serve_with_hw_probe_says_no_driver_once_and_records_the_host_until_it_stops(
    start_http_server: Any, db_path: Path
) -> None:
    server = start_http_server("--hw-probe", "--hw-baseline", "0")
    assert server.stop() == 0
    lines = [line for line in server.stderr().splitlines() if line.startswith("hw-probe:")]
    assert lines == [
        "hw-probe: no NVIDIA driver (NVML: NVML Shared Library Not Found); recording host CPU only"
    ]
    conn = sqlite3.connect(db_path)
    [(command, status, note, samples, cpu)] = conn.execute(
        "SELECT command, status, note, samples, sampler_cpu_s FROM hw_runs"
    ).fetchall()
    assert (command, status, note) == ("serve", "completed", lines[0])
    stored = conn.execute("SELECT count(*) FROM hw_samples WHERE device = 'host'").fetchone()[0]
    assert stored == samples >= 2 and cpu is not None
    assert conn.execute("SELECT device, kind FROM hw_devices").fetchall() == [("host", "host")]
