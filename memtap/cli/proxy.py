"""``memtap proxy``: wrap MCP servers people already use, recording every memory call.

``memtap proxy --config FILE`` wraps the ``mcpServers`` of a Claude Desktop style
config; ``memtap proxy -- COMMAND ARGS...`` wraps one stdio server. The agent
talks to memtap over stdio (``--stdio``) or streamable HTTP (``--http``).
``memtap proxy status`` reports the upstreams of running proxies and
``memtap init-config`` prints the client configuration that routes a server
through memtap.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memtap.cli.hw import hw_options, hw_session
from memtap.cli.jwt import jwt_authenticators, jwt_options
from memtap.cli.options import (
    auth_options,
    auth_settings,
    content_policy_option,
    db_option,
    json_option,
    limit_options,
    loop_options,
    parse_host_port,
    resolve_db,
    serving_config,
)
from memtap.errors import ConfigError, MemtapError

if TYPE_CHECKING:
    from memtap.config import ConfigFile
    from memtap.limits import Limits

__all__ = ["init_config", "proxy"]

DEFAULT_HTTP = "127.0.0.1:8750"
_LAUNCHERS = {"npx", "uvx", "node", "nodejs", "python", "python3", "bunx", "deno", "pnpm", "pipx", "docker"}
_META_KEY = "memtap.proxy.command"


def upstream_name(command: list[str]) -> str:
    """A name for a wrapped command: its package or script, not the launcher that runs it."""
    words = [w for w in command[1:] if not w.startswith("-")] if Path(command[0]).name in _LAUNCHERS else []
    word = words[-1] if words and Path(command[0]).name == "docker" else (words[0] if words else command[0])
    base = word.rstrip("/").split("/")[-1].split("@")[0] or word
    base = base.removesuffix(".js").removesuffix(".py").removesuffix(".mjs")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in base) or "upstream"


def _rules(values: tuple[str, ...]) -> dict[str, str]:
    rules = {}
    for value in values:
        tool, sep, kind = value.partition("=")
        if not sep or kind not in ("write", "update", "delete", "retrieve", "read", "other"):
            raise ConfigError(f"--rule takes TOOL=write|update|delete|retrieve|read|other; got {value!r}")
        rules[tool] = kind
    return rules


def _upstreams(
    config: Path | None,
    command: list[str],
    *,
    name: str | None,
    only: str | None,
    profile: str | None,
    rules: dict[str, str],
    loaded: ConfigFile | None = None,
) -> tuple[dict[str, Any], bool]:
    """The servers to wrap, and whether they inherit memtap's environment (the ``--`` form).
    ``loaded``: the config file already read, so it is read once."""
    from memtap.adapters.profiles import find_profile
    from memtap.config import StdioServerConfig, load_config

    if config is not None and command:
        raise ConfigError("give either --config FILE or -- COMMAND ARGS..., not both")
    if profile is not None:
        find_profile(profile)  # an unknown profile is refused before anything starts
    if command:
        server = StdioServerConfig(command=command[0], args=command[1:])
        servers: dict[str, Any] = {name or upstream_name(command): server}
        inherit = True
    elif config is not None:
        servers = dict(load_config(config).enabled_servers() if loaded is None else loaded.enabled_servers())
        if not servers:
            raise ConfigError(f"config {config} has no enabled mcpServers to wrap")
        inherit = False
    else:
        raise ConfigError("nothing to wrap: give --config FILE (mcpServers) or -- COMMAND ARGS...")
    if only is not None:
        if only not in servers:
            raise ConfigError(
                f"unknown upstream {only!r}; {config or 'the command'} has: {', '.join(servers)}"
            )
        servers = {only: servers[only]}
    for server in servers.values():
        options = server.memtap.model_copy(
            update={"rules": {**server.memtap.rules, **rules}, "profile": profile or server.memtap.profile}
        )
        server.memtap = options
    return servers, inherit


class _ProxyGroup(click.Group):
    """``memtap proxy [OPTIONS] [-- COMMAND ARGS...]``, with subcommands (``status``) beside it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            return super().parse_args(ctx, args)
        rest = click.Command.parse_args(self, ctx, args)
        ctx.meta[_META_KEY] = list(rest)
        ctx.args = []
        return []

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] [-- COMMAND [ARGS]...] | status [OPTIONS]")


@click.group(cls=_ProxyGroup, invoke_without_command=True)
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A config file whose mcpServers to wrap (Claude Desktop format; YAML or JSON).",
)
@click.option("--stdio", is_flag=True, help="Serve MCP over standard input and output.")
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help=f"Serve streamable HTTP at /mcp (default {DEFAULT_HTTP}; port 0: a free port, printed).",
)
@click.option("--name", help="Name of the upstream given after -- (default: from the command).")
@click.option("--only", metavar="NAME", help="Wrap only this server of the config.")
@click.option(
    "--start",
    type=click.Choice(["eager", "lazy"]),
    default="eager",
    show_default=True,
    help="Start upstreams now, or at their first use.",
)
@click.option("--timeout", type=click.FloatRange(min=0.001), help="Seconds a call may take (default 30).")
@click.option("--profile", help="Classification profile for every upstream (default: detected).")
@click.option("--rule", "rules", multiple=True, metavar="TOOL=CLASS", help="Classify TOOL (glob) as CLASS.")
@click.option("--explain", is_flag=True, help="Print how every upstream tool is classified, and exit.")
@db_option
@click.option("--durable", is_flag=True, help="Commit each event before the caller gets its answer.")
@click.option("--api-key", "api_keys", multiple=True, metavar="KEY=PRINCIPAL", help="Accept this bearer key.")
@click.option("--principal", default="local", show_default=True, help="Principal of unauthenticated callers.")
@content_policy_option
@auth_options
@hw_options
@limit_options
@click.option("--console-spans", is_flag=True, help="Print OpenTelemetry spans to stderr.")
@jwt_options
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr.")
@click.pass_context
def proxy(
    ctx: click.Context,
    /,
    config: Path | None,
    stdio: bool,
    http: str | None,
    name: str | None,
    only: str | None,
    start: str,
    timeout: float | None,
    profile: str | None,
    rules: tuple[str, ...],
    explain: bool,
    db: Path | None,
    durable: bool,
    api_keys: tuple[str, ...],
    principal: str,
    content_policy: tuple[str, ...],
    grants: tuple[str, ...],
    act_for: tuple[str, ...],
    context_args: bool | None,
    hw_probe: bool,
    hw_interval: float,
    hw_baseline: float,
    limits: Limits,
    console_spans: bool,
    verbose: bool,
    **jwt_flags: str | None,
) -> None:
    """Wrap MCP servers (a config's mcpServers, or one command after --) and record every call.

    The agent sees the upstream tools unchanged; memtap records each call with its
    lifecycle class, context and real effects in one trace database.
    """
    if ctx.invoked_subcommand is not None:
        return
    import anyio

    from memtap.proxy.runtime import Settings
    from memtap.proxy.serve import serve as run
    from memtap.trace.privacy import parse_policy_rules

    # One process, one trace: the same file's model_list and memtap section serve the chat proxy.
    loaded, keys = serving_config(config, api_keys, verbose)
    command: list[str] = ctx.meta.get(_META_KEY, [])
    servers, inherit = _upstreams(
        config, command, name=name, only=only, profile=profile, rules=_rules(rules), loaded=loaded
    )
    if explain:
        anyio.run(lambda: _explain(servers, inherit, timeout))
        return
    bearer_jwts = jwt_authenticators(loaded, **jwt_flags)
    gate = (loaded.memtap.gate or "enforce") if bearer_jwts else None
    settings = Settings(
        db=resolve_db(db),
        durable=durable,
        api_keys=keys,
        config=loaded,
        default_principal=principal,
        limits=limits,
        console_spans=console_spans,
        **auth_settings(loaded, keys, grants=grants, act_for=act_for, context_args=context_args, gate=gate),
        authenticators=bearer_jwts,
        upstreams=servers,
        upstream_eager=start == "eager",
        upstream_timeout=timeout,
        upstream_inherit_env=inherit,
        content_policy=parse_policy_rules(content_policy),
    )
    address = parse_host_port(http) if http else (None if stdio else parse_host_port(DEFAULT_HTTP))
    with hw_session(hw_probe, settings.db, hw_interval, hw_baseline, "proxy"):
        anyio.run(lambda: run(settings, http=address, stdio=stdio), backend_options=loop_options())


async def _explain(servers: dict[str, Any], inherit: bool, timeout: float | None) -> None:
    from memtap.adapters.pool import UpstreamPool
    from memtap.cli.render import table
    from memtap.proxy.forward import exposed_name

    pool = UpstreamPool(servers, None, eager=False, timeout=timeout, inherit_env=inherit)
    async with pool.run():
        errors = await pool.start_all()
    counts: dict[str, int] = {}
    for upstream in pool.upstreams.values():
        for tool in upstream.classes:
            counts[tool] = counts.get(tool, 0) + 1
    rows = []
    for upstream in pool.upstreams.values():
        if errors[upstream.name] is not None:
            continue
        for tool, found in upstream.classes.items():
            shown = tool if counts[tool] == 1 else exposed_name(upstream.name, tool)
            rows.append([upstream.name, shown, found.kind.value, found.source, found.reason])
        profile = upstream.profile.name if upstream.profile else "none"
        effects = f", effects from {upstream.tap.method}" if upstream.tap is not None else ""
        click.echo(f"{upstream.name}: server {upstream.hello_name!r}, profile {profile}{effects}")
    if rows:
        click.echo(table(["upstream", "tool", "class", "source", "why"], rows))
    failed = {name: error for name, error in errors.items() if error is not None}
    if failed:
        raise MemtapError("; ".join(str(error) for error in failed.values()))


@proxy.command("status")
@db_option
@click.option("--url", help="Ask a proxy serving HTTP at this address (its /healthz) instead.")
@json_option
def status(db: Path | None, url: str | None, as_json: bool) -> None:
    """The state of every upstream of the running proxies (those writing to --db, or at --url)."""
    from memtap.adapters.pool import read_status_files
    from memtap.cli.render import table

    if url is not None:
        target = url if url.rstrip("/").endswith("/healthz") else url.rstrip("/") + "/healthz"
        try:
            with urllib.request.urlopen(target, timeout=5) as resp:
                health = json.load(resp)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"no memtap answered at {target}: {exc}") from None
        proxies = [{"pid": None, "db": health.get("db"), "upstreams": health.get("upstreams") or {}}]
    else:
        path = resolve_db(db)
        proxies = read_status_files(path)
        if not proxies:
            click.echo(f"no running memtap proxy writes to {path}", err=True)
            return
    if as_json:
        for found in proxies:
            click.echo(json.dumps(found))
        return
    rows = []
    for found in proxies:
        for up in found["upstreams"].values():
            retry = f" (retry in {up['retry_in_s']:.1f} s)" if up.get("retry_in_s") else ""
            rows.append(
                [
                    found.get("pid") or "",
                    up["name"],
                    up["state"] + retry,
                    up.get("pid") or "",
                    up.get("tools"),
                    up.get("profile") or "",
                    up.get("starts"),
                    up.get("crashes"),
                    (up.get("last_error") or "")[:120],
                ]
            )
    headers = ["proxy", "upstream", "state", "pid", "tools", "profile", "starts", "crashes", "last error"]
    click.echo(table(headers, rows))


def _memtap_command() -> list[str]:
    """The ``memtap`` executable a client should start: the console script installed beside
    this Python (a virtualenv's ``bin/memtap``), else the one on PATH, else the bare name."""
    beside = Path(sys.executable).parent / ("memtap.exe" if os.name == "nt" else "memtap")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("memtap")
    return [os.path.abspath(found) if found else "memtap"]


@click.command("init-config", context_settings={"ignore_unknown_options": True})
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Route every server of this client config through memtap.",
)
@db_option
@click.option("--http", "http", metavar="HOST:PORT", help="Print URL entries for a proxy serving HTTP here.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def init_config(config: Path | None, db: Path | None, http: str | None, command: tuple[str, ...]) -> None:
    """Print the mcpServers snippet that routes existing servers through memtap.

    Paste it over the server's entry in your client's configuration (Claude
    Desktop, Cursor, ...): the agent keeps its tools, memtap records the calls.
    Give --config FILE (your client's config) or -- COMMAND ARGS... (one server).
    """
    from memtap.config import StdioServerConfig

    servers, _ = _upstreams(config, list(command), name=None, only=None, profile=None, rules={})
    memtap = _memtap_command()
    db_args = ["--db", str(db.resolve())] if db is not None else []
    entries: dict[str, Any] = {}
    for name, server in servers.items():
        if http is not None:
            host, port = parse_host_port(http)
            entries[name] = {"type": "http", "url": f"http://{host}:{port}/servers/{name}/mcp"}
            continue
        if isinstance(server, StdioServerConfig):
            args = [
                *memtap[1:],
                "proxy",
                "--stdio",
                "--name",
                name,
                *db_args,
                "--",
                server.command,
                *server.args,
            ]
            entry: dict[str, Any] = {"command": memtap[0], "args": args}
            if server.env:
                entry["env"] = server.env
            if server.cwd:
                entry["cwd"] = server.cwd
        else:
            assert config is not None
            args = [
                *memtap[1:],
                "proxy",
                "--stdio",
                "--config",
                str(config.resolve()),
                "--only",
                name,
                *db_args,
            ]
            entry = {"command": memtap[0], "args": args}
        entries[name] = entry
    click.echo(json.dumps({"mcpServers": entries}, indent=2))
    if http is not None:
        where = f"--config {config.resolve()}" if config is not None else "-- " + " ".join(command)
        click.echo(f"# then run: memtap proxy --http {http} {where}", err=True)
