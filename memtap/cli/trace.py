"""``memtap trace``: list, show and follow recorded events."""

from __future__ import annotations

import time
from pathlib import Path

import click

from memtap.cli.options import db_option, json_option, open_store
from memtap.errors import ConfigError

OPS = ["write", "update", "delete", "retrieve", "read", "chat", "embed", "control"]


@click.group()
def trace() -> None:
    """Recorded events: one per call through a front door."""


@trace.command("list")
@db_option
@click.option("--op", type=click.Choice(OPS), help="Only this lifecycle operation.")
@click.option("--namespace", help="Only this namespace.")
@click.option("--run", help="Only this run.")
@click.option("--session", help="Only this session.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Newest N events.")
@json_option
def list_events(
    db: Path | None,
    op: str | None,
    namespace: str | None,
    run: str | None,
    session: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List events, oldest first (the newest LIMIT)."""
    from memtap.cli.render import event_json, event_lines

    store = open_store(db)
    try:
        events = store.list_events(
            op=op, namespace=namespace, run=run, session=session, limit=limit, newest_first=True
        )
    finally:
        store.close()
    if as_json:
        for event in events:
            click.echo(event_json(event))
    elif events:
        click.echo(event_lines(events))
    else:
        click.echo("no events", err=True)


@trace.command("show")
@db_option
@click.argument("event_id")
@json_option
def show(db: Path | None, event_id: str, as_json: bool) -> None:
    """Show one event in full (an unambiguous id prefix is enough)."""
    from memtap.cli.render import event_detail, event_json

    store = open_store(db)
    try:
        event = store.get_event(event_id)
    finally:
        store.close()
    if event is None:
        raise ConfigError(f"no event {event_id!r} in {store.path}")
    click.echo(event_json(event) if as_json else event_detail(event))


@trace.command("tail")
@db_option
@click.option("--op", type=click.Choice(OPS), help="Only this lifecycle operation.")
@click.option("--namespace", help="Only this namespace.")
@click.option(
    "--last", type=click.IntRange(min=0), default=10, show_default=True, help="Start with the last N."
)
@click.option(
    "--interval", type=click.FloatRange(min=0.01), default=0.25, show_default=True, help="Poll seconds."
)
@click.option("--count", type=click.IntRange(min=1), help="Stop after printing this many new events.")
@json_option
def tail(
    db: Path | None,
    op: str | None,
    namespace: str | None,
    last: int,
    interval: float,
    count: int | None,
    as_json: bool,
) -> None:
    """Follow new events as they are recorded (Ctrl-C stops)."""
    from memtap.cli.render import event_json, event_line
    from memtap.trace.models import TraceEvent

    store = open_store(db)
    printed = 0

    def emit(events: list[TraceEvent]) -> None:
        for event in events:
            if as_json:
                click.echo(event_json(event))
            else:
                click.echo("  ".join(str(cell) for cell in event_line(event) if cell != ""))

    try:
        backlog = store.list_events(op=op, namespace=namespace, limit=last, newest_first=True) if last else []
        emit(backlog)
        newest = store.list_events(limit=1, newest_first=True)
        cursor = backlog[-1].id if backlog else (newest[-1].id if newest else None)
        while count is None or printed < count:
            events = store.list_events(op=op, namespace=namespace, after_id=cursor, limit=500)
            if count is not None:
                events = events[: count - printed]
            if events:
                emit(events)
                printed += len(events)
                cursor = events[-1].id
            else:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
