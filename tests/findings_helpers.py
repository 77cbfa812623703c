"""Shared helpers of the findings tests: a faulty wrapped server, and reading findings back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from memtap.findings.model import Finding
from memtap.findings.storage import list_findings
from memtap.trace.store import TraceStore

FAULTY = Path(__file__).parent / "upstreams" / "faulty_memory.py"


def faulty_server(fault: str = "") -> dict[str, Any]:
    """An mcpServers entry for tests/upstreams/faulty_memory.py, read with the reference profile."""
    return {
        "command": sys.executable,
        "args": [str(FAULTY)],
        "env": {"FAULT": fault},
        "memtap": {"profile": "server-memory"},
    }


def settled_findings(served: Any, kind: str | None = None) -> list[Finding]:
    """The findings live detection stored, once every recorded event has been examined."""
    assert served.runtime is not None and served.runtime.findings is not None, "live detection is off"
    served.settle()
    store = TraceStore(served.db)
    try:
        return list_findings(store.db, kind=kind)
    finally:
        store.close()


def serve_proxy(db: Path, servers: dict[str, Any], memtap: dict[str, Any] | None = None) -> Any:
    """``memtap proxy``'s app in this process, wrapping ``servers``."""
    from served import ServedMemtap

    from memtap.config import ConfigFile

    config = {"mcpServers": servers, "memtap": memtap or {}}
    upstreams = ConfigFile.model_validate(config).enabled_servers()
    return ServedMemtap(db, config, upstreams=upstreams).start()
