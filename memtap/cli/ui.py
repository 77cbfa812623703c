"""``memtap ui``: the read-only web dashboard over a trace file; ``memtap report``: one run's
score as a self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import click

from memtap.cli.options import auth_settings, db_option, open_store, parse_host_port, serving_config

DEFAULT_UI_HTTP = "127.0.0.1:8760"


@click.command()
@db_option
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    default=DEFAULT_UI_HTTP,
    show_default=True,
    help="Serve here (port 0: a free port, printed).",
)
@click.option(
    "--api-key",
    "api_keys",
    multiple=True,
    metavar="KEY=PRINCIPAL",
    help="Require this bearer key, as this principal (repeatable; also $MEMTAP_API_KEYS).",
)
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="PRINCIPAL=PATTERN:RIGHTS",
    help="Let PRINCIPAL read namespaces matching PATTERN (repeatable; as `memtap serve --grant`).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The config file whose memtap section names keys, principals and grants.",
)
def ui(
    db: Path | None, http: str, api_keys: tuple[str, ...], grants: tuple[str, ...], config_path: Path | None
) -> None:
    """Serve the read-only dashboard at http://HOST:PORT/ui/: live events, each event, the
    memory and its lineage, findings, runs and their scores, upstreams.

    Without keys it serves loopback only and shows everything; with keys a caller sees only the
    namespaces its grants let it read. `memtap serve` and `memtap proxy` mount the same pages at /ui.
    """
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, RedirectResponse
    from starlette.routing import Mount, Route

    from memtap.proxy.listen import bound_port, listen
    from memtap.proxy.runtime import Settings
    from memtap.ui import create_ui_app

    store = open_store(db)  # applies pending migrations, or says why it cannot
    path = store.path
    store.close()
    config, keys = serving_config(config_path, api_keys, False)
    settings = Settings(db=path, api_keys=keys, config=config, **auth_settings(config, keys, grants=grants))
    host, port = parse_host_port(http)
    settings.check_bind(host)
    dashboard = create_ui_app(
        path,
        policy=settings.policy,
        authentication=settings.authentication(),
        loopback_only=not settings.authenticated,
    )

    async def root(_: Request) -> RedirectResponse:
        return RedirectResponse("/ui/")

    async def healthz(_: Request) -> JSONResponse:  # readiness, for scripts and tests
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/", root), Route("/healthz", healthz), Mount("/ui", app=dashboard)])
    sock = listen(host, port)  # a port in use is one clear error, before the address is printed
    port = bound_port(sock)
    click.echo(f"memtap dashboard on http://{host}:{port}/ui/ (trace {path})", err=True)
    try:
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run(sockets=[sock])
    finally:
        sock.close()


@click.command()
@click.argument("run_id", metavar="RUN")
@db_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The HTML file to write.",
)
def report(run_id: str, db: Path | None, output: Path) -> None:
    """Write RUN's score (its latest `memtap score`) as one self-contained HTML file: tables and
    charts, with the stylesheet, scripts and chart library inline, so it opens with no network."""
    from memtap.ui.report import render_report

    store = open_store(db)
    path = store.path
    store.close()
    output.write_text(render_report(path, run_id), encoding="utf-8")
    click.echo(f"wrote {output}", err=True)


@click.command("datasette-metadata")
@db_option
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here (default stdout)."
)
def datasette_metadata_command(db: Path | None, output: Path | None) -> None:
    """Print Datasette metadata for the trace file: tables and columns described, JSON columns
    named, facets and canned queries. Use it with `datasette DB -m metadata.json`."""
    import json

    from memtap.cli.options import resolve_db
    from memtap.ui.datasette import datasette_metadata

    text = json.dumps(datasette_metadata(resolve_db(db).stem), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
