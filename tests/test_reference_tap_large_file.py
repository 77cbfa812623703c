"""The reference memory server's state is read off the event loop when its file is large, with
the same effects recorded as for a small file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess, http_client, write_config

from memtap.adapters.memory_server import OFF_LOOP_BYTES
from memtap.trace.models import EffectKind
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio


async def test_writes_to_a_large_memory_file_record_their_real_effects(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: Callable[..., ServerProcess]
) -> None:
    memory_file = Path(memory_server["env"]["MEMORY_FILE_PATH"])
    lines = [
        json.dumps({"type": "entity", "name": f"person{i}", "entityType": "person",
                    "observations": [f"person {i} likes topic {j}" for j in range(5)]})
        for i in range(3000)
    ]  # fmt: skip
    memory_file.write_text("\n".join(lines))
    assert memory_file.stat().st_size > OFF_LOOP_BYTES  # read in a worker thread
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url) as client:
        added = await client.call_tool(
            "add_observations", {"observations": [{"entityName": "person7", "contents": ["likes green tea"]}]}
        )
        removed = await client.call_tool(
            "delete_observations",
            {"deletions": [{"entityName": "person8", "observations": ["person 8 likes topic 2"]}]},
        )
    assert not added.is_error and not removed.is_error
    server.stop()
    store = TraceStore(server.db)
    events = {e.tool: e for e in store.list_events() if e.tool in ("add_observations", "delete_observations")}
    store.close()
    [add] = events["add_observations"].effects
    assert (add.kind, add.content_after) == (EffectKind.ADD, "likes green tea")
    [delete] = events["delete_observations"].effects
    assert (delete.kind, delete.content_before) == (EffectKind.DELETE, "person 8 likes topic 2")
