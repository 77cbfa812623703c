"""The dashboard's server time per page on a big trace, and how fast the live view drains a burst.

Builds a synthetic trace (default 1,000,000 events and 100,000 items with their versions and
effects; ``--events``/``--items`` to change it) through the real migrations, then serves the
real dashboard app in-process (Starlette's TestClient) and times each page 30 times. The
baseline, measured in the same run, is the 404 page (the same app, gate-free, template render
and no query): each page prints its p50 in ms and its ratio to that. The live view: 1,000 new
events are inserted and the events API polled from the cursor until it has them all; the
figure is events per second it can deliver (the target is to keep up with 1,000 events/s), by
the JSON API (the polling fallback) and by the server-sent event stream the page listens to.

    python benchmarks/ui_pages.py                      # 1M events, 100K items (minutes to build)
    python benchmarks/ui_pages.py --events 200000 --items 20000
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from memtap.trace.store import TraceStore
from memtap.ui import create_ui_app

OPS = ["write", "retrieve", "retrieve", "read", "update", "delete"]


def _id(n: int) -> str:
    return f"01BENCH{n:019d}"


def build(path: Path, events: int, items: int) -> None:
    TraceStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")
    namespaces = max(1, items // 100)
    batch_events, batch_effects = [], []
    for n in range(events):
        op = OPS[n % len(OPS)]
        ns = f"user-{n % namespaces}"
        item = f"mem_{n % items:08d}"
        status = "error" if n % 97 == 0 else "ok"
        error = (
            "principal 'x' may not read namespace 'y': none of its grants matches"
            if status == "error"
            else None
        )
        batch_events.append(
            (_id(n), f"2026-01-01T00:00:{n % 60:02d}Z", "mcp-http", "builtin", f"memory_{op}", op, status,
             error, "local", ns, f"s{n % 5000}", str(n % 20), "{}", json.dumps({"query": "x"}), "{}")
        )  # fmt: skip
        if op in ("write", "update", "retrieve") and status == "ok":
            kind = {"write": "add", "update": "update", "retrieve": "retrieve"}[op]
            batch_effects.append((_id(n), 0, kind, "builtin", ns, item, "before", f"content {n}"))
        if len(batch_events) >= 50_000:
            _flush(conn, batch_events, batch_effects)
    _flush(conn, batch_events, batch_effects)
    conn.executemany(
        "INSERT INTO items (backend, item_id, namespace, content, version, valid_from, created_event) "
        "VALUES ('builtin', ?, ?, ?, 1, '2026-01-01', ?)",
        ((f"mem_{k:08d}", f"user-{k % namespaces}", f"content {k}", _id(k)) for k in range(items)),
    )
    conn.executemany(
        "INSERT INTO item_versions (backend, item_id, version, content, op, event_id, valid_from) "
        "VALUES ('builtin', ?, 1, ?, 'add', ?, '2026-01-01')",
        ((f"mem_{k:08d}", f"content {k}", _id(k)) for k in range(items)),
    )
    conn.commit()
    conn.close()


def _flush(
    conn: sqlite3.Connection, events: list[tuple[object, ...]], effects: list[tuple[object, ...]]
) -> None:
    conn.executemany(
        "INSERT INTO events (id, started_at, ended_at, front_door, backend, tool, op, status, error, "
        "principal, namespace, session, turn, context, arguments, result) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(e[0], e[1], *e[1:]) for e in events],
    )
    conn.executemany(
        "INSERT INTO effects (event_id, seq, kind, backend, namespace, item_id, content_before, "
        "content_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        effects,
    )
    conn.commit()
    events.clear()
    effects.clear()


def p50_ms(client: TestClient, url: str, repeat: int = 30) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code in (200, 404), (url, response.status_code)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.db"
        started = time.perf_counter()
        build(path, args.events, args.items)
        print(
            f"built {args.events:,} events and {args.items:,} items in {time.perf_counter() - started:.1f} s"
        )
        client = TestClient(create_ui_app(path))
        middle = _id(args.events // 2)
        pages = {
            "live events": "/events",
            "live events, op=delete": "/events?op=delete",
            "live events, namespace": "/events?namespace=user-7",
            "live events, status=error": "/events?status=error",
            "live events, page deep": f"/events?before={middle}",
            "event": f"/events/{middle}",
            "namespaces": "/memory",
            "items of a namespace": "/memory/items?namespace=user-7",
            "item": "/memory/items/builtin/mem_00000007",
            "findings (denials)": "/findings",
            "runs": "/runs",
            "upstreams": "/upstreams",
        }
        baseline = p50_ms(client, "/events/NOSUCHEVENT")
        print(f"baseline (the 404 page: render, no query): p50 {baseline:.2f} ms")
        print(f"{'page':32} {'p50 ms':>8} {'x baseline':>10}")
        for name, url in pages.items():
            ms = p50_ms(client, url)
            print(f"{name:32} {ms:8.2f} {ms / baseline:10.1f}")
        last = _id(args.events - 1)
        conn = sqlite3.connect(path)
        _flush(
            conn,
            [(_id(args.events + k), "2026-01-02T00:00:00Z", "mcp-http", "builtin", "memory_add", "write",
              "ok", None, "local", "user-1", "s1", "0", "{}", "{}", "{}") for k in range(1000)],
            [],
        )  # fmt: skip
        conn.close()
        started, got, cursor = time.perf_counter(), 0, last
        while got < 1000:
            body = client.get("/api/events", params={"after": cursor}).json()
            got += len(body["events"])
            cursor = body["cursor"]
        took = time.perf_counter() - started
        print(f"live view: 1,000 new events delivered in {took * 1000:.1f} ms = {1000 / took:,.0f} events/s")
        started, got = time.perf_counter(), 0
        with client.stream("GET", "/api/events/stream", params={"after": last}) as stream:
            for line in stream.iter_lines():
                got += line.startswith("event: memtap-event")
                if got == 1000:
                    break
        took = time.perf_counter() - started
        print(f"event stream: the same 1,000 pushed in {took * 1000:.1f} ms = {1000 / took:,.0f} events/s")


if __name__ == "__main__":
    main()
