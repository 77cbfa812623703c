"""A blocking call (a model over HTTP) awaited without holding up a cancellation.

``anyio.to_thread.run_sync`` waits for its thread inside a shielded scope: a Ctrl-C during a
reader's request was held until the request ended (a model that never answers: its whole
timeout), and a cancellation that arrived meanwhile could be lost, so the replay ran on and
exited 0. Its worker threads are not daemons either: an abandoned call still kept the process
from exiting until it returned. Here the call runs on a daemon thread of its own; a cancellation
ends the wait at once and abandons the call (its result is dropped, and the process does not
wait for it at exit).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["abandonable"]

T = TypeVar("T")


async def abandonable(func: Callable[..., T], *args: object) -> T:
    """``func(*args)`` on a daemon thread; a cancellation of the caller abandons it at once."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, object]] = []

    def work() -> None:
        try:
            outcome.append((True, func(*args)))
        except BaseException as exc:  # handed to the caller, who raises it
            outcome.append((False, exc))
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits any more
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name=f"memtap {getattr(func, '__qualname__', 'call')}", daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]
