"""mcpServers entries for the npm memory servers memtap wraps besides the reference one.

``mcp-memory-libsql`` and ``mcp-memory-keeper`` are pinned in package.json and installed
by ``make test`` (npm ci); each entry points the server's store into a test folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBSQL_SERVER = ROOT / "node_modules" / ".bin" / "mcp-memory-libsql"
KEEPER_SERVER = ROOT / "node_modules" / ".bin" / "mcp-memory-keeper"


def _installed(path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip(f"node is not installed; {path.name} runs on node")
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make test` (it runs npm ci) or `npm ci` first")


def libsql_server(folder: Path) -> dict[str, Any]:
    """``mcp-memory-libsql`` keeping its graph in ``folder/graph.db``."""
    _installed(LIBSQL_SERVER)
    return {"command": str(LIBSQL_SERVER), "env": {"LIBSQL_URL": f"file:{folder / 'graph.db'}"}}


def keeper_server(folder: Path) -> dict[str, Any]:
    """``mcp-memory-keeper`` keeping its database in ``folder/keeper/context.db``."""
    _installed(KEEPER_SERVER)
    data = folder / "keeper"
    data.mkdir(parents=True, exist_ok=True)
    return {"command": str(KEEPER_SERVER), "env": {"DATA_DIR": str(data)}}
