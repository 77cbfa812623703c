"""``memtap suite``: validate, describe, import and generate benchmark suites."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from memtap.cli.from_trace import freeze, selection_options
from memtap.cli.options import json_option

__all__ = ["suite"]

IMPORT_KINDS = ("memprobe", "dyadmem", "locomo", "longmemeval", "memarena")
GEN_KINDS = ("paradigms", "permission", "abstention", "lifecycle", "canary")

_output = click.option(
    "-o",
    "--output",
    "output",
    required=True,
    metavar="OUT",
    help="Where the suite goes (JSON Lines); '-' writes to standard output.",
)


def _write(episodes: list[Any], output: str) -> None:
    from memtap.probes.suitefile import write_suite

    if output == "-":
        write_suite(episodes, sys.stdout)
    else:
        write_suite(episodes, Path(output))


def _summary(episodes: list[Any], output: str) -> None:
    from memtap.probes.stats import suite_stats

    stats = suite_stats(episodes)
    where = "standard output" if output == "-" else output
    types = ", ".join(f"{k} {v}" for k, v in sorted(stats["probes_by_type"].items()))
    click.echo(
        f"wrote {stats['episodes']} episodes, {stats['sessions']} sessions, {stats['turns']} turns and "
        f"{stats['probes']} probes ({types}) to {where}",
        err=output == "-",
    )


@click.group()
def suite() -> None:
    """Suites of benchmark episodes (format memtap-suite/1): validate, describe, import, generate."""


@suite.command()
@click.argument("file", type=click.Path(path_type=Path))
def validate(file: Path) -> None:
    """Check a suite against the format; list every problem with its file, line, episode and field."""
    from memtap.probes.suitefile import load_suite

    loaded = load_suite(file)
    click.echo(
        f"{file}: valid memtap-suite/1 suite, {len(loaded.episodes)} episodes (sha256 {loaded.sha256[:12]})"
    )


@suite.command()
@click.argument("file", type=click.Path(path_type=Path))
@json_option
def stats(file: Path, as_json: bool) -> None:
    """Episodes, sessions, turns, tokens, paradigms, probes by type, update/preserve balance,
    split episodes, and what shortcut answer policies would score."""
    from memtap.probes.stats import render_stats, suite_stats
    from memtap.probes.suitefile import load_suite

    loaded = load_suite(file)
    result = suite_stats(loaded.episodes)
    if as_json:
        click.echo(json.dumps({"file": str(file), "sha256": loaded.sha256, **result}))
    else:
        click.echo(render_stats(result))


@suite.command("import")
@click.argument("kind", type=click.Choice(IMPORT_KINDS))
@click.argument("file", type=click.Path(path_type=Path))
@_output
@click.option(
    "--skip-malformed",
    is_flag=True,
    help="Leave out records that cannot be converted (each is still reported) instead of failing.",
)
def import_(kind: str, file: Path, output: str, skip_malformed: bool) -> None:
    """Convert a published benchmark's file (MemArena: its release folder) into a suite.

    KIND is memprobe (episodes.jsonl), dyadmem, locomo (locomo10.json), longmemeval, or
    memarena. The result is validated before it is written."""
    from memtap.probes.importers import import_file

    result = import_file(kind, file, skip_malformed=skip_malformed)
    for problem in result.skipped:
        click.echo(f"memtap: skipped: {problem}", err=True)
    _write(result.episodes, output)
    _summary(result.episodes, output)


@suite.command()
@click.argument("kind", type=click.Choice(GEN_KINDS))
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same suite.")
@click.option(
    "--episodes", type=click.IntRange(min=1), default=8, show_default=True, help="How many episodes."
)
@_output
@click.option(
    "--paraphrase",
    "paraphrase",
    metavar="MODEL",
    help="Rewrite surface wording through this model of --config's model_list, keeping gold values verbatim.",
)
@click.option(
    "--config",
    "config",
    metavar="FILE",
    type=click.Path(path_type=Path),
    help="Config file whose model_list names the --paraphrase MODEL.",
)
@click.option("--users", type=int, help="canary: how many users (namespaces) [default: 8].")
@click.option("--writes", type=int, help="canary: writes, spread over the users [default: 2000].")
@click.option("--updates", type=int, help="canary: updates of earlier writes [default: 200].")
@click.option("--searches", type=int, help="canary: searches of a user's own namespace [default: 200].")
@click.option("--canaries", type=int, help="canary: secret canaries per user [default: 3].")
@click.option(
    "--shared-namespace",
    is_flag=True,
    help="canary: every other user also writes a canary to one namespace all users read.",
)
def gen(
    kind: str,
    seed: int,
    episodes: int,
    output: str,
    paraphrase: str | None,
    config: Path | None,
    users: int | None,
    writes: int | None,
    updates: int | None,
    searches: int | None,
    canaries: int | None,
    shared_namespace: bool,
) -> None:
    """Generate a suite deterministically from a seed (no LLM unless --paraphrase).

    KIND is paradigms (the four MemProbe paradigms, matched update/preserve pairs),
    permission (multi-party ALLOW/DENY), abstention (fabricated premises and grounded foils)
    or lifecycle (DyadMem-style capture and update gold), or canary (the isolation canary:
    --users users with secret canaries, --writes, --updates and --searches, then every user
    probed for every other's canaries; one episode, --episodes does not apply)."""
    from memtap.probes.generators import generate, generate_canary
    from memtap.probes.suitefile import check_episodes

    if config is not None and paraphrase is None:
        raise click.UsageError("--config names the model of --paraphrase MODEL; give both or neither")
    sizes = {"users": users, "writes": writes, "updates": updates, "searches": searches, "canaries": canaries}
    given = [f"--{name}" for name, value in sizes.items() if value is not None]
    if shared_namespace:
        given.append("--shared-namespace")
    if kind != "canary" and given:
        raise click.UsageError(f"{', '.join(given)} apply to the canary generator only")
    if kind == "canary":
        chosen = {name: value for name, value in sizes.items() if value is not None}
        made = generate_canary(seed, shared_namespace=shared_namespace, **chosen)
    else:
        made = generate(kind, seed=seed, episodes=episodes)
    if paraphrase is not None:
        from memtap.probes.generators.paraphrase import paraphrase_suite

        done = paraphrase_suite(made, model=paraphrase, config=config)
        made = done.episodes
        click.echo(
            f"paraphrased {done.rewritten} of {len(made)} episodes through {paraphrase}; "
            f"{len(done.kept)} kept their original wording (a gold value was lost)"
            + (f": {', '.join(done.kept)}" if done.kept else ""),
            err=True,
        )
    from memtap.probes.errors import SuiteInvalid
    from memtap.probes.suitefile import dump_episode

    _, _, problems = check_episodes(
        (f"generated[{i}]", json.loads(dump_episode(e))) for i, e in enumerate(made)
    )
    if problems:  # a generator bug, never the user's input: refuse to write a suite that would not load
        raise SuiteInvalid(f"the {kind} generator (seed {seed})", problems)
    _write(made, output)
    _summary(made, output)


@suite.command("from-trace")
@click.argument("trace_db", metavar="DB", type=click.Path(path_type=Path))
@selection_options("--run")
@_output
def from_trace(
    trace_db: Path, from_run: str | None, from_namespace: str | None, since: str | None, until: str | None,
    output: str,
) -> None:  # fmt: skip
    """Freeze recorded memory traffic into a suite: one episode per namespace, the writes, updates
    and deletes as turns (in their sessions and order, each naming its recorded tool and the source
    items it touched), the retrievals as probes (their queries and requesters), no gold. Failed
    calls and updates without new content are not carried, and counted."""
    episodes, not_carried = freeze(trace_db, from_run, from_namespace, since, until)
    _write(episodes, output)
    _summary(episodes, output)
    for what, count in sorted(not_carried.items()):
        click.echo(f"not carried as recorded: {count} {what}", err=True)
