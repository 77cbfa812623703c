"""``memtap verify``: does the trace equal the backend's state? Report (and record) every difference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memtap.cli.options import content_policy_option, db_option, json_option, open_store
from memtap.errors import ConfigError

if TYPE_CHECKING:
    from memtap.trace.privacy import TracePrivacy
    from memtap.verify import BackendState

__all__ = ["verify"]


def _server_state(config_path: Path, name: str) -> BackendState:
    """The reference memory server ``name``'s graph: its storage file, else its own read_graph."""
    from memtap.adapters.graph_state import FileState, graph_from_result, memory_file_for
    from memtap.config import load_config
    from memtap.verify import graph_state

    servers = load_config(config_path).mcp_servers
    if name not in servers:
        known = ", ".join(servers) or "none"
        raise ConfigError(f"{config_path}: no server {name!r} in mcpServers (it has: {known})")
    path = memory_file_for(servers[name])
    if path is not None:
        if not path.exists():
            return graph_state(FileState(path).scan_all(), f"file {path} (absent: an empty graph)")
        return graph_state(FileState(path).scan_all(), f"file {path}")

    import anyio

    from memtap.adapters.pool import UpstreamPool

    async def read() -> BackendState:
        pool = UpstreamPool({name: servers[name]}, None, eager=False)
        async with pool.run():
            result = await pool.get(name).call_tool("read_graph", {})
        return graph_state(graph_from_result(result), f"read_graph of {name}")

    return anyio.run(read)


def _privacy(config_path: Path | None, rules: tuple[str, ...]) -> TracePrivacy:
    """What the serving process applies to every event: --content-policy rules, then the
    config's memtap.content_policy, and the config's secrets (its keys and credentials)."""
    from memtap.config import ConfigFile, load_config
    from memtap.trace.privacy import ContentPolicy, TracePrivacy, parse_policy_rules, secrets_of

    config = load_config(config_path) if config_path is not None else ConfigFile()
    ordered = [*parse_policy_rules(rules), *config.memtap.content_policy.items()]
    return TracePrivacy(ContentPolicy(ordered), secrets_of(config, {}, config.mcp_servers.values()))


@click.command()
@db_option
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False),
              help="The serving config: --server names its mcpServers entry;"
              " its content policy and secrets apply to --record.")  # fmt: skip
@click.option("--server", help="The wrapped reference memory server to compare (with --config).")
@click.option("--builtin", is_flag=True, help="Compare the builtin backend's rows in the database.")
@click.option("--record", is_flag=True, help="Record the differences as one event with reconciled effects.")
@click.option("--principal", default="local", show_default=True, help="Principal of the recorded event.")
@content_policy_option
@json_option
def verify(
    db: Path | None,
    config_path: Path | None,
    server: str | None,
    builtin: bool,
    record: bool,
    principal: str,
    content_policy: tuple[str, ...],
    as_json: bool,
) -> None:
    """Compare a backend's whole state with the items the trace implies.

    Reports every difference (missing in trace, missing in backend, content differs,
    deleted in one only) and exits 1 when there is any, 0 when there is none. With
    --record, the differences are also recorded as one control event whose reconciled
    effects make the trace's items match the backend, under the same content policy and
    secret redaction as the serving process (give it the same --config and --content-policy).
    Verify a stopped proxy's server, or expect differences for the writes in flight.
    """
    from memtap.verify import builtin_state, compare, record_differences, trace_items

    if builtin == (server is not None):
        raise ConfigError("give exactly one of --builtin or --server NAME (with --config FILE)")
    if server is not None and config_path is None:
        raise ConfigError("--server needs --config FILE (the config that wraps it)")
    store = open_store(db)
    try:
        backend = "builtin" if builtin else str(server)
        state = builtin_state(store.path) if builtin else _server_state(config_path or Path(), backend)
        differences = compare(state, trace_items(store, backend))
        recorded = None
        if record and differences:
            privacy = _privacy(config_path, content_policy)
            writer = type(store)(store.path)
            try:
                recorded = record_differences(
                    writer, backend, state, differences, principal=principal, privacy=privacy
                )
            finally:
                writer.close()
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "backend": backend,
                    "read": state.read,
                    "read_at": state.read_at,
                    "backend_items": len(state.current),
                    "differences": [d.as_dict() for d in differences],
                    "recorded_event": recorded,
                },
                ensure_ascii=False,
            )
        )
    else:
        click.echo(f"{backend}: {len(state.current)} item(s) read from {state.read}")
        for diff in differences:
            shown = diff.backend_content if diff.backend_content is not None else diff.trace_content
            click.echo(f"{diff.kind:<24} {diff.item_id}  {shown!r}")
        told = f"; recorded as event {recorded}" if recorded else ""
        click.echo(f"{len(differences)} difference(s){told}")
    if differences:
        raise SystemExit(1)
