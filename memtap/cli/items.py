"""``memtap items``: memory items as the trace saw them, with their history."""

from __future__ import annotations

from pathlib import Path

import click

from memtap.cli.options import db_option, json_option, open_store
from memtap.errors import ConfigError


@click.group()
def items() -> None:
    """Memory items materialised from recorded effects (any backend)."""


@items.command("list")
@db_option
@click.option("--namespace", help="Only this namespace.")
@click.option("--all", "include_closed", is_flag=True, help="Include deleted items.")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True, help="At most N items.")
@json_option
def list_items(
    db: Path | None, namespace: str | None, include_closed: bool, limit: int, as_json: bool
) -> None:
    """List items (valid ones unless --all)."""
    from memtap.cli.render import ITEM_HEADERS, item_line, table

    store = open_store(db)
    try:
        found = store.list_items(namespace=namespace, include_closed=include_closed, limit=limit)
    finally:
        store.close()
    if as_json:
        for item in found:
            click.echo(item.model_dump_json(exclude_none=True))
    elif found:
        click.echo(table(ITEM_HEADERS, [item_line(item) for item in found]))
    else:
        click.echo("no items", err=True)


def _item(db: Path | None, item_id: str):  # type: ignore[no-untyped-def]
    store = open_store(db)
    try:
        item = store.get_item(item_id)
    finally:
        store.close()
    if item is None:
        raise ConfigError(f"no memory item {item_id!r} in the trace at {store.path}")
    return item


@items.command("show")
@db_option
@click.argument("item_id")
@json_option
def show(db: Path | None, item_id: str, as_json: bool) -> None:
    """Show an item: content, provenance, access tags and history."""
    from memtap.cli.render import item_detail

    item = _item(db, item_id)
    click.echo(item.model_dump_json(exclude_none=True) if as_json else item_detail(item))


@items.command("history")
@db_option
@click.argument("item_id")
@json_option
def history(db: Path | None, item_id: str, as_json: bool) -> None:
    """Every version of an item, with validity intervals and the events that made them."""
    from memtap.cli.render import table

    item = _item(db, item_id)
    if as_json:
        for version in item.history:
            click.echo(version.model_dump_json(exclude_none=True))
        return
    rows = [
        [
            f"v{v.version}",
            v.op.value,
            v.valid_from.isoformat(),
            v.valid_to.isoformat() if v.valid_to else "now",
            v.event_id,
            v.content,
        ]
        for v in item.history
    ]
    click.echo(table(["version", "op", "valid from", "valid to", "event", "content"], rows))
    if item.valid_to is not None:
        click.echo(f"deleted at {item.valid_to.isoformat()}")
