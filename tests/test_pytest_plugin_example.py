"""The pytest plugin as a user meets it: an "agent" talks to memtap_server over MCP, and the test
asserts what it did to memory. (Installed, the plugin registers itself through the pytest11 entry
point; this suite imports the fixtures so it also runs from a source checkout.)"""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memtap.pytest_plugin import MemtapServer, memtap_config, memtap_server

__all__ = ["memtap_config", "memtap_server"]  # the fixtures this module uses


def run_agent(mcp_url: str, *, correct_by_update: bool) -> None:
    """A tiny agent: remembers where Alice lives, then records that she moved."""

    async def main() -> None:
        async with Client(streamable_http_client(mcp_url)) as client:
            first = await client.call_tool("memory_add", {"content": "Alice lives in Paris."})
            item = first.structured_content["id"]  # type: ignore[index]
            if correct_by_update:
                await client.call_tool(
                    "memory_update", {"id": item, "content": "Alice moved from Paris to Berlin."}
                )
            else:
                await client.call_tool("memory_add", {"content": "Alice moved from Paris to Berlin."})

    anyio.run(main)


def test_an_agent_that_updates_the_memory_leaves_nothing_stale(memtap_server: MemtapServer) -> None:
    run_agent(memtap_server.mcp_url, correct_by_update=True)
    memtap_server.assert_no_findings("stale_coexistence")
    memtap_server.assert_live("Alice moved from Paris to Berlin.")
    memtap_server.assert_writes("local", ["Alice lives in Paris.", "Alice moved from Paris to Berlin."])


def test_an_agent_that_only_appends_is_caught_by_the_plugin(memtap_server: MemtapServer) -> None:
    run_agent(memtap_server.mcp_url, correct_by_update=False)
    with pytest.raises(AssertionError, match=r"stale_coexistence: .* still states paris"):
        memtap_server.assert_no_findings("stale_coexistence")
    with pytest.raises(AssertionError, match=r"no live item with content 'Alice lives in Berlin\.'"):
        memtap_server.assert_live("Alice lives in Berlin.")


def test_the_plugin_pytest_loads_in_every_session_imports_nothing_heavy() -> None:
    """pytest imports the pytest11 plugin in every session of every project with memtap
    installed: it must not pull in the server, the trace store or their dependencies."""
    code = (
        "import sys, memtap.pytest_plugin, memtap; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlite_utils', 'uvicorn', 'fastapi', 'mcp', 'numpy', 'pydantic', 'litellm', 'aiohttp')"
        " or m.startswith(('memtap.trace', 'memtap.harness', 'memtap.proxy', 'memtap.auth'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
