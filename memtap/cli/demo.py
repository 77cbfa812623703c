"""``memtap demo``: start memtap, drive a short memory session through a real MCP
client over streamable HTTP, then print the recorded trace and an item's lineage."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click

__all__ = ["demo"]


async def _script(url: str) -> str:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import RequestParamsMeta

    async def session(name: str, calls: list[tuple[str, str, str, dict[str, Any]]]) -> list[Any]:
        results = []
        headers = {"X-Memtap-Run": "demo", "X-Memtap-Namespace": "alice", "X-Memtap-Session": name}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            for turn, role, tool, args in calls:
                meta = cast(RequestParamsMeta, {"memtap": {"turn": turn, "role": role}})
                result = await client.call_tool(tool, args, meta=meta)
                results.append(result.structured_content or result.content[0].text)  # type: ignore[union-attr]
        return results

    gym, colour, _ = await session(
        "s1",
        [
            ("t1", "user", "memory_add", {"content": "Alice goes to the FitLife gym on Tuesdays."}),
            ("t2", "user", "memory_add", {"content": "Alice's favourite colour is green."}),
            (
                "t3",
                "third_party",
                "memory_add",
                {
                    "content": "Bob claims Alice quit the gym.",
                    "access": {"visibility": "participants", "participants": ["bob"]},
                },
            ),
        ],
    )
    await session(
        "s2",
        [
            (
                "t1",
                "user",
                "memory_update",
                {"id": gym["id"], "content": "Alice switched to CrossFit Central."},
            ),
            ("t2", "user", "memory_delete", {"id": colour["id"], "reason": "Alice asked to forget it"}),
        ],
    )
    await session(
        "s3",
        [
            ("t1", "user", "memory_search", {"query": "Which gym does Alice go to?", "requester": "alice"}),
            (
                "t2",
                "assistant",
                "memory_search",
                {"query": "What did Bob say about the gym?", "requester": "carol"},
            ),
            ("t3", "assistant", "memory_history", {"id": gym["id"], "requester": "alice"}),
        ],
    )
    return str(gym["id"])


@click.command()
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".demo/memtap-demo.db"),
    show_default=True,
    help="Where the demo's trace goes (replaced on each run).",
)
def demo(db: Path) -> None:
    """Run a scripted memory session through memtap and print what it recorded."""
    import anyio

    from memtap.cli.render import event_lines, item_detail
    from memtap.probes.targets._server import MemtapServer
    from memtap.trace.store import TraceStore

    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    db.parent.mkdir(parents=True, exist_ok=True)
    server = MemtapServer(db)
    try:
        url = server.start()
        version = server.health["version"] if server.health else "?"
        click.echo(f"memtap {version} serving {url}, trace in {db}\n")
        gym_id = anyio.run(_script, url)
    finally:
        server.stop()
    store = TraceStore(db)
    try:
        events = store.list_events()
        item = store.get_item(gym_id)
    finally:
        store.close()
    click.echo(f"Recorded trace ({len(events)} events):")
    click.echo(event_lines(events))
    if item is not None:
        click.echo("\nLineage of the gym memory:")
        click.echo(item_detail(item))
    leaks = [e for e in events if e.gate and "would-deny" in e.gate]
    for event in leaks:
        click.echo(
            f"\nAccess alert: event {event.id} returned items whose tags deny requester "
            f"{event.context.requester or event.context.principal!r}: {event.gate}"
        )
    click.echo(f"\nExplore it: memtap trace list --db {db}; memtap items list --all --db {db}")
