"""Who may read which dashboard page: a keyed caller gets a 404 for every kind of page (event,
item, namespace, run, comparison) of a namespace it may not read, and never sees its rows in the
lists, the findings or the JSON API; served alone over a real trace file behind real keys."""

from __future__ import annotations

import html
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memtap.auth.gate import ApiKeyAuthenticator, Authentication
from memtap.auth.grants import Policy
from memtap.trace.store import TraceStore
from memtap.ui import create_ui_app
from memtap.ui.report import render_report

EVENT = (
    "INSERT INTO events (id, started_at, ended_at, front_door, backend, tool, op, status, principal, namespace,"
    " context, arguments) VALUES (?, 't', 't', 'mcp-http', 'builtin', 'memory_add', 'write', 'ok', ?, ?, '{}', '{}')"
)
EFFECT = (
    "INSERT INTO effects (event_id, seq, kind, backend, namespace, item_id, content_after)"
    " VALUES (?, 0, 'add', 'builtin', ?, ?, ?)"
)
ITEM = (
    "INSERT INTO items (backend, item_id, namespace, content, version, valid_from, principal)"
    " VALUES ('builtin', ?, ?, ?, 1, 't', ?)"
)
RUN = (
    "INSERT INTO runs (id, suite_path, suite_sha256, episodes_total, target, config, reader, versions,"
    " started_at, status) VALUES (?, 's.jsonl', 'x', 1, 'builtin', '{}', 'none', '{}', 't', 'done')"
)
EPISODE = (
    "INSERT INTO run_episodes (run_id, episode_id, attempt, namespace, status, started_at, sessions_total)"
    " VALUES (?, 'ep1', 1, ?, 'done', 't', 1)"
)
FINDING = (
    "INSERT INTO findings (id, kind, severity, severity_rank, summary, event_id, namespace, event_ids, item_ids,"
    " evidence, detector_version, created_at, dedupe) VALUES (?, 'leak_retrieval', 'high', 3, ?, ?, ?, '[]',"
    " '[]', '{}', '1', 't', ?)"
)


@pytest.fixture
def ann(tmp_path: Path) -> TestClient:
    """The dashboard as ``ann`` sees it (no grants configured: her own namespace only), over a trace
    holding ann's and bob's events, items, runs and findings."""
    path = tmp_path / "t.db"
    TraceStore(path).close()
    with sqlite3.connect(path) as conn:
        for who, event in (("ann", "01EANN"), ("bob", "01EBOB")):
            conn.execute(EVENT, (event, who, who))
            conn.execute(EFFECT, (event, who, f"{who}-item", f"{who} secret"))
            conn.execute(ITEM, (f"{who}-item", who, f"{who} secret", who))
            conn.execute(RUN, (f"run-{who}",))
            conn.execute(EPISODE, (f"run-{who}", who))
            conn.execute(FINDING, (f"f-{who}", f"{who} finding", event, who, f"d-{who}"))
        # A finding with no namespace of its own, about bob's event: it follows its event.
        conn.execute(FINDING, ("f-loose", "loose finding about bob", "01EBOB", None, "d-loose"))
        # Calls linked to ann's: bob's parent and child are not hers to see, her own child is.
        conn.execute(EVENT, ("01ECHILDBOB", "bob", "bob"))
        conn.execute(EVENT, ("01ECHILDANN", "ann", "ann"))
        conn.execute("UPDATE events SET parent_id = '01EANN' WHERE id LIKE '01ECHILD%'")
        conn.execute("UPDATE events SET parent_id = '01EBOB', links = '[\"01EBOB\"]' WHERE id = '01EANN'")
        conn.execute(RUN, ("run-ann2",))
        conn.execute(EPISODE, ("run-ann2", "ann"))
    app = create_ui_app(
        path, policy=Policy(), authentication=Authentication([ApiKeyAuthenticator({"k-ann": "ann"})])
    )
    return TestClient(app, headers={"Authorization": "Bearer k-ann"})


def test_pages_of_a_namespace_the_caller_may_not_read_are_404(ann: TestClient) -> None:
    for readable, hidden in [
        ("/events/01EANN", "/events/01EBOB"),
        ("/memory/items/builtin/ann-item", "/memory/items/builtin/bob-item"),
        ("/memory/items?namespace=ann", "/memory/items?namespace=bob"),
        ("/runs/run-ann", "/runs/run-bob"),
        ("/compare?a=run-ann&b=run-ann2", "/compare?a=run-ann&b=run-bob"),
    ]:
        assert ann.get(readable).status_code == 200, readable
        refused = ann.get(hidden)
        assert refused.status_code == 404, hidden
        assert "bob secret" not in refused.text, hidden


def test_an_events_page_links_only_the_related_calls_the_caller_may_see(ann: TestClient) -> None:
    page = ann.get("/events/01EANN").text
    assert "01ECHILDANN" in page
    assert "01EBOB" not in page and "01ECHILDBOB" not in page


def test_lists_findings_and_the_json_api_hold_only_readable_rows(ann: TestClient) -> None:
    events, api = ann.get("/events"), ann.get("/api/events", params={"after": "0"})
    runs, memory, findings = ann.get("/runs"), ann.get("/memory"), ann.get("/findings")
    assert "ann secret" in events.text and "bob secret" not in events.text
    assert [e["id"] for e in api.json()["events"]] == ["01ECHILDANN", "01EANN"]
    assert "run-ann" in runs.text and "run-bob" not in runs.text
    assert ">ann<" in memory.text and ">bob<" not in memory.text
    assert "ann finding" in findings.text
    assert "bob finding" not in findings.text and "loose finding" not in findings.text


def test_the_local_caller_sees_every_namespace(tmp_path: Path, ann: TestClient) -> None:
    path = tmp_path / "t.db"
    local = TestClient(create_ui_app(path))
    assert local.get("/events/01EBOB").status_code == 200
    assert "loose finding about bob" in local.get("/findings").text


HOSTILE = "</script><script>window.pwned=1</script>"


def _chart_data(html: str) -> Any:
    """The page's #chart-data JSON as a browser reads it: up to the first ``</script``."""
    start = html.index('<script type="application/json" id="chart-data">')
    body = html[start:].split(">", 1)[1]
    return json.loads(body[: body.lower().index("</script")])


def test_hostile_run_and_label_names_cannot_close_the_chart_data_script(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    TraceStore(path).close()
    point = {"value": 0.5, "ci": [0.4, 0.6], "n": 2}
    score = {
        "run": {"id": HOSTILE},
        "coverage": {"episodes_scored": 1, "episodes_total": 1, "probes_total": 2},
        "matcher": "exact",
        "bootstrap": {"resamples": 10},
        "measures": {"capture_recall": point, "plasticity": point, "stability": point},
        "breakdowns": {"accuracy_by_probe_type": {HOSTILE: point}},
        "baselines": {HOSTILE: {"plasticity": point, "stability": point}},
        "attribution": {},
        "latency": {},
    }
    with sqlite3.connect(path) as conn:
        conn.execute(RUN, (HOSTILE,))
        conn.execute(
            "INSERT INTO scores (run_id, created_at, format, matcher, json) VALUES (?, 't', 'memtap-score/1',"
            " 'exact', ?)",
            (HOSTILE, json.dumps(score)),
        )
    client = TestClient(create_ui_app(path))
    listed = client.get("/runs")
    page = client.get(f"/runs/{HOSTILE}")
    report = render_report(path, HOSTILE)
    assert listed.status_code == 200 and page.status_code == 200
    for text in (listed.text, page.text, report):
        assert "<script>window.pwned" not in text
    for text in (page.text, report):
        charts = {c["id"]: c for c in _chart_data(text)}
        assert charts["accuracy_by_probe_type"]["labels"] == [HOSTILE]
        assert {p["label"] for p in charts["plasticity"]["points"]} == {f"run {HOSTILE}", HOSTILE}


def test_pages_past_many_unreadable_rows_show_the_readable_ones_and_never_name_the_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    TraceStore(path).close()
    with sqlite3.connect(path) as conn:
        for n in range(120):  # sorted before ann's namespace, and newer than ann's run
            conn.execute(ITEM, (f"i{n}", f"a{n:03d}", "hidden", "bob"))
            conn.execute(RUN, (f"run-z{n:03d}",))
            conn.execute(EPISODE, (f"run-z{n:03d}", f"a{n:03d}"))
        conn.execute(ITEM, ("mine", "ann", "mine", "ann"))
        conn.execute(RUN, ("run-ann",))
        conn.execute(EPISODE, ("run-ann", "ann"))
    keys = Authentication([ApiKeyAuthenticator({"k-ann": "ann"})])
    ann = TestClient(
        create_ui_app(path, policy=Policy(), authentication=keys), headers={"Authorization": "Bearer k-ann"}
    )
    memory, runs = ann.get("/memory"), ann.get("/runs")
    assert ">ann<" in memory.text and "a000" not in memory.text and "a119" not in memory.text
    assert "run-ann" in runs.text and "run-z" not in runs.text
    assert 'class="more"' not in memory.text + runs.text
    local = TestClient(create_ui_app(path))  # sees everything, fifty a page, then the rest
    first = local.get("/memory").text
    assert ">a049<" in first and ">a050<" not in first and "after=a049" in first
    second = local.get("/memory", params={"after": "a049"}).text
    last = local.get("/memory", params={"after": "a099"}).text
    assert ">a050<" in second and ">a099<" in second and "after=a099" in second
    assert ">a100<" in last and ">ann<" in last and 'class="more"' not in last
    runs_first = local.get("/runs").text
    assert "run-z119" in runs_first and "run-z070" in runs_first and "run-z069" not in runs_first
    assert "before=run-z070" in runs_first


def test_ids_with_url_characters_link_to_their_own_pages(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    TraceStore(path).close()
    odd = "obs#1?x=y b/c"
    with sqlite3.connect(path) as conn:
        conn.execute(ITEM, (odd, "ns", "the odd one", "ann"))
        conn.execute(RUN, (odd,))
    client = TestClient(create_ui_app(path))
    for listing, marker in (
        ("/memory/items?namespace=ns", 'class="item" href="'),
        ("/runs", '<td><a href="'),
    ):
        href = client.get(listing).text.split(marker)[1].split('"')[0]
        page = client.get(html.unescape(href))
        assert page.status_code == 200, href
        assert html.escape(odd) in page.text, href
