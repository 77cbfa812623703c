#!/usr/bin/env python
"""Generate the reference pages in ``docs/`` from the code, so they cannot drift.

- ``docs/cli.md``: the ``--help`` text of every ``memtap`` command and subcommand;
- ``docs/trace-schema.md``: the SQL schema of a blank memtap database;
- ``docs/mcp-tools.md``: the MCP tools ``memtap serve`` offers, with their JSON schemas;
- ``docs/openapi.json``: the OpenAPI description of the HTTP API, as ``/openapi.json`` serves it.

Run ``.venv/bin/python scripts/gen_docs.py`` after changing a command, a migration or a
tool; ``--check`` only reports stale pages (exit 1). ``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100
REGENERATE = ".venv/bin/python scripts/gen_docs.py"

# FTS5 keeps its index in shadow tables named after the virtual table; they are internal.
FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_docsize", "_config", "_content")

TABLE_NOTES = {
    "_sqlite_migrations": (
        "Which migrations have been applied, per migration set (sqlite-utils' own table). "
        "Opening a database applies the pending ones."
    ),
    "events": (
        "One row per call through a front door, failed calls included. `id` sorts by start time. "
        "The context is stored whole as JSON in `context`, and its most-queried fields are copied into "
        "columns (`principal`, `namespace`, `requester`, `run_id`, `episode`, `session`, `turn`, `role`, "
        "`client`, `upstream`). `arguments` and `result` are the call's JSON; `gate` is the access "
        "gate's verdict on a retrieval (`observe:allow`, `observe:would-deny=ID,...`, "
        "`enforce:withheld=ID,...`)."
    ),
    "effects": (
        "What each event did to each memory item: `kind` is `add`, `update`, `delete` or `retrieve`; "
        "content and access tags (JSON) before and after; `rank` and `score` for retrievals. "
        "`seq` orders the effects of one event."
    ),
    "items": (
        "The state of every memory item any backend reported, materialised from effects in the same "
        "transaction that inserts the events. A delete closes `valid_to`; rows are never removed. "
        "`retrieved_count` counts retrieve effects."
    ),
    "item_versions": (
        "One row per version of an item, with its validity interval and the event that made it "
        "(`op` is the effect kind that opened the version)."
    ),
    "runs": (
        "One row per replay run (`memtap replay`): the suite's path and sha256, the target, its config and "
        "reader, the versions of memtap and its protocol libraries, start and end, `status` (`running`, "
        "`completed`, `interrupted`, `failed`: the target could not start) and, when it ends, a JSON "
        "`summary`; `resumed` counts `--resume`s."
    ),
    "run_episodes": (
        "One row per attempt at an episode in a run, with the fresh `namespace` it was played in, its "
        "`status` (`running`, `done`, `failed`, `interrupted`), the error, sessions, turns and probes done, "
        "and `timings` (JSON); `counts` (JSON, canary episodes) says what the replay sent and the target "
        "acknowledged or refused (writes, updates, searches, probes, escape attempts). A run's trace is the "
        "events in the namespaces of its `done` attempts (for a canary episode, the namespaces under it)."
    ),
    "run_probes": (
        "The answer to each probe in each attempt: requester, the reader's `answer` (JSON in the probe "
        "type's shape; NULL with `--reader none`), the ranked ids of the memories `retrieved`, and latency."
    ),
    "hw_runs": (
        "One row per command run with `--hw-probe` (docs/hardware.md): the command, the replay run it "
        "watched, start, end and the idle-baseline window (ISO text and Unix seconds), the interval, the "
        "probe's one-line `note`, samples taken, `dropped` (the database could not keep up), `gaps` "
        "(failed readings), `write_errors`, and the sampler thread's CPU seconds."
    ),
    "hw_devices": (
        "The devices of a probed run, described once: `host` or `gpu0`, `gpu1`, ...; `info` is JSON "
        "(GPU: index, UUID, driver, memory, power limit, whether it has an energy counter; host: name, "
        "platform, CPUs, Python)."
    ),
    "hw_samples": (
        "Every reading, at `ts` (Unix seconds): GPU power (W), energy counter (J), utilisation, memory "
        "used (MiB), temperature (C), clocks (MHz); host CPU utilisation (%), busy core-seconds and "
        "memtap's CPU seconds (counters). `error` marks a gap and says which call failed."
    ),
    "suite_episodes": (
        "The episodes of every suite a run replayed, keyed by the suite file's sha256 (written once), so "
        "a run can be scored from this database alone."
    ),
    "purge_receipts": (
        "One receipt per item removed by `memtap purge` (see [privacy.md](privacy.md)): the purge it "
        "belongs to, when and by whom, its `scope` (`namespace:NS` or `items`), the item's backend, id "
        "and namespace, how many texts it held (`versions`: versions and metadata), and `contents`, a "
        "JSON list of `{version, sha256, bytes}`. The content itself is gone from every table; where it "
        "was, the trace holds `purged;sha256:<hex>;bytes=<n>`."
    ),
    "builtin_memory": (
        "The embedded memory backend's own store (not part of the trace): one row per version of "
        "a memory. The current version of an item is the row with `valid_to IS NULL`; `closed_by` "
        "says whether an `update` or a `delete` closed a version."
    ),
    "builtin_memory_fts": (
        "The builtin backend's FTS5 search index over `builtin_memory` (external content). It holds "
        "exactly the current versions: each add, update and delete changes only the rows it touches."
    ),
}


def _note(text: str) -> str:
    return f"<!-- Generated by scripts/gen_docs.py from {text}. Do not edit by hand: run `{REGENERATE}`. -->"


# -- docs/cli.md ---------------------------------------------------------------------------------


def iter_contexts(ctx: click.Context) -> Iterator[click.Context]:
    """``ctx`` and a context for every visible subcommand below it, depth first, by name."""
    yield ctx
    command = ctx.command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from iter_contexts(click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))


def root_context() -> click.Context:
    from memtap.cli.main import cli

    return click.Context(
        cli, info_name="memtap", terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings
    )


def render_cli() -> str:
    contexts = list(iter_contexts(root_context()))
    lines = [
        "# Command-line reference",
        "",
        _note("the click commands in memtap/cli/"),
        "",
        "Every command prints this text with `--help` (or `-h`). Commands that read a trace take "
        "`--db`; without it they use `$MEMTAP_DB`, then `~/.memtap/memtap.db`.",
        "",
    ]
    lines += [f"- [`{ctx.command_path}`](#{_anchor(ctx.command_path)})" for ctx in contexts]
    for ctx in contexts:
        lines += ["", f"## {ctx.command_path}", "", "```text", ctx.command.get_help(ctx).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _anchor(heading: str) -> str:
    return heading.lower().replace(" ", "-")


# -- docs/trace-schema.md ------------------------------------------------------------------------


def _format_sql(sql: str) -> str:
    """SQL as the migration wrote it, less the indentation of the Python source it came from."""
    first, _, rest = sql.strip().partition("\n")
    if not rest:
        return first + ";"
    body = textwrap.dedent(rest)
    if not body.lstrip().startswith(")") and not body.splitlines()[-1].startswith(")"):
        body = textwrap.indent(body, "    ")  # a continued clause, not a column list
    return f"{first}\n{body}".rstrip() + ";"


def blank_schema() -> tuple[list[tuple[str, str]], list[tuple[str, str, str, str]]]:
    """Migrations applied and ``(type, name, table, sql)`` rows of a blank memtap database."""
    from memtap.adapters.builtin import BuiltinBackend
    from memtap.trace.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memtap.db"
        TraceStore(path).close()
        BuiltinBackend(path).conn.close()
        conn = sqlite3.connect(path)
        try:
            migrations = [
                (str(s), str(n))
                for s, n in conn.execute("SELECT migration_set, name FROM _sqlite_migrations ORDER BY id")
            ]
            rows = [
                (str(t), str(n), str(tb), str(sql))
                for t, n, tb, sql in conn.execute(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
                )
            ]
        finally:
            conn.close()
    return migrations, rows


def _is_internal(name: str, virtual_tables: set[str]) -> bool:
    if name.startswith("sqlite_"):
        return True
    return any(name == vt + suffix for vt in virtual_tables for suffix in FTS_SHADOW_SUFFIXES)


def render_schema() -> str:
    migrations, rows = blank_schema()
    virtual = {
        name for kind, name, _, sql in rows if kind == "table" and sql.upper().startswith("CREATE VIRTUAL")
    }
    tables = [name for kind, name, _, _ in rows if kind == "table" and not _is_internal(name, virtual)]
    lines = [
        "# Trace database schema",
        "",
        _note("a blank database created by memtap's migrations"),
        "",
        "memtap keeps everything in one SQLite file (default `~/.memtap/memtap.db`, or `$MEMTAP_DB`, "
        "or `--db`), in WAL mode: the trace (`events`, `effects`, `items`, `item_versions`) and the "
        "embedded memory backend's tables (`builtin_memory` and its search index). Two migration "
        "sets build it, `memtap.trace` and `memtap.builtin`; each is applied when the trace store or "
        "the backend opens the file, so new and old files take one path, and a file written by a "
        "newer memtap is refused rather than guessed at.",
        "",
        "Conventions: tables are plain so `sqlite3` or Datasette can browse a trace as it is. "
        "Timestamps are ISO 8601 text in UTC. Ids are 26-character time-sortable ids (ULID layout); "
        "builtin memory item ids are `mem_` followed by one. Structured values are JSON text: "
        "`context`, `arguments`, `result`, `tags*` (access tags: `owner`, `visibility`, "
        "`participants`, `allow`, `deny`, `sensitivity`), `derived_from`, `metadata` and "
        "`provenance`. Memory is never physically deleted by a call; a delete closes a validity interval. "
        "Only `memtap purge` removes content, leaving receipts; under a `hashed` or `none` content policy "
        "bodies in the trace are `sha256:<hex>;bytes=<n>` or `dropped;bytes=<n>` ([privacy.md](privacy.md)).",
        "",
        "SQLite's own tables and the FTS5 shadow tables (`*_data`, `*_idx`, `*_docsize`, "
        "`*_config`, `*_content`) are left out.",
        "",
        "## Migrations",
        "",
        "Applied to a blank database, in this order:",
        "",
        "| set | migration |",
        "| --- | --- |",
    ]
    lines += [f"| `{migration_set}` | `{name}` |" for migration_set, name in migrations]
    lines += ["", "## Tables"]
    for table in tables:
        lines += ["", f"### {table}", ""]
        if table in TABLE_NOTES:
            lines += [TABLE_NOTES[table], ""]
        statements = [_format_sql(sql) for _, name, tbl, sql in rows if tbl == table]
        lines += ["```sql", "\n".join(statements), "```"]
    return "\n".join(lines) + "\n"


# -- docs/mcp-tools.md ---------------------------------------------------------------------------


def _served_tools() -> dict[str, dict[str, Any]]:
    """The tools as ``tools/list`` serves them (MCP wire names), by name."""
    from memtap.proxy.mcp_server import _tool_list

    return {
        tool.name: tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        for tool in _tool_list(context_args=False)
    }


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_type_of(option) for option in prop["anyOf"] if option.get("type") != "null")
    if prop.get("type") == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    bounds = [
        f"{label} {prop[key]}"
        for key, label in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >="))
        if key in prop
    ]
    return str(prop.get("type", "any")) + (f" ({', '.join(bounds)})" if bounds else "")


def _argument_table(schema: dict[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """The properties of ``schema``, less ``skip``, as a Markdown table."""
    required = set(schema.get("required", []))
    lines = ["| argument | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
    for name, prop in schema.get("properties", {}).items():
        if name in skip:
            continue
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        lines.append(
            f"| `{name}` | {_type_of(prop)} | {'yes' if name in required else ''} | {default} |"
            f" {prop.get('description', '')} |"
        )
    return lines


def render_tools() -> str:
    from memtap.auth.resolve import HEADERS
    from memtap.limits import DEFAULT_LIMITS, install

    install(DEFAULT_LIMITS)  # the schemas show the default caps
    from memtap.proxy.tools import CONTEXT_FIELDS, TOOLS, AccessArg

    served = _served_tools()
    hints = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
    lines = [
        "# MCP tools",
        "",
        _note("memtap.proxy.tools.TOOLS"),
        "",
        "`memtap serve` offers these tools over stdio and streamable HTTP (`/mcp`). Every call, "
        "failed or not, is recorded as one event (a `memory_add_batch` as one `memory_add` event per "
        "item, unless the batch itself is refused). A successful call returns its result as JSON text "
        "and as `structuredContent`; a failure (bad arguments, unknown id, content too large) is a "
        "tool error (`isError: true`) with a one-line message, never a dropped connection.",
        "",
        "| tool | title | recorded op | " + " | ".join(hints) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in hints) + " |",
    ]
    for name, spec in TOOLS.items():
        annotations = served[name].get("annotations", {})
        flags = " | ".join(str(annotations.get(hint, "")).lower() for hint in hints)
        lines.append(f"| [`{name}`](#{name}) | {spec.title} | `{spec.op.value}` | {flags} |")
    lines += [
        "",
        "## Context",
        "",
        "Each call's context says who is calling, on whose memory, and where in a run it happens. "
        "The connection sets it: HTTP headers, then the request's `_meta` (an object under the key "
        '`"memtap"`), over the defaults (the namespace defaults to the principal). Tool arguments are '
        "the weakest source: they may fill a field the connection left empty, never change one it "
        "set (a contradiction is refused and recorded). The context arguments are not in the schemas "
        "below unless the server runs with `--context-args` (or `context_args: true`); calls that "
        "send them anyway are served by the same rules, except that a caller with a key may not "
        "choose another namespace by argument then. The principal itself is never taken from these: "
        "it comes from the API key (`Authorization: Bearer KEY`) when keys are configured; without "
        "keys (loopback only) from the `X-Memtap-Principal` header or `memtap serve --principal`; "
        "over stdio always from `--principal`. See [authorization.md](authorization.md).",
        "",
        "| field | HTTP header | `_meta.memtap` key | tool argument (`--context-args`) |",
        "| --- | --- | --- | --- |",
    ]
    header_of = {field: header for header, field in HEADERS.items()}
    for field in dict.fromkeys([*HEADERS.values(), *CONTEXT_FIELDS]):
        header = header_of.get(field)
        shown = "-".join(part.capitalize() for part in header.split("-")) if header else ""
        lines.append(
            f"| `{field}` | {f'`{shown}`' if shown else ''} | {f'`{field}`' if header else ''} | "
            f"{'yes' if field in CONTEXT_FIELDS else ''} |"
        )
    lines += [
        "",
        "## Access tags",
        "",
        "`memory_add` and `memory_update` take an `access` object: who may later be told the memory. "
        "Its owner is the namespace. Without it a memory is private to its namespace. An object "
        "argument sent as JSON text (as the MCP Inspector sends it) is accepted. On retrieval the gate "
        "checks each returned item's tags against the requester (`requester`; without one, the "
        "namespace when the caller may act for it, else the principal): "
        "`memtap serve --gate observe` records would-be denials on the event, `--gate enforce` also "
        "withholds those items.",
        "",
        *_argument_table(AccessArg.model_json_schema()),
    ]
    for name, spec in TOOLS.items():
        annotations = served[name].get("annotations", {})
        shown = ", ".join(
            f"`{hint}: {str(annotations[hint]).lower()}`" for hint in hints if hint in annotations
        )
        lines += [
            "",
            f"## {name}",
            "",
            f"**{spec.title}.** {spec.description}",
            "",
            f"Recorded as lifecycle op `{spec.op.value}`. Annotations: {shown}.",
            "",
            "Arguments (besides the context fields above):",
            "",
            *_argument_table(served[name]["inputSchema"], CONTEXT_FIELDS),
            *_batch_item_tables(name, served[name]["inputSchema"]),
            "",
            "<details><summary>Input schema (JSON Schema, as <code>tools/list</code> serves it)</summary>",
            "",
            "```json",
            json.dumps(served[name]["inputSchema"], indent=2, ensure_ascii=False),
            "```",
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"


def _batch_item_tables(name: str, schema: dict[str, Any]) -> list[str]:
    """For memory_add_batch: what one item holds, and its meta (the batch's own table says only 'items')."""
    from memtap.proxy.tools import BATCH_TOOL, CONTEXT_FIELDS

    if name != BATCH_TOOL:
        return []
    defs = schema.get("$defs", {})
    return [
        "",
        "Each item (`BatchItem`): `memory_add`'s arguments, and its own context in `meta`:",
        "",
        *_argument_table(defs["BatchItem"], CONTEXT_FIELDS),
        "",
        "An item's `meta` (`ItemMeta`) is weighed as a `memory_add` request's `_meta.memtap`: over the "
        "call's `_meta` and headers, and never against a field the operator pinned for the key. "
        "See [limits.md](limits.md) for what happens to a batch of the wrong shape and to a bad item.",
        "",
        *_argument_table(defs["ItemMeta"]),
    ]


# -- docs/openapi.json ---------------------------------------------------------------------------


def render_openapi() -> str:
    """The OpenAPI description ``/openapi.json`` serves, for the default caps and no config."""
    import asyncio

    from memtap.limits import DEFAULT_LIMITS, install
    from memtap.proxy.api_docs import openapi_document
    from memtap.proxy.app import create_app
    from memtap.proxy.runtime import Runtime, Settings

    install(DEFAULT_LIMITS)
    with tempfile.TemporaryDirectory() as folder:
        runtime = Runtime(Settings(db=Path(folder) / "openapi.db"))
        try:
            document = openapi_document(create_app(runtime))
        finally:
            asyncio.run(runtime.aclose())
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# -- the command ---------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "docs/cli.md": render_cli,
    "docs/trace-schema.md": render_schema,
    "docs/mcp-tools.md": render_tools,
    "docs/openapi.json": render_openapi,
}


def stale_pages(root: Path = ROOT) -> list[str]:
    """The pages whose file under ``root`` differs from what the code generates now."""
    stale = []
    for relative, render in PAGES.items():
        path = root / relative
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != render():
            stale.append(relative)
    return stale


def write_pages(root: Path = ROOT) -> list[str]:
    """Write every page under ``root``; returns the ones that changed."""
    changed = []
    for relative, render in PAGES.items():
        path = root / relative
        text = render()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(relative)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report stale pages; exit 1 if any")
    parser.add_argument("--root", type=Path, default=ROOT, help="project root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.root)
        for relative in stale:
            print(f"stale: {relative} (run {REGENERATE})", file=sys.stderr)
        return 1 if stale else 0
    for relative in write_pages(args.root):
        print(f"wrote {relative}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
