"""A ``memtap serve --stdio`` child of the replay's own, spoken to with memtap's lean JSON-RPC client.

The ``builtin`` (and ``mem0:``) target's default path when no ``--server`` is given: no port, no
HTTP stack, no SDK client session between the replay and the front door (measured on this
project's machine: the official client over streamable HTTP cost 17-22x the in-process backend
per turn, this path a fraction of that; see ``benchmarks/replay_throughput.py``). The child runs
in its own session (a Ctrl-C reaches the replay, not the server); at the end its standard input
is closed, and it flushes its trace and exits at the end of its input.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from memtap.errors import UpstreamError
from memtap.probes.targets.base import TargetError

__all__ = ["CALL_TIMEOUT_S", "StdioServe", "error_text"]

CALL_TIMEOUT_S = 600.0  # one call; a batch of a thousand turns through an LLM-backed mem0 is slow
_EXIT_WAIT_S = 120.0  # the child flushing its trace after the end of its input


class StdioServe:
    """One ``memtap serve --stdio --db DB`` child and its connection; calls may run concurrently."""

    def __init__(self, db: Path, *, extra: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.db = db
        self.extra = list(extra)
        self.env = env
        self._stack: contextlib.AsyncExitStack | None = None
        self._conn: Any = None
        self.pid: int | None = None

    async def start(self, timeout: float = 60.0) -> None:
        from memtap.adapters.connections import open_stdio

        args = ["-m", "memtap", "serve", "--stdio", "--db", str(self.db), *self.extra]
        stack = contextlib.AsyncExitStack()
        try:
            self._conn = await stack.enter_async_context(
                open_stdio(
                    "memtap serve --stdio",
                    sys.executable,
                    args,
                    {**os.environ, **(self.env or {})},
                    None,
                    timeout=timeout,
                    client_name="memtap-replay",
                )
            )
        except UpstreamError as exc:
            await stack.aclose()
            raise TargetError(f"memtap serve --stdio could not start: {exc}") from None
        self._stack = stack
        self.pid = self._conn.pid

    async def call(self, tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """``tools/call``'s result (``isError``, ``content``, ``structuredContent``)."""
        if self._conn is None:
            raise TargetError("the memtap serve --stdio child is not running")
        params = {"name": tool, "arguments": arguments, "_meta": {"memtap": meta}}
        try:
            result: dict[str, Any] = await self._conn.request("tools/call", params, timeout=CALL_TIMEOUT_S)
        except UpstreamError as exc:
            raise TargetError(f"{tool} failed: {exc}") from None
        return result

    async def call_many(
        self, tool: str, calls: list[tuple[dict[str, Any], dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Several ``tools/call`` of ``tool`` ((arguments, meta) each) pipelined: written at once, in
        order, each its own request; their results in that order. The child starts them in the
        order it reads them (one ordered stream), so the calls' events are in that order too."""
        if self._conn is None:
            raise TargetError("the memtap serve --stdio child is not running")
        params = [{"name": tool, "arguments": args, "_meta": {"memtap": meta}} for args, meta in calls]
        try:
            answers = await self._conn.request_many("tools/call", params, timeout=CALL_TIMEOUT_S)
        except UpstreamError as exc:
            raise TargetError(f"{tool} failed: {exc}") from None
        results: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, UpstreamError):
                raise TargetError(f"{tool} failed: {answer}")
            results.append(answer)
        return results

    async def aclose(self) -> None:
        """End of input: the child flushes its trace and exits (waited for), then the connection closes."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        proc = self._conn.proc
        with anyio.CancelScope(shield=True):
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
            with anyio.move_on_after(_EXIT_WAIT_S):
                await proc.wait()
            await stack.aclose()
        self._conn = None


def error_text(result: dict[str, Any]) -> str:
    parts = [str(block.get("text", "")) for block in result.get("content") or [] if isinstance(block, dict)]
    return " ".join(p for p in parts if p) or "the tool call failed"
