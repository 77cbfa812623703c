"""Datasette metadata for a memtap trace file: tables and columns described, JSON columns named,
facets and canned queries (``memtap datasette-metadata``; ``datasette DB -m metadata.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["datasette_metadata"]

SOURCE = Path(__file__).parent / "datasette-metadata.json"


def datasette_metadata(database: str) -> dict[str, Any]:
    """The metadata, keyed by ``database`` (Datasette names a file's database by its stem)."""
    shared = json.loads(SOURCE.read_text(encoding="utf-8"))
    tables, queries = shared.pop("tables"), shared.pop("queries")
    return {**shared, "databases": {database: {"tables": tables, "queries": queries}}}
