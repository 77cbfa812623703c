"""``memtap check`` (the detectors over a trace, a CI gate) and ``memtap findings list|show``."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from memtap.cli.options import db_option, json_option, open_store
from memtap.errors import ConfigError

# Findings quote what clients and wrapped servers sent (errors, item ids, namespaces): shown on a
# terminal, their control characters are written as escapes, never sent to the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _shown(value: object) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


SEVERITIES = click.Choice(["info", "low", "medium", "high", "critical"])


def _since(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"--since {value!r}: give an ISO 8601 time, e.g. 2026-12-01T10:00:00+00:00"
        ) from None
    if parsed.tzinfo is None:
        raise ConfigError(f"--since {value!r}: give a time zone (e.g. +00:00 or Z)")
    return parsed.astimezone(UTC).isoformat()  # events are stored in UTC; compare like with like


def _canaries(config: Path | None) -> list:  # type: ignore[type-arg]
    if config is None:
        return []
    from memtap.config import load_config

    return load_config(config).memtap.findings.canary_list()


@click.command()
@db_option
@click.option("--run", help="Only the events of this replay run.")
@click.option("--since", help="Only findings of events that started at or after this ISO time.")
@click.option(
    "--fail-on",
    type=SEVERITIES,
    default="high",
    show_default=True,
    help="Exit 1 when findings at or above this severity exist.",
)
@click.option("--detector", "only", multiple=True, help="Run only this detector (repeatable).")
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file whose memtap.findings.canaries to check for.",
)
@click.option("--no-save", is_flag=True, help="Do not store the findings in the database.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Processes to check on, the trace split by namespace (same findings). "
    "Default: one per core for a trace of 50,000 events or more, else one.",
)
@json_option
def check(
    db: Path | None,
    run: str | None,
    since: str | None,
    fail_on: str,
    only: tuple[str, ...],
    config: Path | None,
    no_save: bool,
    workers: int | None,
    as_json: bool,
) -> None:
    """Run every detector over a trace database; exit 1 when findings at or above --fail-on exist.

    Findings are stored in the database (once: running check again adds only new ones) and
    printed; --json prints one finding per line. Exit codes: 0 clean, 1 findings at or above
    the threshold, 2 an error.
    """
    from memtap.findings.check import check_trace
    from memtap.findings.model import Severity

    threshold = Severity.parse(fail_on)
    canaries = _canaries(config)
    store = open_store(db)
    try:
        result = check_trace(
            store,
            run=run,
            since=_since(since),
            canaries=canaries,
            only=only or None,
            save=not no_save,
            workers=workers,
        )
    finally:
        store.close()
    failing = result.at_least(threshold)
    if as_json:
        for finding in result.findings:
            click.echo(json.dumps(finding.as_dict(), ensure_ascii=False, default=str))
    else:
        for finding in result.findings:
            click.echo(
                _shown(
                    f"{finding.severity.label:8}  {finding.kind:19}  {finding.event_id}  {finding.summary}"
                )
            )
        counts: dict[str, int] = {}
        for finding in result.findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none"
        click.echo(
            f"checked {result.events} events: {len(result.findings)} findings ({by_kind}); "
            f"{len(failing)} at or above {threshold.label}; {len(result.undetermined())} not judged",
            err=True,
        )
    if result.detector_errors:
        click.echo(
            f"memtap: warning: {result.detector_errors} detector errors; last: {result.last_error}", err=True
        )
    if failing:
        sys.exit(1)


@click.group()
def findings() -> None:
    """Findings stored by live detection or memtap check."""


@findings.command("list")
@db_option
@click.option("--kind", help="Only this detector's findings.")
@click.option("--severity", type=SEVERITIES, help="Only findings at or above this severity.")
@click.option("--namespace", help="Only this namespace.")
@click.option("--run", help="Only this replay run.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=200, show_default=True, help="At most N findings."
)
@json_option
def list_findings(
    db: Path | None,
    kind: str | None,
    severity: str | None,
    namespace: str | None,
    run: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List stored findings, oldest event first."""
    from memtap.cli.render import table
    from memtap.findings.model import Severity
    from memtap.findings.storage import list_findings as query

    store = open_store(db)
    try:
        found = query(
            store.db,
            kind=kind,
            min_severity=Severity.parse(severity) if severity else None,
            namespace=namespace,
            run=run,
            limit=limit,
        )
    finally:
        store.close()
    if as_json:
        for finding in found:
            click.echo(json.dumps(finding.as_dict(), ensure_ascii=False, default=str))
    elif found:
        rows = [
            [
                _shown(c)
                for c in (f.id or "", f.severity.label, f.kind, f.namespace or "", f.event_id, f.summary[:80])
            ]
            for f in found
        ]
        click.echo(table(["id", "severity", "kind", "namespace", "event", "summary"], rows))
    else:
        click.echo("no findings", err=True)


@findings.command("show")
@db_option
@click.argument("finding_id")
@json_option
def show(db: Path | None, finding_id: str, as_json: bool) -> None:
    """Show one finding with its evidence (an id or a unique prefix)."""
    from memtap.findings.storage import get_finding

    store = open_store(db)
    try:
        finding = get_finding(store.db, finding_id)
    finally:
        store.close()
    if finding is None:
        raise ConfigError(f"no finding {finding_id!r} in the trace at {store.path}")
    data = finding.as_dict()
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
        return
    for key in (
        "id",
        "kind",
        "severity",
        "summary",
        "namespace",
        "run",
        "episode",
        "session",
        "turn",
        "event_id",
        "event_ids",
        "item_ids",
        "detector_version",
        "created_at",
    ):
        if data[key] not in (None, []):
            click.echo(_shown(f"{key}: {data[key]}"))
    click.echo("evidence:")
    evidence = json.dumps(data["evidence"], ensure_ascii=False, indent=2, default=str)
    click.echo("\n".join(_shown(line) for line in evidence.splitlines()))
