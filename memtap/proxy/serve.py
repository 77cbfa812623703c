"""Running the front doors: streamable HTTP (uvicorn), stdio, or both in one process."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import anyio

from memtap.proxy.listen import bound_port, listen
from memtap.proxy.runtime import Runtime, Settings
from memtap.trace.otel import configure_tracing

__all__ = ["serve"]

log = logging.getLogger("memtap.serve")

SWITCH_INTERVAL_S = 0.0002
# MEMTAP_LEAN_STDIO=0: memtap proxy --stdio serves tools/call through the SDK's server layers
# too (proxy/lean.py; for comparing the two paths).
LEAN_ENV = "MEMTAP_LEAN_STDIO"


async def _serve_stdio(runtime: Runtime) -> None:
    from memtap.proxy.mcp_server import build_mcp_server
    from memtap.proxy.stdio import stdio_streams

    principal = runtime.settings.default_principal
    lean = None
    if runtime.upstreams is not None and runtime.forwarding:
        from memtap.proxy.forward import build_forwarding
        from memtap.proxy.lean import LeanCalls

        forwarding = build_forwarding(
            runtime.upstreams, runtime.recorder, default_principal=principal, clock=runtime.clock.attribute
        )
        server = forwarding.server
        if os.environ.get(LEAN_ENV, "1") != "0":
            lean = LeanCalls(forwarding)
    else:
        server = build_mcp_server(runtime.service, default_principal=principal)
    async with stdio_streams(lean) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _has_stdio_upstream(settings: Settings) -> bool:
    from memtap.config import StdioServerConfig

    return any(isinstance(server, StdioServerConfig) for server in settings.upstreams.values())


_YOUNG_THRESHOLD = 10_000


def _freeze_startup_heap() -> None:
    """Move what start-up built (modules, the app, the runtime) out of the collector's view.

    Those objects live as long as the process; without this every full collection walks
    them again (garbage collection was 6% of the chat path's CPU at 32 concurrent calls).
    Collected first, so nothing already garbage is kept for good. Then the young generation
    is collected less often.
    """
    gc.collect()
    gc.freeze()
    # A young-generation collection walks the young objects still alive, which on a busy
    # server are those of the calls in flight, whatever the threshold: collecting every
    # 10,000 allocations instead of 700 walks them a fourteenth as often (25k fewer
    # instructions per streamed chat call at 32 concurrent, 1.8%, measured with callgrind).
    gc.set_threshold(_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT and SIGTERM stop serving cleanly, so the trace is flushed before exit.

    uvicorn installs its own handlers while it serves and re-raises the signal when it
    is done; that re-raise lands here instead of killing the process mid-flush.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()

    def handler(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stop)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


async def serve(settings: Settings, *, http: tuple[str, int] | None, stdio: bool) -> None:
    """Serve until stopped (a signal on HTTP, end of input on stdio); flush the trace on the way out."""
    if http is not None:
        settings.check_bind(http[0])
    if stdio or _has_stdio_upstream(settings):
        # The recorder's writer thread holds the GIL while it builds rows; every pipe write on
        # the event loop releases the GIL and then waits for it back, up to the switch interval
        # (5 ms by default). A shorter interval bounds that wait on each call. Only where pipes
        # carry the calls: on the HTTP chat path it cost throughput (0.85x the CPU per request
        # and 1.28x the requests/s with the default, at 32 concurrent calls).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    configure_tracing(console=settings.console_spans)
    runtime = Runtime(settings)
    if runtime.recorder.privacy.secrets:  # no configured secret reaches a log line or a span either
        from memtap.trace.otel_redact import set_span_redactor
        from memtap.trace.privacy import RedactingFilter

        redacting = RedactingFilter(runtime.recorder.privacy)
        for handler in logging.getLogger().handlers:
            handler.addFilter(redacting)
        set_span_redactor(runtime.recorder.privacy.redact)
    sockets: list[socket.socket] = []
    try:
        uvicorn_server = None
        if http is not None:
            import uvicorn

            from memtap.proxy.app import create_app

            host, port = http
            sock = listen(host, port)  # a port in use is one clear error, before "serving"
            sockets.append(sock)
            port = bound_port(sock)
            config = uvicorn.Config(
                create_app(runtime, host=host),
                host=host,
                port=port,
                log_level="warning",
                lifespan="on",
                access_log=False,
            )
            uvicorn_server = uvicorn.Server(config)
            if not stdio:  # on stdio, standard error may be a client's log: stay quiet there
                wrapped = f"upstreams {', '.join(settings.upstreams)}; " if runtime.forwarding else ""
                print(
                    f"memtap: serving MCP at http://{host}:{port}/mcp ({wrapped}db {settings.db})",
                    file=sys.stderr,
                )
                if settings.config.model_list or settings.config.memtap.embeddings:
                    print(f"memtap: serving the OpenAI API at http://{host}:{port}/v1", file=sys.stderr)
        _freeze_startup_heap()
        cancels: list[Callable[[], None]] = []

        def stop() -> None:
            if uvicorn_server is not None:
                uvicorn_server.should_exit = True
            for cancel in cancels:
                cancel()

        upstreams = runtime.upstreams.run() if runtime.upstreams is not None else contextlib.nullcontext()
        with _stop_on_signals(stop):
            async with upstreams, anyio.create_task_group() as tg:
                cancels.append(tg.cancel_scope.cancel)
                if uvicorn_server is not None:
                    tg.start_soon(uvicorn_server.serve, sockets)
                if stdio:
                    await _serve_stdio(runtime)
                    if uvicorn_server is not None:
                        uvicorn_server.should_exit = True
    finally:
        for sock in sockets:
            sock.close()
        await runtime.aclose()
