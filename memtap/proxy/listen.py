"""The listening socket of an HTTP front door, bound before anything says it is serving.

uvicorn binds late, after memtap has printed its address, and ends a failed bind with
``SystemExit(3)`` inside the task group (a traceback, exit 3). Binding here first turns a
port in use or an address this machine does not have into one clear error, and lets
``--http HOST:0`` take a free port and print the one it got.
"""

from __future__ import annotations

import socket

from memtap.errors import ConfigError

__all__ = ["bound_port", "listen"]


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening (raises ConfigError naming both)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is fine
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"cannot listen on {host}:{port}: {reason}") from exc
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` is bound to (the one the system chose for port 0)."""
    return int(sock.getsockname()[1])
