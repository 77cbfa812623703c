"""The dashboard's pages over HTTP: mounted by a real `memtap serve` behind its keys and grants,
and served alone over real trace files (empty, old, hostile content)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from click.testing import CliRunner
from conftest import ServerProcess, http_client, run_memory_script, write_config
from starlette.testclient import TestClient
from trace_builder import add_event

from memtap.cli.main import cli
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.sqlite import open_database
from memtap.trace.store import TraceStore
from memtap.ui import create_ui_app
from memtap.ui.app import word_diff
from memtap.ui.queries import DENIAL_SQL, Reader

pytestmark = pytest.mark.anyio


def _blank(path: Path) -> Path:
    TraceStore(path).close()
    return path


def test_an_empty_database_shows_every_page_with_an_empty_message(tmp_path: Path) -> None:
    client = TestClient(create_ui_app(_blank(tmp_path / "t.db")))
    for url, says in [
        ("/events", "No events recorded yet"),
        ("/memory", "No memory items recorded yet"),
        ("/findings", "No denials recorded"),
        ("/runs", "No replay runs in this database"),
        ("/upstreams", "No call to an upstream recorded"),
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert says in response.text, url
    assert client.get("/api/events").json() == {"events": [], "cursor": ""}


def test_unknown_ids_get_a_404_page_that_names_them(tmp_path: Path) -> None:
    client = TestClient(create_ui_app(_blank(tmp_path / "t.db")))
    for url, says in [
        ("/events/01NOPE", "no event &#39;01NOPE&#39;"),
        ("/memory/items/builtin/mem_nope", "no item &#39;mem_nope&#39;"),
        ("/runs/nope", "no run &#39;nope&#39;"),
        ("/compare?a=x&b=y", "no run &#39;x&#39;"),
        ("/no/such/page", "Not found"),
    ]:
        response = client.get(url)
        assert response.status_code == 404, url
        assert response.headers["content-type"].startswith("text/html")
        assert says in response.text, url


@pytest.mark.parametrize("cursor", ["abc", "-1", "0", "²", "9" * 20, "9" * 5000])
def test_a_bad_findings_cursor_gets_a_400_page_that_names_it(tmp_path: Path, cursor: str) -> None:
    client = TestClient(create_ui_app(_blank(tmp_path / "t.db")), raise_server_exceptions=False)
    response = client.get("/findings", params={"before": cursor})
    assert response.status_code == 400, cursor
    assert response.headers["content-type"].startswith("text/html")
    assert "Bad request" in response.text and "is not a row number" in response.text


def test_odd_cursors_and_filters_never_get_a_500(tmp_path: Path) -> None:
    client = TestClient(create_ui_app(_blank(tmp_path / "t.db")), raise_server_exceptions=False)
    for value in ["abc", "9" * 400, "%FF", "%00", "' OR 1=1 --", "</script>"]:
        for url in [
            "/events?before={}", "/events?op={}&status={}", "/api/events?after={}&namespace={}",
            "/memory?after={}", "/memory/items?namespace={}&after={}", "/findings?denied_before={}",
            "/findings?kind={}&severity={}", "/runs?before={}", "/compare?a={}&b={}",
        ]:  # fmt: skip
            response = client.get(url.replace("{}", value))
            assert response.status_code in (200, 404), (url, value)


def test_an_old_database_is_migrated_with_the_dashboard_indexes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = open_database(path, MIGRATIONS)
    db.execute("DROP INDEX events_op_id")
    db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm019_create_ui_indexes'")
    db.conn.commit()
    db.conn.close()
    assert (
        CliRunner()
        .invoke(cli, ["report", "nope", "--db", str(path), "-o", str(tmp_path / "r.html")])
        .exit_code
        == 2
    )
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        plan = " ".join(
            str(r[3])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM events WHERE op = 'write' ORDER BY id DESC LIMIT 51"
            )
        )
    assert {"events_op_id", "events_namespace_id", "events_upstream_id", "items_namespace"} <= names
    assert "events_op_id" in plan and "TEMP B-TREE" not in plan


def test_the_status_filter_finds_errors_in_their_partial_index_and_ok_calls_too(tmp_path: Path) -> None:
    """Only calls that did not end ok are in events_status_id (m028); both filters still work."""
    path = _blank(tmp_path / "t.db")
    store = TraceStore(path)
    events = [add_event(i) for i in range(7)]
    events[2] = events[2].model_copy(update={"status": "error", "error": "backend down"})
    events[5] = events[5].model_copy(update={"status": "error", "error": "timeout"})
    store.write_events(events)
    store.close()
    client = TestClient(create_ui_app(path))
    ids = {
        status: [e["id"] for e in client.get("/api/events", params={"status": status}).json()["events"]]
        for status in ("error", "ok")
    }
    assert ids["error"] == [events[5].id, events[2].id]
    assert sorted(ids["ok"]) == sorted(e.id for i, e in enumerate(events) if i not in (2, 5))
    asked: list[tuple[str, Any]] = []

    class Spy(Reader):  # what the dashboard asks SQLite, to ask for its plan
        def _all(self, sql: str, params: Any = ()) -> list[Any]:
            asked.append((sql, params))
            return super()._all(sql, params)

    Spy(path).events({"status": "error"})
    with sqlite3.connect(path) as conn:
        plan = " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + asked[0][0], asked[0][1]))
    assert "events_status_id" in plan and "TEMP B-TREE" not in plan, plan


def test_the_denials_list_reads_its_partial_index_not_every_event(tmp_path: Path) -> None:
    path = _blank(tmp_path / "t.db")
    with sqlite3.connect(path) as conn:
        plans = [
            " ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            for sql, params in [
                (f"SELECT * FROM events WHERE ({DENIAL_SQL}) ORDER BY id DESC LIMIT ?", (51,)),
                (f"SELECT * FROM events WHERE ({DENIAL_SQL}) AND id < ? ORDER BY id DESC LIMIT ?", ("z", 51)),
            ]
        ]
    assert all("USING INDEX events_denials" in plan for plan in plans), plans


async def test_hostile_and_invalid_content_is_shown_as_text(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server()
    async with http_client(server.url) as client:
        added = await client.call_tool(
            "memory_add", {"content": "<script>window.pwned=1</script> & <b>bold</b>"}
        )
    item_id = added.structured_content["id"]  # type: ignore[index]
    with sqlite3.connect(server.db) as conn:  # a backend that reported bytes that are not UTF-8
        conn.execute("UPDATE items SET content = CAST(X'6869FF21' AS TEXT) WHERE item_id != ?", (item_id,))
    base = f"http://127.0.0.1:{server.port}/ui"
    async with httpx2.AsyncClient() as http:
        item = await http.get(f"{base}/memory/items/builtin/{item_id}")
        events = await http.get(f"{base}/events")
    assert item.status_code == 200
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in item.text
    assert "<script>window.pwned" not in item.text and "<script>window.pwned" not in events.text


async def test_mounted_dashboard_needs_a_key_and_shows_only_readable_namespaces(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server("--api-key", "k-alice=alice", "--api-key", "k-bob=bob")
    for key, content in (("k-alice", "alice likes tea"), ("k-bob", "bob likes coffee")):
        async with http_client(server.url, {"Authorization": f"Bearer {key}"}) as client:
            await client.call_tool("memory_add", {"content": content})
    async with http_client(server.url, {"Authorization": "Bearer k-alice"}) as client:
        refused = await client.call_tool("memory_search", {"query": "coffee", "namespace": "bob"})
    assert refused.is_error
    base = f"http://127.0.0.1:{server.port}/ui"
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer k-alice"}) as http:
        anonymous = await http.get(f"{base}/events", headers={"Authorization": ""})
        events = await http.get(f"{base}/events")
        api = await http.get(f"{base}/api/events")
        memory = await http.get(f"{base}/memory")
        bobs = await http.get(f"{base}/memory/items", params={"namespace": "bob"})
        findings = await http.get(f"{base}/findings")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert events.status_code == 200
    assert "alice likes tea" in events.text and "bob likes coffee" not in events.text
    seen = api.json()["events"]  # what alice may read, and her own calls (the refused one included)
    assert {e["namespace"] for e in seen} == {"alice", "bob"}
    assert all(e["namespace"] == "alice" or e["principal"] == "alice" for e in seen)
    assert "coffee" not in str([e for e in seen if e["principal"] != "alice"])
    assert ">alice<" in memory.text and ">bob<" not in memory.text
    assert bobs.status_code == 404
    assert "argument namespace=&#39;bob&#39; contradicts namespace=&#39;alice&#39;" in findings.text
    assert "refused call" in findings.text


async def test_findings_table_is_read_when_present(start_http_server: Callable[..., ServerProcess]) -> None:
    server = start_http_server()
    async with http_client(server.url) as client:
        await run_memory_script(client)
    with sqlite3.connect(server.db) as conn:
        conn.execute(
            "INSERT INTO findings (id, kind, severity, severity_rank, summary, event_id, namespace, event_ids,"
            " item_ids, evidence, detector_version, created_at, dedupe) VALUES ('f1', 'leak_retrieval',"
            " 'high', 3, 'bob was shown <alice>''s item', '01ABC', 'alice', '[]', '[]', '{\"seen\": \"<b>\"}',"
            " '1', '2026-12-01T00:00:00+00:00', 'd1')"
        )
    async with httpx2.AsyncClient() as http:
        page = await http.get(f"http://127.0.0.1:{server.port}/ui/findings")
        other = await http.get(f"http://127.0.0.1:{server.port}/ui/findings?kind=canary_exposure")
    assert "severity-high" in page.text and "bob was shown &lt;alice&gt;&#39;s item" in page.text
    assert "&#34;&lt;b&gt;&#34;" in page.text and "<b>" not in page.text.split("<h1>Findings</h1>")[1]
    assert "/ui/events/01ABC" in page.text
    assert "No findings recorded of this kind or severity" in other.text and "01ABC" not in other.text


def test_word_diff_marks_removed_and_inserted_words() -> None:
    assert word_diff("goes to FitLife now", "goes to CrossFit now") == [
        ("same", "goes to"),
        ("del", "FitLife"),
        ("ins", "CrossFit"),
        ("same", "now"),
    ]


def test_report_of_an_unscored_run_says_how_to_score_it(tmp_path: Path) -> None:
    path = _blank(tmp_path / "t.db")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO runs (id, suite_path, suite_sha256, episodes_total, target, config, reader, versions, "
            "started_at, status) VALUES ('half', 's.jsonl', 'x', 3, 'builtin', '{}', 'none', '{}', 't', 'interrupted')"
        )
    result = CliRunner().invoke(cli, ["report", "half", "--db", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "run 'half' has no score yet: run `memtap score half" in result.output
    page = TestClient(create_ui_app(path)).get("/runs/half")
    assert "This run has no score yet" in page.text and "interrupted" in page.text


def test_datasette_metadata_describes_real_columns_and_its_queries_run(tmp_path: Path) -> None:
    path = _blank(tmp_path / "trace.db")
    from memtap.adapters.builtin import BuiltinBackend

    BuiltinBackend(path).conn.close()  # its tables too
    out = tmp_path / "metadata.json"
    result = CliRunner().invoke(cli, ["datasette-metadata", "--db", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    meta = json.loads(out.read_text())
    database = meta["databases"]["trace"]
    with sqlite3.connect(path) as conn:
        for table, spec in database["tables"].items():
            columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            assert columns, f"metadata names table {table}, which does not exist"
            assert set(spec.get("columns", {})) <= columns, table
            assert set(spec.get("facets", [])) <= columns, table
        for name, query in database["queries"].items():
            params = {p: "x" for p in ("item_id", "session", "run_id") if f":{p}" in query["sql"]}
            assert conn.execute(query["sql"], params).fetchall() == [], name


def _insert_events(path: Path, count: int, start: int = 0) -> list[str]:
    ids = [f"01EVENT{n:019d}" for n in range(start, start + count)]
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO events (id, started_at, ended_at, front_door, backend, tool, op, status, namespace, "
            "context, arguments) VALUES (?, 't', 't', 'mcp-http', 'builtin', 'memory_add', 'write', 'ok', 'ns', "
            "'{}', '{}')",
            [(i,) for i in ids],
        )
    return ids


def test_live_api_returns_a_burst_in_order_without_skipping(tmp_path: Path) -> None:
    path = _blank(tmp_path / "t.db")
    first = _insert_events(path, 1)[0]
    burst = _insert_events(path, 620, start=1)
    client = TestClient(create_ui_app(path))
    one = client.get("/api/events", params={"after": first, "op": "write"}).json()
    two = client.get("/api/events", params={"after": one["cursor"], "op": "write"}).json()
    three = client.get("/api/events", params={"after": two["cursor"], "op": "write"}).json()
    seen = [e["id"] for e in reversed(one["events"])] + [e["id"] for e in reversed(two["events"])]
    assert len(one["events"]) == 500 and seen == burst
    assert three == {"events": [], "cursor": burst[-1]}


async def test_memtap_ui_alone_serves_the_dashboard_behind_its_keys(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    recorder = start_http_server()
    async with http_client(recorder.url) as client:
        await client.call_tool("memory_add", {"content": "kept in local", "namespace": "local"})
    recorder.stop()
    server = start_http_server("--api-key", "k-ann=ann", command="ui")
    base = f"http://127.0.0.1:{server.port}"
    async with httpx2.AsyncClient() as http:
        anonymous = await http.get(f"{base}/ui/events")
        ann = await http.get(f"{base}/ui/events", headers={"Authorization": "Bearer k-ann"})
        home = await http.get(f"{base}/", headers={"Authorization": "Bearer k-ann"}, follow_redirects=True)
    assert anonymous.status_code == 401
    assert ann.status_code == 200 and "kept in local" not in ann.text  # ann may read only "ann"
    assert home.status_code == 200 and "<h1>Live events</h1>" in home.text


async def test_proxy_mounts_the_dashboard_with_its_upstreams_live_state(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: Callable[..., ServerProcess]
) -> None:
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        await client.call_tool("memory__create_entities", {"entities": [
            {"name": "Ann", "entityType": "person", "observations": ["likes <i>tea</i>"]}]})  # fmt: skip
    async with httpx2.AsyncClient() as http:
        page = await http.get(f"http://127.0.0.1:{server.port}/ui/upstreams")
        events = await http.get(f"http://127.0.0.1:{server.port}/ui/events", params={"upstream": "memory"})
        event_id = events.text.split('href="/ui/events/')[1].split('"')[0]
        event = await http.get(f"http://127.0.0.1:{server.port}/ui/events/{event_id}")
    assert 'id="live-upstreams"' in page.text
    assert '<tr class="state-ready"><td>memory</td><td>ready</td><td>stdio</td>' in page.text
    assert "create_entities" in events.text and "add ent_" in events.text and "and 1 more" in events.text
    assert "Ann (person)" in event.text and "likes &lt;i&gt;tea&lt;/i&gt;" in event.text


async def test_keyless_dashboard_refuses_a_foreign_host_name(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server()
    async with httpx2.AsyncClient() as http:
        rebound = await http.get(
            f"http://127.0.0.1:{server.port}/ui/events", headers={"Host": "evil.example"}
        )
        local = await http.get(f"http://127.0.0.1:{server.port}/ui/events", headers={"Host": "localhost:1"})
    assert rebound.status_code == 400 and "evil.example" in rebound.text
    assert local.status_code == 200


async def _stream_until(
    http: httpx2.AsyncClient,
    url: str,
    wanted: str,
    headers: dict[str, str] | None = None,
    started: Any = None,
) -> list[dict[str, Any]]:
    """The ``memtap-event`` frames of the SSE stream at ``url`` up to the one whose summary holds
    ``wanted``; ``started`` runs once the stream has answered (its cursor is fixed by then)."""
    frames: list[dict[str, Any]] = []
    with anyio.fail_after(30):
        async with http.stream("GET", url, headers=headers or {}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            frame: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line.startswith(":") and started is not None:
                    await started()
                    started = None
                elif line.startswith(("id: ", "event: ", "data: ")):
                    key, _, value = line.partition(": ")
                    frame[key] = value
                elif not line and frame:
                    event = json.loads(frame["data"])
                    assert frame["event"] == "memtap-event" and frame["id"] == event["id"]
                    frames.append(event)
                    frame = {}
                    if wanted in event["summary"]:
                        return frames
    raise AssertionError(f"the stream ended before {wanted!r} arrived")


async def test_event_stream_pushes_a_newly_recorded_event_the_caller_may_see(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server("--api-key", "k-alice=alice", "--api-key", "k-bob=bob")
    base = f"http://127.0.0.1:{server.port}/ui"

    async def record() -> None:  # bob's first: alice must not get it though it comes before hers
        for key, content in (("k-bob", "bob likes coffee"), ("k-alice", "alice likes tea")):
            async with http_client(server.url, {"Authorization": f"Bearer {key}"}) as client:
                await client.call_tool("memory_add", {"content": content})

    async with httpx2.AsyncClient(headers={"Authorization": "Bearer k-alice"}, timeout=30) as http:
        refused = await http.get(f"{base}/api/events/stream", headers={"Authorization": ""})
        pushed = await _stream_until(
            http, f"{base}/api/events/stream?op=write", "alice likes tea", started=record
        )
        # An EventSource reconnecting sends the last id it saw: the stream resumes after it.
        tea = pushed[-1]["id"]

        async def cake() -> None:
            async with http_client(server.url, {"Authorization": "Bearer k-alice"}) as client:
                await client.call_tool("memory_add", {"content": "alice likes cake"})

        resumed = await _stream_until(
            http, f"{base}/api/events/stream?after=0", "alice likes cake", {"Last-Event-ID": tea}, cake
        )
    assert refused.status_code == 401
    assert [e["summary"] for e in pushed] == [pushed[-1]["summary"]]  # bob's write never came
    assert pushed[-1]["principal"] == "alice" and pushed[-1]["op"] == "write"
    assert "coffee" not in json.dumps(pushed + resumed)
    assert [e["id"] for e in resumed if e["op"] == "write"] == [resumed[-1]["id"]] and tea < resumed[-1]["id"]
