"""``memtap serve``: the MCP front door over the embedded memory backend, and the
OpenAI-compatible chat proxy over the upstreams of a config file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from memtap.cli.hw import hw_options, hw_session
from memtap.cli.jwt import jwt_authenticators, jwt_options
from memtap.cli.options import (
    auth_options,
    auth_settings,
    content_policy_option,
    db_option,
    limit_options,
    loop_options,
    parse_host_port,
    resolve_db,
    serving_config,
)

if TYPE_CHECKING:
    from memtap.limits import Limits

DEFAULT_HTTP = "127.0.0.1:8750"


@click.command()
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help=f"Serve streamable HTTP at /mcp (default {DEFAULT_HTTP}; port 0: a free port, printed).",
)
@click.option("--stdio", is_flag=True, help="Serve MCP over standard input and output.")
@db_option
@click.option("--durable", is_flag=True, help="Commit each event before the caller gets its answer.")
@click.option(
    "--api-key",
    "api_keys",
    multiple=True,
    metavar="KEY=PRINCIPAL",
    help="Accept this bearer key as this principal (repeatable; also $MEMTAP_API_KEYS).",
)
@click.option("--principal", default="local", show_default=True, help="Principal of unauthenticated callers.")
@click.option(
    "--gate",
    type=click.Choice(["observe", "enforce"]),
    default=None,
    help="Record access-tag violations on retrieval, or also withhold the items "
    "(default: enforce when keys or principals are configured, else observe; also memtap.gate).",
)
@auth_options
@click.option(
    "--max-content-bytes",
    type=click.IntRange(min=1),
    default=1 << 20,
    show_default=True,
    help="Largest memory content, in UTF-8 bytes.",
)
@limit_options
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML/JSON config: LiteLLM's model_list (chat upstreams at /v1) and a memtap section.",
)
@content_policy_option
@hw_options
@click.option("--console-spans", is_flag=True, help="Print OpenTelemetry spans to stderr.")
@jwt_options
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr.")
def serve(
    http: str | None,
    stdio: bool,
    db: Path | None,
    durable: bool,
    api_keys: tuple[str, ...],
    principal: str,
    gate: str | None,
    grants: tuple[str, ...],
    act_for: tuple[str, ...],
    context_args: bool | None,
    max_content_bytes: int,
    limits: Limits,
    config_path: Path | None,
    content_policy: tuple[str, ...],
    hw_probe: bool,
    hw_interval: float,
    hw_baseline: float,
    console_spans: bool,
    verbose: bool,
    **jwt_flags: str | None,
) -> None:
    """Serve memory tools over MCP (stdio and/or streamable HTTP), recording every call."""
    import anyio

    from memtap.proxy.runtime import Settings
    from memtap.proxy.serve import serve as run
    from memtap.trace.privacy import parse_policy_rules

    config, keys = serving_config(config_path, api_keys, verbose)
    bearer_jwts = jwt_authenticators(config, **jwt_flags)
    if bearer_jwts and gate is None:  # credentials are required: enforce, unless the config says
        gate = config.memtap.gate or "enforce"
    settings = Settings(
        db=resolve_db(db),
        durable=durable,
        api_keys=keys,
        config=config,
        default_principal=principal,
        max_content_bytes=max_content_bytes,
        limits=limits,
        **auth_settings(config, keys, grants=grants, act_for=act_for, context_args=context_args, gate=gate),
        authenticators=bearer_jwts,
        console_spans=console_spans,
        content_policy=parse_policy_rules(content_policy),
    )
    address = parse_host_port(http) if http else (None if stdio else parse_host_port(DEFAULT_HTTP))
    with hw_session(hw_probe, settings.db, hw_interval, hw_baseline, "serve"):
        anyio.run(lambda: run(settings, http=address, stdio=stdio), backend_options=loop_options())
