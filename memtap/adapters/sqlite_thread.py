"""One dedicated thread for one SQLite connection, so that no commit runs on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["SqliteThread"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class SqliteThread:
    """One dedicated thread for one SQLite connection: its calls run there, one at a time.

    A caller that stops waiting (cancelled) leaves a started call to finish; a call that
    had not started yet never runs.
    """

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)
