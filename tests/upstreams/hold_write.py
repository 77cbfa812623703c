"""The real reference memory server behind a pipe that holds one write back and lets it in late.

Runs ``mcp-server-memory`` (the path in ``MEMTAP_TEST_MEMORY_SERVER``) as a child and passes
every line through unchanged, both ways, except one: a ``tools/call`` whose arguments contain
``HOLD-UNTIL-RELEASE`` is held here (to memtap, a server too busy to answer it in time). It is
let in by a later call whose arguments contain ``RELEASE-HELD``:

- ``MEMTAP_TEST_RELEASE=after`` (the default): once the server has answered that later call,
  so the held write is carried out after a later write was answered;
- ``MEMTAP_TEST_RELEASE=with``: together with that call, in one write to the server, so the
  server runs both handlers at once (each loads the graph, then saves what it loaded).

The held write's own answer, when the server gives it, is passed on like any other line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

HOLD, RELEASE = b"HOLD-UNTIL-RELEASE", b"RELEASE-HELD"


def main() -> None:
    together = os.environ.get("MEMTAP_TEST_RELEASE", "after") == "with"
    child = subprocess.Popen(
        [os.environ["MEMTAP_TEST_MEMORY_SERVER"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    lock = threading.Lock()
    held: list[bytes] = []
    releasers: set[object] = set()

    def to_server(data: bytes) -> None:
        assert child.stdin is not None
        with lock:
            child.stdin.write(data)
            child.stdin.flush()

    def upstream_to_client() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            try:
                answered = json.loads(line).get("id")
            except (ValueError, AttributeError):
                continue
            if answered in releasers and held:
                to_server(held.pop())
        os._exit(0)

    threading.Thread(target=upstream_to_client, daemon=True).start()
    for line in sys.stdin.buffer:
        if HOLD in line and not held:
            held.append(line)
            continue
        if RELEASE in line and held:
            if together:
                to_server(line + held.pop())
                continue
            releasers.add(json.loads(line).get("id"))
        to_server(line)
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
