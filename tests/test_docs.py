"""The docs cannot drift from the code: generated pages are current, and the README names
only commands, options, headers, tools and files that exist."""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import shlex
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

from memtap.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REGENERATE = ".venv/bin/python scripts/gen_docs.py"

# Flags in the README that belong to other programs: `claude mcp add`, and the benchmark scripts.
FOREIGN_FLAGS = {
    "--transport",
    "--header",
    "--quick",
    "--part",
    "--no-journal",
}  # --quick, --part, --no-journal: benchmark scripts


@pytest.fixture(scope="module")
def gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- generated pages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "page", ["docs/cli.md", "docs/trace-schema.md", "docs/mcp-tools.md", "docs/openapi.json"]
)
def test_generated_page_matches_the_code(gen_docs: ModuleType, page: str) -> None:
    assert page in gen_docs.PAGES
    expected = gen_docs.PAGES[page]()
    path = ROOT / page
    actual = path.read_text(encoding="utf-8") if path.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                actual.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                f"{page} (in the repository)",
                f"{page} (generated now)",
            )
        )
        pytest.fail(f"{page} is stale; run `{REGENERATE}` and commit the result.\n{diff[:4000]}")


def test_generator_check_mode_reports_missing_stale_and_current_pages(
    gen_docs: ModuleType, tmp_path: Path
) -> None:
    assert gen_docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert gen_docs.main(["--root", str(tmp_path)]) == 0
    assert gen_docs.main(["--check", "--root", str(tmp_path)]) == 0
    edited = tmp_path / "docs" / "cli.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nhand edit\n", encoding="utf-8")
    assert gen_docs.stale_pages(tmp_path) == ["docs/cli.md"]
    assert gen_docs.main(["--check", "--root", str(tmp_path)]) == 1


def _all_commands(
    command: click.Command, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from _all_commands(sub, (*path, name))


def test_cli_reference_has_every_command_and_option(gen_docs: ModuleType) -> None:
    text = gen_docs.render_cli()
    commands = list(_all_commands(cli, ("memtap",)))
    assert len(commands) >= 10
    for path, command in commands:
        heading = "## " + " ".join(path)
        assert re.search(rf"^{re.escape(heading)}$", text, re.M), f"no section for {' '.join(path)}"
        section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        assert f"Usage: {' '.join(path)}" in section
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("-"):
                    assert opt in section, f"{' '.join(path)}: option {opt} missing from its section"


def _user_tables(path: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        names = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
        ]
        virtual = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")
        ]
        shadow = {v + s for v in virtual for s in ("_data", "_idx", "_docsize", "_config", "_content")}
        return {
            name: [col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')]
            for name in names
            if not name.startswith("sqlite_") and name not in shadow
        }
    finally:
        conn.close()


def test_schema_page_has_every_table_and_column_and_no_fts_shadow_tables(
    gen_docs: ModuleType, tmp_path: Path
) -> None:
    from memtap.adapters.builtin import BuiltinBackend
    from memtap.trace.store import TraceStore

    db = tmp_path / "blank.db"
    TraceStore(db).close()
    BuiltinBackend(db).conn.close()
    tables = _user_tables(db)
    assert {"events", "effects", "items", "item_versions", "builtin_memory", "builtin_memory_fts"} <= set(
        tables
    )
    text = gen_docs.render_schema()
    headings = re.findall(r"^### (\S+)$", text, re.M)
    assert headings == list(tables)
    for table, columns in tables.items():
        section = text.split(f"### {table}\n", 1)[1].split("\n### ", 1)[0]
        for column in columns:
            assert re.search(rf"\b{re.escape(column)}\b", section), (
                f"{table}.{column} missing from the schema page"
            )
    assert "builtin_memory_fts_data" not in text and "builtin_memory_fts_idx" not in text


def test_tools_page_has_every_tool_and_argument(gen_docs: ModuleType) -> None:
    from memtap.proxy.tools import TOOLS

    text = gen_docs.render_tools()
    assert re.findall(r"^## (memory_\w+)$", text, re.M) == list(TOOLS)
    for name, spec in TOOLS.items():
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert spec.description in section
        assert f"lifecycle op `{spec.op.value}`" in section
        for prop in spec.input_schema()["properties"]:
            assert f'"{prop}"' in section, f"{name}: argument {prop} missing from its schema"


# -- the README ----------------------------------------------------------------------------------

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.M | re.S)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SHELL_OPERATOR = re.compile(r"^[;&|()<>]+$")


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(info string, body)`` of every fenced code block."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(markdown)]


def inline_code(markdown: str) -> list[str]:
    """Inline code spans outside fenced blocks."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", markdown))


def memtap_invocations(script: str) -> list[list[str]]:
    """The arguments of every ``memtap`` command line in a shell snippet.

    Follows backslash continuations, drops comments, splits at ``;``, ``&&``, ``|``,
    skips leading ``VAR=value`` assignments, and accepts ``memtap`` by any path.
    """
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = []
        for token in lexer:
            if token.startswith("#"):
                break
            tokens.append(token)
        segment: list[str] = []
        for token in [*tokens, ";"]:
            if not SHELL_OPERATOR.match(token):
                segment.append(token)
                continue
            while segment and ASSIGNMENT.match(segment[0]):
                segment.pop(0)
            if segment and Path(segment[0]).name == "memtap":
                found.append(segment[1:])
            segment = []
    return found


def check_invocation(args: Sequence[str]) -> str | None:
    """Why ``memtap ARGS`` would not run as written (None when it parses)."""
    command: click.Command = cli
    path = ["memtap"]
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(click.Context(command), rest[0])
        if sub is None:
            return f"{' '.join(path)} has no command {rest[0]!r}"
        command = sub
        path.append(rest.pop(0))
    try:
        with command.make_context(" ".join(path), list(rest)):
            pass
    except click.exceptions.Exit:  # --help or --version: a real option that exits
        return None
    except click.UsageError as exc:
        return f"{' '.join(path)}: {exc.format_message()}"
    if isinstance(command, click.Group) and not command.invoke_without_command:
        return f"{' '.join(path)} is a group: name one of its commands"
    return None


def readme_invocations() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for info, body in code_blocks(text):
        if info != "json":
            found += memtap_invocations(body)
    for span in inline_code(text):
        if span.startswith("memtap "):
            found += memtap_invocations(span)
    return found


def test_invocation_checker_rejects_what_memtap_would_reject() -> None:
    assert check_invocation(["serve", "--stdio", "--db", "x.db"]) is None
    assert check_invocation(["trace", "show", "01ABC", "--json"]) is None
    assert check_invocation(["--version"]) is None
    assert check_invocation(["trace", "nope"]) is not None
    assert check_invocation(["replay"]) is not None
    assert check_invocation(["serve", "--no-such-flag"]) is not None
    assert check_invocation(["serve", "--gate", "block"]) is not None
    assert check_invocation(["items", "show"]) is not None  # ITEM_ID is required
    assert check_invocation(["trace"]) is not None


def test_shell_snippets_are_split_like_a_shell() -> None:
    snippet = "X=1 Y=2 .venv/bin/memtap trace list --json | jq . && memtap items list  # memtap nope\n"
    snippet += "memtap serve \\\n  --stdio; echo memtap"
    assert memtap_invocations(snippet) == [
        ["trace", "list", "--json"],
        ["items", "list"],
        ["serve", "--stdio"],
    ]


def test_every_memtap_command_in_the_readme_exists_and_parses() -> None:
    invocations = readme_invocations()
    assert len(invocations) >= 15, "expected the README to show memtap's commands"
    problems = [
        f"memtap {shlex.join(args)}: {why}" for args in invocations if (why := check_invocation(args))
    ]
    assert not problems, "README.md shows commands memtap would reject:\n" + "\n".join(problems)
    shown = {tuple(a for a in args if not a.startswith("-"))[:2] for args in invocations}
    for path, command in _all_commands(cli, ()):
        if path and not isinstance(command, click.Group):
            assert any(s[: len(path)] == path for s in shown), (
                f"README.md never shows `memtap {' '.join(path)}`"
            )


def test_every_long_option_in_the_readme_is_a_memtap_option() -> None:
    known = set(FOREIGN_FLAGS)
    for _, command in _all_commands(cli, ()):
        for param in command.params:
            known.update(param.opts)
            known.update(param.secondary_opts)
    known.update({"--help", "--version"})
    text = README.read_text(encoding="utf-8")
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    assert used, "expected the README to mention options"
    assert used <= known, f"README.md mentions options no memtap command has: {sorted(used - known)}"


def _json_blocks() -> list[Any]:
    blocks = [body for info, body in code_blocks(README.read_text(encoding="utf-8")) if info == "json"]
    return [json.loads(body) for body in blocks]


def test_readme_mcp_client_config_starts_a_real_memtap_command() -> None:
    configs = [block for block in _json_blocks() if isinstance(block, dict) and "mcpServers" in block]
    assert configs, "expected an mcpServers example in README.md"
    servers = [server for config in configs for server in config["mcpServers"].values()]
    memtap_servers = [s for s in servers if Path(s["command"]).name == "memtap"]
    assert memtap_servers
    for server in memtap_servers:
        assert check_invocation(server["args"]) is None, server["args"]
    assert any("--stdio" in server["args"] for server in memtap_servers)


def test_readme_tool_call_example_is_a_valid_call() -> None:
    from memtap.auth import Caller, fields_from_meta, resolve_context
    from memtap.proxy.tools import TOOLS, parse_arguments

    calls = [b for b in _json_blocks() if isinstance(b, dict) and b.get("method") == "tools/call"]
    assert calls, "expected a tools/call example in README.md"
    for call in calls:
        params = call["params"]
        assert params["name"] in TOOLS
        parse_arguments(TOOLS[params["name"]], params["arguments"])
        meta = params["_meta"]
        fields = fields_from_meta(meta)
        assert set(fields) == set(meta["memtap"]), "README _meta uses keys memtap ignores"
        resolve_context(Caller("p"), layers=(fields,))


def test_readme_names_exactly_the_context_headers_memtap_reads() -> None:
    from memtap.auth import LocalAuthenticator
    from memtap.auth.resolve import HEADERS

    # X-Memtap-Principal is read by the keyless gate, not the context resolver: check it is honoured.
    caller = LocalAuthenticator("local").authenticate({"x-memtap-principal": "bob"})
    assert caller is not None and caller.principal == "bob"
    read = {*HEADERS, "x-memtap-principal"}
    text = README.read_text(encoding="utf-8")
    named = {h.lower() for h in re.findall(r"X-Memtap-[A-Za-z-]*[A-Za-z]", text, re.I)}
    assert named <= read, f"README.md names headers memtap ignores: {sorted(named - read)}"
    assert set(HEADERS) <= named, f"README.md omits context headers: {sorted(set(HEADERS) - named)}"


def test_readme_links_to_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in t]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_opens_with_what_memtap_is_then_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = code_blocks(text)[0][1]
    assert text.startswith("# memtap\n")
    assert "proxy between an AI agent and its long-term memory" in text.split("##", 1)[0]
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
