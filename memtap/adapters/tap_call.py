"""What every tap (``GraphTap``, ``LibsqlTap``, ``KeeperTap``) does around one forwarded call.

A read is timed and its result handed on at once. A write holds the upstream's write lock from
the state read before the call to the state read after it, so no other write's reads interleave;
the wait for an earlier write counts against the call's timeout; the result is handed to
``answered`` as soon as it arrives (a front door answering first, ``proxy/forward.py``, which
returns once the answer is on its way to the caller, so the work after it is not the caller's); a
failed call is handed to the tap's ``failed`` (reconciliation) before it is raised again; and a
state that cannot be read after a call that succeeded leaves the call answered with no effects.
Each tap says only how it reads its server's state and what changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from memtap.errors import UpstreamError, UpstreamTimeout

if TYPE_CHECKING:
    from memtap.adapters.connections import LateAnswer
    from memtap.adapters.upstream import Upstream
    from memtap.trace.calls import CallRecord

__all__ = ["Answered", "acquire", "forward_read", "forward_write"]

log = logging.getLogger("memtap.upstream")

State = TypeVar("State")
# Hands a result to the front door answering first; returns once the answer is on its way out.
Answered = Callable[[dict[str, Any]], Awaitable[None]]


def _nothing() -> None:
    pass


async def acquire(lock: anyio.Lock, timeout: float) -> bool:
    """Take ``lock`` within ``timeout``; False when it stayed held that long."""
    try:
        lock.acquire_nowait()  # the common case, without a cancel scope
        return True
    except anyio.WouldBlock:
        pass
    with anyio.move_on_after(timeout):
        await lock.acquire()
        return True
    return False


async def forward_read(
    upstream: Upstream,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None,
    record: CallRecord | None,
    answered: Answered | None,
) -> dict[str, Any]:
    """Forward a call that changes nothing: the upstream's own time recorded, the result handed on."""
    if record is not None:
        record.start_backend()
    result = await upstream.call_tool(tool, arguments, meta)
    if record is not None:
        record.end_backend()
    if answered is not None:
        await answered(result)
    return result


async def forward_write(
    upstream: Upstream,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None,
    record: CallRecord | None,
    answered: Answered | None,
    *,
    read_before: Callable[[], Awaitable[State]],
    read_after: Callable[[], Awaitable[State]],
    failed: Callable[[State, UpstreamError], Awaitable[None]],
    unread: Callable[[], None] = _nothing,
    late: LateAnswer | None = None,
) -> tuple[dict[str, Any], State, State | None]:
    """Forward a write under the upstream's write lock: the result, the state before, and the
    state after (None when it could not be read: logged, ``unread`` called, no effects).
    ``late``: watch for the write's answer if it times out (reconciliation)."""
    start = record.start_backend if record is not None else _nothing
    end = record.end_backend if record is not None else _nothing
    deadline = time.monotonic() + upstream.timeout
    if not await acquire(upstream.write_lock, upstream.timeout):
        raise UpstreamTimeout(
            f"upstream {upstream.name!r} did not answer {tool} within {upstream.timeout:g} s "
            "(an earlier write to it has not finished)",
            upstream=upstream.name,
        )
    try:
        before = await read_before()
        start()
        try:
            result = await upstream.call_tool(
                tool, arguments, meta, timeout=max(0.001, deadline - time.monotonic()), late=late
            )
        except UpstreamError as exc:
            end()
            await failed(before, exc)
            raise
        end()
        if answered is not None:
            await answered(result)
        try:
            after = await read_after()
        except Exception:  # the call itself succeeded: answer it, and say why no effects were recorded
            log.exception("upstream %s: could not read the state after %s", upstream.name, tool)
            unread()
            return result, before, None
        return result, before, after
    finally:
        upstream.write_lock.release()
