"""The read-only web dashboard: a Starlette app over one trace file.

``memtap ui`` serves it alone; ``memtap serve`` and ``memtap proxy`` mount it at ``/ui`` behind
the same gate as the API. A caller sees only what its grants let it read
(``Policy.allows(caller, namespace, Right.READ)``); a ``local`` caller sees everything.
Templates autoescape everything: memory content is untrusted.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from memtap.auth.caller import CALLER_SCOPE_KEY, Caller, local_caller
from memtap.auth.gate import Authentication, Gate
from memtap.auth.grants import Policy, Right
from memtap.ui.charts import compare_charts, headline_rows, score_charts
from memtap.ui.hw import QUANTITY_LABELS, chat_split, run_energy
from memtap.ui.queries import EVENT_FILTERS, LIVE_BATCH, Reader, Row, loads

__all__ = ["HERE", "create_ui_app", "environment", "word_diff"]

HERE = Path(__file__).parent
UpstreamStatus = Callable[[], dict[str, Any]]
STREAM_POLL_S = 0.5  # how often the event stream looks for new events in the trace
STREAM_HEARTBEAT_S = 15.0  # a comment line this often keeps proxies from closing an idle stream


def word_diff(before: str | None, after: str | None) -> list[tuple[str, str]]:
    """``before`` → ``after`` as (``same`` | ``del`` | ``ins``, text) runs of words."""
    a, b = (before or "").split(" "), (after or "").split(" ")
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", " ".join(a[i1:i2])))
        else:
            if i2 > i1:
                out.append(("del", " ".join(a[i1:i2])))
            if j2 > j1:
                out.append(("ins", " ".join(b[j1:j2])))
    return out


def rowid_cursor(text: str | None) -> int | None:
    """A ``before=`` cursor over rowids: None when absent, else a positive SQLite integer, or a 400
    that names it (``?before=abc``, ``²`` or a number past 2**63 is the client's mistake)."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and 0 < int(text) < 2**63):
        raise HTTPException(400, f"before={text[:40]!r} is not a row number (a positive integer)")
    return int(text)


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        value = loads(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) if value is not None else ""


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class LoopbackHostOnly:
    """Refuses (400) requests whose Host is not a loopback name: served keyless on loopback, the
    dashboard would otherwise be readable by any web page through DNS rebinding (the MCP front
    door has the SDK's same protection)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            name = host[1:].split("]")[0] if host.startswith("[") else host.split(":")[0]
            if name not in LOOPBACK_NAMES:
                await PlainTextResponse(f"Host {host!r} is not allowed", status_code=400)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.globals.update(word_diff=word_diff, pretty=_pretty, loads=loads, hw_labels=QUANTITY_LABELS)
    return env


def create_ui_app(
    db: str | Path,
    *,
    policy: Policy | None = None,
    authentication: Authentication | None = None,
    upstreams: UpstreamStatus | None = None,
    loopback_only: bool = False,
) -> Starlette:
    """The dashboard over the trace file ``db`` (already migrated by whoever opened it), behind
    ``authentication``'s gate when given (a 401 without a key when keys are configured);
    ``loopback_only``: refuse requests whose Host is not a loopback name."""
    reader = Reader(db)
    policy = policy or Policy()
    env = environment()

    def caller_of(request: Request) -> Caller:
        found = request.scope.get(CALLER_SCOPE_KEY)
        return found if isinstance(found, Caller) else local_caller()

    def readable(request: Request) -> Callable[[Row], bool]:
        caller = caller_of(request)
        if not caller.restricted:
            return lambda _: True

        def visible(row: Row) -> bool:  # its own calls (refused ones too), and what it may read
            if row.get("principal") == caller.principal and "tool" in row:
                return True
            return bool(row.get("namespace")) and policy.allows(caller, row["namespace"], Right.READ)

        return visible

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        def url(route: str, **params: Any) -> str:
            return link(request, route, **params)

        html = env.get_template(name).render(request=request, url=url, caller=caller_of(request), **context)
        return HTMLResponse(html, status_code=status)

    def link(request: Request, route: str, **params: Any) -> str:
        # Ids are quoted: an item or run id with "?", "#" or "%" in it still links to its own page.
        quoted = {k: quote(str(v), safe="/") for k, v in params.items()}
        return str(request.scope.get("root_path", "")) + str(app.router.url_path_for(route, **quoted))

    def filters_of(request: Request) -> dict[str, str]:
        return {k: request.query_params[k] for k in EVENT_FILTERS if request.query_params.get(k)}

    def home(request: Request) -> Response:
        return RedirectResponse(link(request, "events"))

    def events(request: Request) -> Response:
        filters = filters_of(request)
        rows, nxt = reader.events(
            filters, before=request.query_params.get("before"), visible=readable(request)
        )
        return page(request, "events.html", events=rows, next=nxt, filters=filters, names=EVENT_FILTERS)

    def live_batch(request: Request, after: str) -> tuple[list[dict[str, Any]], str]:
        """The visible events after ``after`` (oldest last, as the JSON API lists them) and the new cursor."""
        rows, cursor = reader.events(
            filters_of(request), after=after, visible=readable(request), limit=LIVE_BATCH
        )
        return [live_row(request, row) for row in rows], cursor or after

    def live_row(request: Request, row: Row) -> dict[str, Any]:
        return {
            **{
                k: row[k]
                for k in ("id", "started_at", "op", "tool", "namespace", "principal", "session", "status")
            },
            "summary": row["summary"],
            "items": [
                {"id": f["item_id"], "url": link(request, "item", backend=f["backend"], item_id=f["item_id"])}
                for f in row["effects"][:3]
            ],
            "url": link(request, "event", event_id=row["id"]),
        }

    def api_events(request: Request) -> Response:
        out, cursor = live_batch(request, request.query_params.get("after") or "")
        return JSONResponse({"events": out, "cursor": cursor})

    async def stream_events(request: Request) -> Response:
        """Server-sent events: each visible event newer than ``after`` (or the ``Last-Event-ID`` an
        EventSource resumes with), oldest first, with its id as the SSE ``id:``."""
        after = request.headers.get("last-event-id") or request.query_params.get("after") or ""
        if not after:  # no cursor: from now on, not the whole history
            newest, _ = await anyio.to_thread.run_sync(lambda: reader.events({}, limit=1))
            after = newest[0]["id"] if newest else ""

        async def frames() -> Any:
            nonlocal after
            yield ": memtap event stream\n\n"
            quiet = 0.0
            while not await request.is_disconnected():
                out, after = await anyio.to_thread.run_sync(live_batch, request, after)
                for e in reversed(out):
                    yield f"id: {e['id']}\nevent: memtap-event\ndata: {json.dumps(e, ensure_ascii=False)}\n\n"
                if len(out) >= LIVE_BATCH:
                    continue  # a full batch: more are waiting
                if out:
                    quiet = 0.0
                elif quiet >= STREAM_HEARTBEAT_S:
                    yield ": heartbeat\n\n"
                    quiet = 0.0
                await anyio.sleep(STREAM_POLL_S)
                quiet += STREAM_POLL_S

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)

    def event(request: Request) -> Response:
        found, check = reader.event(request.path_params["event_id"]), readable(request)
        if found is None or not check(found):
            raise HTTPException(404, f"no event {request.path_params['event_id']!r}")
        for key in ("linked", "children"):  # the related calls it may see, not another namespace's
            found[key] = [e for e in found[key] if check(e)]
        split = chat_split(reader, found)
        return page(request, "event.html", event=found, context=loads(found["context"]), chat_hw=split)

    def namespaces(request: Request) -> Response:
        rows, nxt = reader.namespaces(after=request.query_params.get("after"), visible=readable(request))
        return page(request, "namespaces.html", namespaces=rows, next=nxt)

    def items(request: Request) -> Response:
        namespace = request.query_params.get("namespace", "")
        if not namespace or not readable(request)({"namespace": namespace}):
            raise HTTPException(404, f"no namespace {namespace!r}")
        rows, nxt = reader.items(namespace, after=request.query_params.get("after"))
        return page(request, "items.html", namespace=namespace, items=rows, next=nxt)

    def item(request: Request) -> Response:
        backend, item_id = request.path_params["backend"], request.path_params["item_id"]
        found = reader.item(backend, item_id)
        if found is None or not readable(request)(found):
            raise HTTPException(404, f"no item {item_id!r} in backend {backend!r}")
        return page(request, "item.html", item=found)

    def visible_findings(request: Request, rows: list[Row]) -> list[Row]:
        """The findings the caller may read: by their namespace, or, with none, by their event's."""
        if not caller_of(request).restricted:
            return rows
        check = readable(request)
        heads = reader.event_heads([r["event_id"] for r in rows if not r.get("namespace")])
        return [r for r in rows if check(r if r.get("namespace") else heads.get(r["event_id"], {}))]

    def findings(request: Request) -> Response:
        """The detectors' findings (by severity and kind), then the gate's own denials and the
        refused calls, which are shown whether or not a detector turned them into findings."""
        query = request.query_params
        before, denied_before = query.get("before"), query.get("denied_before")
        kind, severity = query.get("kind") or None, query.get("severity") or None
        rows: list[Any] = []
        nxt = None
        table = reader.has_table("findings")
        if table:
            rows, nxt = reader.findings(before=rowid_cursor(before), kind=kind, severity=severity)
            rows = visible_findings(request, rows)
        denials, cursor = reader.denials(before=denied_before, visible=readable(request))
        return page(
            request,
            "findings.html",
            table=table,
            findings=rows,
            next=nxt,
            denials=denials,
            denied_next=cursor,
            kind=kind,
            severity=severity,
        )

    def run_visible(request: Request, run_id: str) -> bool:
        if not caller_of(request).restricted:
            return True
        check = readable(request)
        return all(check({"namespace": ns}) for ns in reader.run_namespaces(run_id))

    def runs(request: Request) -> Response:
        rows, nxt = reader.runs(
            before=request.query_params.get("before"), visible=lambda r: run_visible(request, r["id"])
        )
        return page(request, "runs.html", runs=rows, next=nxt)

    def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        found = reader.run(run_id)
        if found is None or not run_visible(request, run_id):
            raise HTTPException(404, f"no run {run_id!r}")
        score = found["score"]
        charts = score_charts(score) if score else []
        return page(
            request,
            "run.html",
            run=found,
            score=score,
            charts=charts,
            headline=headline_rows(score) if score else [],
            energy=run_energy(reader, found),
        )

    def compare(request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        runs = [reader.run(x) if x and run_visible(request, x) else None for x in (a, b)]
        missing = [x for x, r in zip((a, b), runs, strict=True) if r is None]
        if missing:
            raise HTTPException(404, f"no run {missing[0]!r}")
        unscored = [x for x, r in zip((a, b), runs, strict=True) if r is not None and r["score"] is None]
        error, result = None, None
        if unscored:
            error = f"run {unscored[0]!r} has no score yet: run `memtap score {unscored[0]}` first"
        else:
            # Imported here: the scoring package is large, and a server that records (the dashboard
            # mounted beside it) starts without it until someone opens a comparison.
            from memtap.scoring.compare import compare_scores
            from memtap.scoring.errors import ScoringError

            try:
                result = compare_scores(runs[0]["score"], runs[1]["score"])  # type: ignore[index]
            except ScoringError as exc:
                error = str(exc)
        charts = compare_charts(result) if result else []
        return page(request, "compare.html", a=a, b=b, result=result, error=error, charts=charts)

    def upstream_page(request: Request) -> Response:
        caller = caller_of(request)
        live = upstreams() if upstreams is not None else None
        stats = [r for r in reader.upstreams() if policy.may_call_upstream(caller, r["upstream"])]
        if live is not None and caller.restricted:
            live = {k: v for k, v in live.items() if policy.may_call_upstream(caller, k)}
        return page(request, "upstreams.html", live=live, stats=stats)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        title = {400: "Bad request", 404: "Not found"}.get(status, f"Error {status}")
        return page(request, "error.html", status=status, title=title, detail=detail)

    routes = [
        Route("/", home, name="home"),
        Route("/events", events, name="events"),
        Route("/events/{event_id}", event, name="event"),
        Route("/api/events", api_events, name="api_events"),
        Route("/api/events/stream", stream_events, name="api_events_stream"),
        Route("/memory", namespaces, name="namespaces"),
        Route("/memory/items", items, name="items"),
        Route("/memory/items/{backend}/{item_id:path}", item, name="item"),
        Route("/findings", findings, name="findings"),
        Route("/runs", runs, name="runs"),
        Route("/runs/{run_id:path}", run, name="run"),
        Route("/compare", compare, name="compare"),
        Route("/upstreams", upstream_page, name="upstreams"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(LoopbackHostOnly)] if loopback_only else []
    if authentication is not None:
        middleware.append(Middleware(Gate, authentication=authentication))
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: http_error})
    return app
