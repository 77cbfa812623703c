"""``memtap score`` and ``memtap compare``: measure replayed runs from the trace database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from memtap.cli.options import db_option, resolve_db
from memtap.errors import ConfigError

__all__ = ["compare", "score"]


def _open(db: Path | None) -> Any:
    from memtap.trace.migrations import MIGRATIONS
    from memtap.trace.sqlite import open_database

    path = resolve_db(db)
    if not path.exists():
        raise ConfigError(f"no trace database at {path} (replay a suite first, or pass --db)")
    return open_database(path, MIGRATIONS)


_format = [
    click.option("--json", "as_json", is_flag=True, help="Print the score file (JSON) instead of the table."),
    click.option("--markdown", is_flag=True, help="Print the report as Markdown."),
]


def _formats(func: Any) -> Any:
    for option in reversed(_format):
        func = option(func)
    return func


@click.command()
@click.argument("run")
@db_option
@_formats
@click.option(
    "--matcher",
    default="default",
    show_default=True,
    metavar="default|embedding:MODEL|llm:MODEL",
    help="How memory items are aligned to gold memories.",
)
@click.option(
    "--permission-judge",
    default="rules",
    show_default=True,
    metavar="rules|llm:MODEL",
    help="How permission answers are labelled.",
)
@click.option(
    "--answer-scorer",
    "answer_scorer",
    default=None,
    metavar="strict|memprobe|locomo|memarena|longmemeval:MODEL",
    help="How answers are scored: memtap's own rules (strict) or a published benchmark's scorer. "
    "Default: the published scorer of the suite's origin for an imported suite, else strict.",
)
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file whose model_list names the MODEL of --matcher, --permission-judge or --answer-scorer.",
)
@click.option("--strict", is_flag=True, help="Exit 2 when the run has problems (see the warnings).")
@click.option("--no-store", is_flag=True, help="Do not store the score in the database.")
def score(
    run: str,
    db: Path | None,
    as_json: bool,
    markdown: bool,
    matcher: str,
    permission_judge: str,
    answer_scorer: str | None,
    config: Path | None,
    strict: bool,
    no_store: bool,
) -> None:
    """Score a replayed RUN at three levels (storage, retrieval, answer) with profiles and 95%
    episode-bootstrap intervals, from the trace database alone; store the score file in it.

    Problems (a suite file changed since the replay, failed or unfinished episodes, probes
    without answers) are reported as warnings and counted in the score file's coverage."""
    from memtap.scoring.errors import ScoringStrict
    from memtap.scoring.judges import make_matcher, make_permission_judge
    from memtap.scoring.report import render_score
    from memtap.scoring.score import score_run, store_score

    chosen = make_matcher(matcher, config)
    judge = make_permission_judge(permission_judge, config)
    database = _open(db)
    try:
        scored = score_run(
            database.conn,
            run,
            matcher=chosen,
            permission_judge=judge,
            answer_scorer=answer_scorer,
            config=config,
        )
        if not no_store:
            store_score(database.conn, scored)
    finally:
        database.conn.close()
    report = scored.report
    if as_json:
        click.echo(json.dumps(report))  # the score file says which answer scorer it used, and why
    else:
        if not no_store:
            click.echo(
                f"score stored in {resolve_db(db)} (tables scores and alignments, run_id = '{run}')", err=True
            )
        click.echo(render_score(report, markdown=markdown))
        click.echo(f"memtap: {report['answer_scorer']['note']}", err=True)
    for warning in report["warnings"]:
        click.echo(f"memtap: warning: {warning}", err=True)
    if strict and report["warnings"]:
        raise ScoringStrict(f"run {run} has {len(report['warnings'])} problem(s); see the warnings above")


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@db_option
@click.option(
    "--db-b",
    "db_b",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The database of RUN_B, when it is not --db.",
)
@_formats
@click.option(
    "--retrievals",
    is_flag=True,
    help="Instead: per probe, what each run retrieved (overlap at --k, same first, only-A/B, latency).",
)
@click.option(
    "--writes",
    is_flag=True,
    help="Instead: per recorded write of two A/B replays, what each backend did (added, merged, updated, "
    "deleted, skipped, failed) and its latency. With --retrievals too: both tables.",
)
@click.option(
    "--k", "k", type=click.IntRange(1, 100), default=5, show_default=True, help="Top k for --retrievals."
)
def compare(
    run_a: str, run_b: str, db: Path | None, db_b: Path | None, as_json: bool, markdown: bool,
    retrievals: bool, writes: bool, k: int,
) -> None:  # fmt: skip
    """Paired bootstrap differences (RUN_B minus RUN_A) of every headline measure, over the episodes
    both runs scored. Uses each run's latest stored score, scoring a run that has none.

    With --retrievals: per probe both runs answered, what each backend returned (for A/B replays
    of recorded traffic, which have no gold to score). With --writes: per recorded write of two
    A/B replays, what each backend did. With both: the writes, then the retrievals (JSON: one object
    with "writes" and "retrievals")."""
    if retrievals or writes:
        _compare_ab(run_a, run_b, db, db_b, as_json, retrievals=retrievals, writes=writes, k=k)
        return
    from memtap.scoring.compare import compare_scores
    from memtap.scoring.report import render_compare
    from memtap.scoring.score import latest_score, score_run, store_score

    def load(run: str, where: Path | None) -> dict[str, Any]:
        database = _open(where)
        try:
            found = latest_score(database.conn, run)
            if found is None:
                scored = score_run(database.conn, run)
                store_score(database.conn, scored)
                found = scored.report
            return found
        finally:
            database.conn.close()

    result = compare_scores(load(run_a, db), load(run_b, db_b or db))
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(render_compare(result, markdown=markdown))


def _compare_ab(
    run_a: str, run_b: str, db: Path | None, db_b: Path | None, as_json: bool, *,
    retrievals: bool, writes: bool, k: int,
) -> None:  # fmt: skip
    from memtap.scoring.retrievals import compare_retrievals, render_retrievals
    from memtap.scoring.writes import compare_writes, render_writes

    found: dict[str, Any] = {}
    first, second = _open(db), _open(db_b or db)
    try:
        if writes:
            found["writes"] = compare_writes(first.conn, run_a, second.conn, run_b)
        if retrievals:
            found["retrievals"] = compare_retrievals(first.conn, run_a, second.conn, run_b, k=k)
    finally:
        first.conn.close()
        second.conn.close()
    if as_json:
        both = {"format": "memtap-compare-ab/1", **found}
        click.echo(json.dumps(both if len(found) == 2 else next(iter(found.values()))))
        return
    texts = {"writes": render_writes, "retrievals": render_retrievals}
    click.echo("\n\n".join(texts[name](value) for name, value in found.items()))
