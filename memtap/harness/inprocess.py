"""memtap's app served by uvicorn on a free loopback port, in a thread of this process: the one way
the pytest plugin, the harness and the tests start an in-process memtap (so they can reach its
runtime, its SQLite connections, and the spans it emits in this process).

Only the standard library is imported here at module level: the pytest plugin imports this module
in every pytest session.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from memtap.proxy.runtime import Runtime, Settings

__all__ = ["InProcessServer"]


class InProcessServer:
    """``memtap serve --http`` (or ``memtap proxy --http``, when ``settings.upstreams`` names
    servers) over ``settings``, in a daemon thread; ``start`` returns once it accepts connections,
    ``stop`` shuts it down and closes its runtime (the recorder writes what is still queued)."""

    def __init__(
        self, settings: Settings, *, name: str = "memtap-in-process", log_level: str = "warning"
    ) -> None:
        self.settings = settings
        self.port = 0
        self.runtime: Runtime | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._log_level = log_level
        self._server: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def db(self) -> Path:
        return self.settings.db

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible chat proxy (with ``model_list`` configured)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 60.0) -> Self:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"memtap did not start within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 60.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import uvicorn

        from memtap.proxy.app import create_app
        from memtap.proxy.runtime import Runtime

        self.loop = asyncio.get_running_loop()
        self.runtime = runtime = Runtime(self.settings)
        try:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
            config = uvicorn.Config(
                create_app(runtime), log_level=self._log_level, lifespan="on", access_log=False
            )
            self._server = server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
            self._ready.set()
            await task
        finally:
            await runtime.aclose()
