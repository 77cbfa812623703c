"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright), over a
database made by a real replay of a generated suite on builtin (two runs, scored) and a real
MCP session through `memtap serve`, which serves the dashboard at /ui while it records."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from conftest import START_TIMEOUT_S, http_client, run_memory_script

from memtap.cli.main import cli
from memtap.probes.targets._server import announced_port, wait_healthy

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium binary on PATH (`make pytest` installs Debian's chromium package)",
    ),
    # One pytest-xdist worker runs this module, so its site and browser (module fixtures) start once.
    pytest.mark.xdist_group("ui_browser"),
]
SCRIPT = "<script>window.pwned = 1</script>Remember the <b>tags</b>"


def _memtap(*args: str) -> str:
    """A memtap command, run in this process (no interpreter to start: it imports nothing new)."""
    done = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert done.exit_code == 0, done.output[-2000:]
    return done.output


def _off_loop(work: Callable[[], Any]) -> Any:
    """Run ``work`` in its own thread: a command that runs an event loop (replay) cannot run on
    this thread once Playwright's sync API owns its loop."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join(300)
    assert out, "the command did not finish"
    return out[0]


def _in_thread(work: Callable[[], Awaitable[Any]]) -> Any:
    """Run an MCP client in its own thread and event loop (Playwright's sync API owns this one)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(anyio.run(work)))
    thread.start()
    thread.join(120)
    assert out, "the MCP calls did not finish"
    return out[0]


class Site:
    def __init__(self, base: str, mcp: str, db: Path, shots: Path) -> None:
        self.base, self.mcp, self.db, self.shots = base, mcp, db, shots
        self.ids: dict[str, str] = {}
        self.script_id = ""

    def add(self, content: str, **arguments: Any) -> str:
        async def work() -> str:
            async with http_client(self.mcp) as client:
                result = await client.call_tool("memory_add", {"content": content, **arguments})
            return str(result.structured_content["id"])  # type: ignore[index]

        return str(_in_thread(work))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("dashboard")
    db = work / "trace.db"
    suite = work / "suite.jsonl"
    _memtap("suite", "gen", "paradigms", "--seed", "7", "--episodes", "2", "-o", str(suite))
    for run in ("runA", "runB"):
        _off_loop(
            lambda run=run: _memtap(
                "replay", str(suite), "--target", "builtin", "--run", run, "--db", str(db)
            )
        )
        _memtap("score", run, "--db", str(db))
    log = work / "serve.stderr"
    with log.open("wb") as err:  # port 0: the port it binds is read from what it prints
        proc = subprocess.Popen(
            [sys.executable, "-m", "memtap", "serve", "--http", "127.0.0.1:0", "--db", str(db)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        port = announced_port(lambda: log.read_text(errors="replace"), proc, START_TIMEOUT_S)
        healthy = port and wait_healthy(f"http://127.0.0.1:{port}", proc, START_TIMEOUT_S)
        assert healthy, log.read_text()
        shots = Path(os.environ.get("MEMTAP_SCREENSHOTS", work / "screenshots"))
        shots.mkdir(parents=True, exist_ok=True)
        print(f"\nscreenshots of the dashboard: {shots}")
        site = Site(f"http://127.0.0.1:{port}/ui", f"http://127.0.0.1:{port}/mcp", db, shots)

        async def session() -> dict[str, str]:
            async with http_client(site.mcp) as client:
                return await run_memory_script(client)

        site.ids = _in_thread(session)
        site.script_id = site.add(SCRIPT, session="s-hostile")
        yield site
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; the test fails on any console error or uncaught exception."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    errors: list[str] = []

    def console(message: Any) -> None:  # the 404 a test asks for on purpose is not an error
        if message.type == "error" and "NOSUCH" not in message.location.get("url", ""):
            errors.append(f"{message.text} at {message.location.get('url')}")

    tab.on("console", console)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    context.close()
    assert errors == []


def _score(site: Site, run: str) -> dict[str, Any]:
    with sqlite3.connect(site.db) as conn:
        row = conn.execute("SELECT json FROM scores WHERE run_id = ? ORDER BY id DESC", (run,)).fetchone()
    return dict(json.loads(row[0]))


def test_live_view_filters_and_shows_a_newly_recorded_event(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/events?op=write&session=s-live")
    expect(page.locator("#empty")).to_contain_text("No events recorded yet matching these filters")
    page.goto(f"{site.base}/events?op=write")
    ops = page.locator("#events tbody tr td:nth-child(2)").all_inner_texts()
    assert ops and set(ops) == {"write"}
    page.screenshot(path=str(site.shots / "live.png"))
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/api/events/stream" in r.url else None)
    page.goto(f"{site.base}/events?op=write&session=s-live")
    site.add("The user now lives in Lisbon.", session="s-live")
    row = page.locator("#events tbody tr").first
    expect(row).to_contain_text("The user now lives in Lisbon.", timeout=15000)
    expect(row).to_contain_text("add mem_")
    assert page.locator("#events tbody tr").count() == 1  # the filter holds for pushed rows too
    assert streams and "session=s-live" in streams[0]  # pushed over the SSE stream, not polled
    site.add("Not in this session.", session="s-other")
    row.locator("a.item").click()
    expect(page.locator("#current-content")).to_have_text("The user now lives in Lisbon.")
    expect(page.locator("#events")).to_have_count(0)


def test_an_event_links_to_its_items_lineage_and_back(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/events?op=update&session=s9")
    page.locator("#events tbody tr").first.locator("td:last-child a").click()
    expect(page.locator("h1")).to_contain_text("Event ")
    expect(page.locator(".diff .del")).to_have_text(["goes", "FitLife on Tuesdays."])
    expect(page.locator(".diff .ins")).to_have_text(["switched", "CrossFit Central."])
    event_url = page.url
    page.locator("a.item").first.click()
    gym = site.ids["gym"]
    expect(page.locator("h1")).to_have_text(f"Item {gym}")
    lineage = page.locator("#lineage li")
    expect(lineage).to_have_count(2)
    expect(lineage.nth(0)).to_contain_text("version 1 · add")
    expect(lineage.nth(0)).to_contain_text("The user goes to FitLife on Tuesdays.")
    expect(lineage.nth(1)).to_contain_text("version 2 · update")
    expect(lineage.nth(1)).to_contain_text("session s9, turn s9-t0 (user)")
    retrievals = page.locator("#retrievals tbody tr")
    expect(retrievals).to_have_count(1)
    expect(retrievals.first).to_contain_text("bob")  # returned to requester bob
    lineage.nth(1).locator("a").click()
    assert page.url == event_url
    page.screenshot(path=str(site.shots / "event.png"), full_page=True)


def test_a_script_memory_is_shown_as_text_and_never_runs(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/memory/items/builtin/{site.script_id}")
    expect(page.locator("#current-content")).to_have_text(SCRIPT)
    page.goto(f"{site.base}/events?session=s-hostile")
    expect(page.locator("#events tbody")).to_contain_text("<script>window.pwned = 1</script>")
    assert page.evaluate("window.pwned") is None


def test_memory_browser_lists_namespaces_and_items(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/memory")
    page.get_by_role("link", name="local", exact=True).click()
    expect(page.locator("h1")).to_have_text("Items in local")
    expect(page.locator("#items")).to_contain_text("The user switched to CrossFit Central.")
    expect(page.locator("#items")).to_contain_text("deleted")  # the colour memory, forgotten
    page.screenshot(path=str(site.shots / "memory.png"), full_page=True)


def test_run_page_shows_the_score_and_every_chart(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    score = _score(site, "runA")
    page.goto(f"{site.base}/runs")
    expect(page.locator("#runs tbody tr")).to_have_count(2)
    page.get_by_role("link", name="runA", exact=True).click()
    page.wait_for_function("window.memtapCharts && Object.keys(window.memtapCharts).length >= 5")
    charts = page.evaluate("Object.keys(window.memtapCharts)")
    assert set(charts) >= {"headline", "accuracy_by_probe_type", "plasticity", "latency"}
    accuracy = score["measures"]["answer_accuracy"]
    row = page.locator("#headline tr", has_text="answer_accuracy")
    expect(row).to_contain_text(f"{accuracy['value']:.3f}")
    expect(row).to_contain_text(f"[{accuracy['ci'][0]:.3f}, {accuracy['ci'][1]:.3f}]")
    by_type = score["breakdowns"]["accuracy_by_probe_type"]
    expect(page.locator("#accuracy_by_probe_type tbody tr")).to_have_count(len(by_type))
    expect(page.locator(".coverage")).to_contain_text(f"{score['coverage']['probes_total']} probes")
    page.screenshot(path=str(site.shots / "run.png"), full_page=True)


def test_comparison_of_two_runs_shows_paired_differences(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/runs")
    page.locator("select[name=a]").select_option("runA")
    page.locator("select[name=b]").select_option("runB")
    page.get_by_role("button", name="Compare").click()
    expect(page.locator("h1")).to_have_text("Run runB against run runA")
    expect(page.locator("main")).to_contain_text("over 2 shared episodes")
    expect(page.locator("#compare tbody tr", has_text="answer_accuracy")).to_have_count(1)
    page.wait_for_function("window.memtapCharts && window.memtapCharts.difference")


def test_findings_upstreams_and_unknown_ids(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.base}/findings")
    expect(page.locator("#findings")).to_contain_text("observe:would-deny=")  # the colour memory shown to bob
    page.goto(f"{site.base}/upstreams")
    expect(page.locator("#live-upstreams, .empty").first).to_be_visible()
    response = page.goto(f"{site.base}/events/01NOSUCHEVENT")
    assert response.status == 404
    expect(page.locator(".error")).to_have_text("no event '01NOSUCHEVENT'")


def test_report_opens_offline_with_every_chart(site: Site, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    _memtap("report", "runA", "--db", str(site.db), "-o", str(out))
    context = browser.new_context(offline=True)
    asked: list[str] = []
    context.route("**/*", lambda route: (asked.append(route.request.url), route.continue_()))
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.goto(out.as_uri())
    tab.wait_for_function("window.memtapCharts && Object.keys(window.memtapCharts).length >= 5")
    drawn = tab.evaluate(
        "Object.keys(window.memtapCharts).filter(k => window.memtapCharts[k].data.labels || true)"
    )
    expected = len(json.loads(tab.locator("#chart-data").text_content()))
    assert len(drawn) == expected
    assert [u for u in asked if not u.startswith("file:")] == []
    assert errors == []
    context.close()
