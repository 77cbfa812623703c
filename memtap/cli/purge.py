"""``memtap purge``: the right to be forgotten, for memtap's own trace and builtin backend."""

from __future__ import annotations

import json
from pathlib import Path

import click

from memtap.cli.options import db_option, json_option, resolve_db


def _default_by() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@click.command()
@db_option
@click.option("--namespace", help="Purge every item and call of this namespace.")
@click.option("--item", "item_ids", multiple=True, metavar="ID", help="Purge this memory item (repeatable).")
@click.option("--by", help="Who purges, for the receipts (default: the operating-system user).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@json_option
def purge(
    db: Path | None,
    namespace: str | None,
    item_ids: tuple[str, ...],
    by: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove a namespace's or some items' content from the database for good.

    Removes the content from the builtin backend (rows and full-text index) and from the
    trace (items, versions, effects, the calls that touched them), leaves one hashed receipt
    per item in purge_receipts, then checkpoints the WAL and vacuums the file so no byte of
    the content remains. Covers memtap's own database only, not a wrapped server's storage.
    Safe while `memtap serve` runs on the same file.
    """
    from memtap.trace.purge import purge as run

    report = run(
        resolve_db(db), namespace=namespace, item_ids=item_ids, by=by or _default_by(), dry_run=dry_run
    )
    if as_json:
        click.echo(json.dumps(report.as_dict(), ensure_ascii=False))
        return
    verb = "would purge" if dry_run else "purged"
    versions = sum(len(i.contents) for i in report.items)
    what = f"namespace {namespace!r}" if namespace is not None else "items"
    click.echo(f"{verb} {what}: {len(report.items)} item(s), {versions} text(s)")
    for item in report.items:
        click.echo(
            f"  {item.backend} {item.item_id} (namespace {item.namespace}): {len(item.contents)} text(s)"
        )
    for table, count in sorted(report.tables.items()):
        click.echo(f"  {table}: {count} row(s) {'would change' if dry_run else 'changed'}")
    if not dry_run:
        click.echo(
            f"receipts: purge_receipts where purge_id = {report.purge_id!r}; "
            f"WAL {report.checkpoint}; vacuumed"
        )
