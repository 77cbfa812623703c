"""``memtap replay``: play a suite through a target's front doors and record the run."""

from __future__ import annotations

import json
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from memtap.cli.from_trace import freeze, selection_options
from memtap.cli.hw import hw_options, hw_session
from memtap.cli.options import db_option, json_option, resolve_db
from memtap.errors import ConfigError

__all__ = ["replay"]


def _new_run_id() -> str:
    return f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _plan(
    store: Any,
    suite: Any,
    target: str,
    reader: str,
    run: str | None,
    resume: str | None,
    config: dict[str, Any],
) -> Any:
    """A new run, or the rest of one being resumed: the episodes still to play and their attempts."""
    from memtap.probes.errors import ReplayError
    from memtap.probes.replay import ReplayPlan

    if resume is None:
        run_id = run or _new_run_id()
        store.create_run(
            run_id,
            suite_path=suite.path,
            suite_sha256=suite.sha256,
            episodes=suite.episodes,
            target=target,
            config=config,
            reader=reader,
        )
        return ReplayPlan(
            run_id, list(suite.episodes), {}, config["workers"], config["top_k"], config["ingest"]
        )
    if run is not None and run != resume:
        raise ReplayError(f"--run {run} and --resume {resume} name different runs")
    found = store.get_run(resume)
    if found is None:
        raise ReplayError(f"no run {resume!r} in {store.path}")
    if found["suite_sha256"] != suite.sha256:
        raise ReplayError(
            f"run {resume} replayed a different suite (sha256 {found['suite_sha256'][:12]}, this file is "
            f"{suite.sha256[:12]}); resume it with the suite it started with ({found['suite_path']})"
        )
    if found["target"] != target:
        raise ReplayError(f"run {resume} played --target {found['target']}, not {target}")
    latest = store.last_attempts(resume)
    todo = [e for e in suite.episodes if latest.get(e.episode_id, {}).get("status") != "done"]
    store.reopen_run(resume)
    attempts = {episode_id: row["attempt"] for episode_id, row in latest.items()}
    return ReplayPlan(resume, todo, attempts, config["workers"], config["top_k"], config["ingest"])


def _frozen(
    trace_db: Path, db: Path, run: str | None, from_run: str | None, namespace: str | None,
    since: str | None, until: str | None,
) -> Path:  # fmt: skip
    """The --from-trace selection written as a suite file beside the run's database."""
    from memtap.probes.suitefile import write_suite

    episodes, not_carried = freeze(trace_db, from_run, namespace, since, until)
    out = db.parent / f"{db.stem}.from-trace-{run or from_run or 'all'}.jsonl"
    write_suite(episodes, out)
    click.echo(f"froze {len(episodes)} episode(s) from {trace_db} into {out}", err=True)
    for what, count in sorted(not_carried.items()):
        click.echo(f"not carried as recorded: {count} {what}", err=True)
    return out


def _report(summary: dict[str, Any], db: Path) -> None:
    run = summary["run"]
    click.echo(
        f"run {run} {summary['status']}: {summary['episodes_done']} episodes done, "
        f"{summary['episodes_failed']} failed, {summary['episodes_unfinished']} unfinished; "
        f"{summary['sessions']} sessions, {summary['turns']} turns, {summary['probes']} probes answered "
        f"({summary['sessions_played']} sessions played in {summary['wall_s']:.1f} s, "
        f"{summary['sessions_per_s']} sessions/s)"
    )
    for error, count in summary["failures"].items():
        click.echo(f"  failed ({count}): {error}")
    if "recorded_writes" in summary:
        w = summary["recorded_writes"]
        click.echo(
            f"recorded writes replayed: {w['done']} done, {w['skipped']} skipped, "
            f"{w['failed']} refused by the target; {summary['probes_refused']} retrievals refused "
            f"(memtap compare RUN {run} --writes --retrievals)"
        )
    click.echo(
        f"memory events recorded: {summary['memory_events']} "
        f"({summary['memory_events_without_context']} without run, episode, session and turn)"
    )
    click.echo(
        f"stored in {db}: tables runs, run_episodes, run_probes and suite_episodes; its trace is the events "
        f"with run_id = '{run}' (memtap trace list --run {run} --db {db})"
    )


@click.command()
@click.argument("suite_file", metavar="[SUITE]", required=False, type=click.Path(path_type=Path))
@click.option(
    "--from-trace",
    "from_trace",
    metavar="DB",
    type=click.Path(path_type=Path),
    help="Instead of SUITE: re-issue this trace database's recorded memory traffic (A/B replay).",
)
@selection_options("--from-run")
@click.option(
    "--target",
    required=True,
    help="builtin (the embedded backend), mem0:CONFIG (mem0 behind memtap serve --config CONFIG), "
    "mcp:CONFIG[:NAME] (a wrapped MCP server) or openai:URL[#MODEL].",
)
@click.option("--run", "run", metavar="NAME", help="Name of the run (default: run-DATE-TIME-XXXX).")
@click.option(
    "--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Episodes in parallel."
)
@click.option(
    "--reader",
    default="extractive",
    show_default=True,
    metavar="MODEL|extractive|none",
    help="Who answers probes from what was retrieved: extractive, none, or a model of --config.",
)
@click.option(
    "--resume", metavar="RUN", help="Finish this run: skip its done episodes, replay the rest afresh."
)
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    type=click.Path(path_type=Path),
    help="Config file whose model_list names the --reader MODEL.",
)
@db_option
@click.option(
    "--server",
    "server",
    metavar="URL",
    help="Use this running memtap serve (its /mcp URL), over HTTP. Without it the builtin and mem0 "
    "targets start memtap serve --stdio as a child.",
)
@click.option(
    "--top-k", type=click.IntRange(1, 100), default=5, show_default=True, help="Memories per probe."
)
@click.option(
    "--gate",
    type=click.Choice(["observe", "enforce"]),
    help="The access gate of the memtap serve the builtin target starts (default: the server's own).",
)
@click.option(
    "--ingest",
    type=click.Choice(["auto", "turn", "batch"]),
    default="auto",
    show_default=True,
    help="How turns are sent: the turns of the sessions up to the next probe in one memory_add_batch "
    "where the target takes them (auto: builtin and mem0), or one call per turn (turn; pipelined over "
    "builtin's stdio child); the trace is the same.",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal)."
)
@hw_options
@json_option
def replay(
    suite_file: Path | None,
    from_trace: Path | None,
    from_run: str | None,
    from_namespace: str | None,
    since: str | None,
    until: str | None,
    target: str,
    run: str | None,
    workers: int,
    reader: str,
    resume: str | None,
    config_file: Path | None,
    db: Path | None,
    server: str | None,
    top_k: int,
    gate: str | None,
    ingest: str,
    progress: bool | None,
    hw_probe: bool,
    hw_interval: float,
    hw_baseline: float,
    as_json: bool,
) -> None:
    """Replay a suite through a target, episode by episode, recording everything in --db.

    Each episode gets a fresh namespace; its sessions are played in time order, every turn
    through the target's front door with its context, and its probes are asked by their
    requesters. A suite that does not validate is refused before anything is replayed.
    Ctrl-C leaves a run that --resume finishes.

    With --from-trace DB instead of SUITE, the recorded memory traffic of DB (narrowed by
    --from-run, --namespace, --since, --until) is frozen into a suite beside --db (as
    `memtap suite from-trace` does) and replayed in recorded order with its context: writes,
    updates and deletes (an update or delete goes to the target's items made from the same
    recorded write; one with none is skipped, and why; a call the target refuses is recorded and
    the run goes on), and retrievals with their queries and requesters. `memtap compare A B
    --writes --retrievals` then sets two such runs side by side."""
    import anyio

    from memtap.probes.readers import make_reader
    from memtap.probes.replay import batch_ingest, replay_suite
    from memtap.probes.runs import RunStore
    from memtap.probes.suitefile import load_suite
    from memtap.probes.targets import make_target

    path = resolve_db(db)
    if (suite_file is None) == (from_trace is None):
        raise ConfigError("give a SUITE file or --from-trace DB (one of them)")
    if from_trace is None and any(v is not None for v in (from_run, from_namespace, since, until)):
        raise ConfigError("--from-run, --namespace, --since and --until select from --from-trace DB")
    if from_trace is not None:
        suite_file = _frozen(from_trace, path, run, from_run, from_namespace, since, until)
    assert suite_file is not None
    suite = load_suite(suite_file)
    answerer = make_reader(reader, config_file)
    the_target = make_target(target, db=path, server_url=server, gate=gate)
    batch_ingest(the_target, ingest)  # --ingest batch on a target without it: refused before the database
    store = RunStore(path)
    try:
        with hw_session(hw_probe, path, hw_interval, hw_baseline, "replay") as probe:
            config = {"workers": workers, "top_k": top_k, "server": server, "reader": reader, "gate": gate,
                      "ingest": ingest}  # fmt: skip
            plan = _plan(store, suite, target, reader, run, resume, config)
            if probe is not None:
                probe.link(plan.run_id)
            show = sys.stderr.isatty() if progress is None else progress
            try:
                summary = anyio.run(
                    lambda: replay_suite(suite, plan, the_target, store, answerer, show_progress=show)
                )
            except KeyboardInterrupt:
                click.echo(
                    f"\nmemtap: replay interrupted; finish it with: memtap replay {suite_file} --target "
                    f"{target} --resume {plan.run_id} --db {path}",
                    err=True,
                )
                sys.exit(130)
        if probe is not None:
            from memtap.hw.figures import replay_figures

            summary["hw"] = replay_figures(store.conn, plan.run_id)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        _report(summary, path)
        if summary.get("hw"):
            from memtap.hw.render import render_replay_figures

            click.echo("\n".join(render_replay_figures(summary["hw"])))
