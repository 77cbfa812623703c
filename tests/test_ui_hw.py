"""The hardware probe's figures on the dashboard: a probed replay's energy and CPU per query,
session and episode on its run page and in its static report, and a probed chat call's time split
on its event page; from real trace files written by `memtap replay --hw-probe` and a served proxy."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import openai
from click.testing import CliRunner
from served import ServedMemtap, chats
from starlette.testclient import TestClient

from memtap.cli.main import cli
from memtap.hw import HostSource, hw_probe
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite
from memtap.ui import create_ui_app


def _cells(html: str, table: str) -> list[list[str]]:
    body = html.split(f'id="{table}"')[1].split("</table>")[0]
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in body.split("<tr")[1:]]


def test_run_page_and_report_show_a_probed_runs_figures_per_query_session_and_episode(tmp_path: Path) -> None:
    suite, db = tmp_path / "suite.jsonl", tmp_path / "t.db"
    write_suite(generate("paradigms", seed=3, episodes=2), suite)
    replay = CliRunner().invoke(
        cli, ["replay", str(suite), "--target", "builtin", "--db", str(db), "--run", "r1", "--hw-probe",
              "--hw-baseline", "0.05", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert replay.exit_code == 0, replay.output
    figures = json.loads(replay.stdout)["hw"]
    client = TestClient(create_ui_app(db))
    unscored = client.get("/runs/r1").text  # figures computed from the samples before any score
    assert CliRunner().invoke(cli, ["score", "r1", "--db", str(db)]).exit_code == 0
    scored = client.get("/runs/r1").text
    report = tmp_path / "r1.html"
    made = CliRunner().invoke(cli, ["report", "r1", "--db", str(db), "--output", str(report)])
    assert made.exit_code == 0, made.output
    for html in (unscored, scored, report.read_text(encoding="utf-8")):
        rows = {r[0]: r[1:] for r in _cells(html, "energy")}
        assert rows["memtap CPU (s)"] == [
            f"{figures[k]['memtap_cpu_s']:.4f}" for k in ("per_query", "per_session", "per_episode")
        ] + [f"{figures['baseline']['memtap_cpu_s_per_s']:.4f}"]
        assert rows["host CPU (core-s)"][0] == f"{figures['per_query']['host_cpu_s']:.4f}"
        assert f"per query ({figures['queries']})" in html and f"per episode ({figures['episodes']})" in html
        device = dict(r for r in _cells(html, "energy-device") if len(r) == 2)
        assert device["idle baseline"].startswith("measured over")
        assert device["peak temperature"] == (
            "- (no GPU sampled)" if figures["peak_temp_c"] is None else f"{figures['peak_temp_c']:.0f} °C"
        )


def test_a_probed_chat_events_page_shows_its_time_split(serve_memtap: Any, db_path: Path) -> None:
    memtap: ServedMemtap = serve_memtap()
    client = openai.OpenAI(api_key="sk-x", base_url=memtap.base_url)
    sources = ([HostSource()], "hw-probe: host only (test)")
    client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "before"}])
    with hw_probe(
        db_path, interval_ms=20, baseline_s=0, command="test", sources=sources, echo=False
    ) as probe:
        client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hi [chunks 5]"}]
        )
    memtap.events(chats(2))
    with sqlite3.connect(db_path) as conn:
        (unprobed, *_), (probed, memory, proxy, ttft, total) = conn.execute(
            "SELECT id, memory_ms, overhead_ms, ttft_ms, total_ms FROM events WHERE op = 'chat'"
            " ORDER BY started_at"
        ).fetchall()
    ui = TestClient(create_ui_app(db_path))
    page = ui.get(f"/events/{probed}").text
    split = dict(r for r in _cells(page, "chat-split") if len(r) == 2)

    def shown(ms: float | None) -> str:
        # The page shows the hardware figures' times (``hw.figures``: to the microsecond) to 0.1 ms:
        # formatted from the raw value, 0.7495 would read 0.7 where the figure 0.75 reads 0.8.
        return "-" if ms is None else f"{round(ms, 3):.1f}"

    assert proxy is not None and ttft is not None and total is not None
    assert split["memory search (ms)"] == shown(memory) and split["proxy (ms)"] == shown(proxy)
    assert split["time to first token (ms)"] == shown(ttft) and split["total (ms)"] == shown(total)
    assert split["generation (ms)"] == shown(total - ttft)
    assert re.fullmatch(r"\d+\.\d{6}", split["host CPU (core-s)"])  # its share of the sampled CPU
    assert split["GPU energy (J)"] == "- (no GPU sampled)" or split["GPU energy (J)"].endswith(" W")
    assert split["hardware run"].startswith(probe.run_id)
    assert 'id="chat-split"' not in ui.get(f"/events/{unprobed}").text  # before the probe ran
