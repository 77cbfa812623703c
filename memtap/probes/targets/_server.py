"""Starting and stopping a ``memtap serve --http`` (or ``memtap proxy --http``) of the replay's own,
on a free port: the child binds port 0 and says which port it got (``announced_port``), so no
other process can take the port between choosing it and binding it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from memtap.probes.targets.base import TargetError

__all__ = ["MemtapServer", "announced_port", "free_port", "health", "wait_healthy"]

# What `memtap serve`/`proxy` (MCP) and `memtap ui` print once their socket is bound.
_ANNOUNCED = re.compile(r"(?:serving MCP at|dashboard on) http://\S+?:(\d+)/")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def health(base_url: str, timeout: float = 2.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/healthz", timeout=timeout) as resp:
        return dict(json.load(resp))


def announced_port(
    output: Callable[[], str], proc: subprocess.Popen[bytes], timeout: float = 30.0
) -> int | None:
    """The port a memtap child started with ``--http HOST:0`` bound, read from its standard
    error (``output`` returns what it wrote so far); None if it exited or said nothing in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _ANNOUNCED.search(output())
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    return None


def wait_healthy(
    base_url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0
) -> dict[str, Any] | None:
    """Poll ``base_url``/healthz until it answers (its JSON), the process exits (None), or
    ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            return health(base_url, timeout=1.0)
        except OSError:
            time.sleep(0.05)
    return None


class MemtapServer:
    """A child ``memtap serve`` (or ``memtap proxy``: ``command``) writing to ``db``. It runs in its
    own session, so a Ctrl-C at the terminal reaches the replay (which then marks its episodes
    interrupted) and not the server; the replay stops it with SIGTERM, which flushes the trace."""

    def __init__(
        self,
        db: Path,
        *,
        extra: Sequence[str] = (),
        command: str = "serve",
        env: dict[str, str] | None = None,
    ) -> None:
        self.db = db
        self.env = env  # added to the child's environment (API keys travel here, not in its argv)
        self.command = command
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.base_url = ""
        self.health: dict[str, Any] | None = None

    def start(self, timeout: float = 30.0) -> str:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (open while the server runs; stop() closes it)
        cmd = [
            sys.executable,
            "-m",
            "memtap",
            self.command,
            "--http",
            "127.0.0.1:0",
            "--db",
            str(self.db),
        ]
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(
            [*cmd, *self.extra], stdout=subprocess.DEVNULL, stderr=self.log, start_new_session=True, env=env
        )
        started = time.monotonic()
        port = announced_port(self.stderr, self.proc, timeout)
        self.base_url = f"http://127.0.0.1:{port}"
        if port is not None:
            self.health = wait_healthy(
                self.base_url, self.proc, max(1.0, timeout - (time.monotonic() - started))
            )
        if self.health is not None:
            return f"{self.base_url}/mcp"
        if self.proc.poll() is not None:
            raise TargetError(
                f"memtap {self.command} exited with {self.proc.returncode}: {self.stderr()[-500:]}"
            )
        self.stop()
        raise TargetError(f"memtap {self.command} did not become healthy within {timeout:.0f} s")

    def stderr(self) -> str:
        if self.log is None:
            return ""
        # pread: the child writes through the same file offset, which a seek here would move
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace").strip()

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the server flushes its trace), then wait; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if os.name != "nt" else signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        code = self.proc.returncode
        if self.log is not None:
            self.log.close()
            self.log = None
        return code
