"""memtap's pytest plugin (registered through the ``pytest11`` entry point): assert what an agent
did to its memory inside your own tests.

The ``memtap_server`` fixture starts memtap in this process on a free loopback port, on a fresh
trace database under the test's ``tmp_path``: the builtin backend by default, the MCP servers of
``memtap_config``'s ``mcpServers`` wrapped (``memtap proxy``) when it names some, and the chat
proxy at ``.base_url`` whenever ``model_list`` is configured. Hand the agent ``.mcp_url`` or
``.base_url``, run it, then assert::

    def test_agent_forgets_what_it_is_told(memtap_server):
        run_my_agent(mcp_url=memtap_server.mcp_url)
        memtap_server.assert_no_findings("erasure")
        memtap_server.assert_live("Alice lives in Berlin")
        memtap_server.assert_writes("alice", ["Alice lives in Berlin"])

Override the ``memtap_config`` fixture (a dict in the config file's shape) to configure it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from memtap.harness.pytest_server import MemtapServer

__all__ = ["MemtapServer", "memtap_config", "memtap_server"]

# pytest imports this module in every session of every project with memtap installed: nothing
# heavy at import time (the server and its dependencies load when a test asks for the fixture).


def __getattr__(name: str) -> Any:
    if name == "MemtapServer":
        from memtap.harness.pytest_server import MemtapServer

        return MemtapServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@pytest.fixture
def memtap_config() -> dict[str, Any]:
    """The config memtap_server starts with (the config file's shape); override it in a conftest."""
    return {}


@pytest.fixture
def memtap_server(tmp_path: Path, memtap_config: dict[str, Any]) -> Iterator[MemtapServer]:
    """memtap serving on a free port over a fresh trace database; stopped after the test."""
    from memtap.harness.pytest_server import MemtapServer

    server = MemtapServer(tmp_path / "memtap-trace.db", memtap_config).start()
    try:
        yield server
    finally:
        server.stop()
