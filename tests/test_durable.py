"""--durable: an acknowledged call is on disk, even if the server is killed right after."""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio
import pytest
from conftest import ServerProcess, http_client

from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio


async def test_killing_a_durable_server_mid_stream_loses_no_acknowledged_call(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server("--durable")
    acked: list[tuple[str, str]] = []  # (item id, content) of every call the client got an answer for
    enough = anyio.Event()
    killed: list[bool] = []

    async def writer(client_no: int) -> None:
        try:
            async with http_client(server.url, {"X-Memtap-Session": f"c{client_no}"}) as client:
                for i in range(10_000):
                    content = f"client {client_no} fact {i}"
                    result = await client.call_tool("memory_add", {"content": content})
                    assert not result.is_error
                    acked.append((result.structured_content["id"], content))  # type: ignore[index]
                    if len(acked) >= 120:
                        enough.set()
        except Exception:  # the server died under us: expected after the kill, a failure before it
            if not killed:
                raise
            return

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(writer, n)
            await enough.wait()
            killed.append(True)
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
    assert server.proc.returncode == -signal.SIGKILL
    assert len(acked) >= 120

    store = TraceStore(server.db)
    events = store.list_events(op="write")
    store.close()
    recorded = {(e.effects[0].item_id, e.effects[0].content_after) for e in events}
    missing = set(acked) - recorded
    assert not missing, f"{len(missing)} acknowledged calls are not in the trace"

    restarted = start_http_server(db=server.db)
    async with http_client(restarted.url) as client:
        listed = await client.call_tool("memory_list", {"limit": 1000})
    assert listed.structured_content is not None
    assert {(i["id"], i["content"]) for i in listed.structured_content["items"]} >= set(acked)
