"""The real reference memory server behind a pipe that can kill it after a save, before its answer.

Runs ``mcp-server-memory`` (the path in ``MEMTAP_TEST_MEMORY_SERVER``) as a child and passes
every line through unchanged, both ways. A ``tools/call`` whose arguments contain the text
``KILL-AFTER-SAVE`` is passed on too; when the server answers it (so it has saved its file),
the answer is dropped, the server is killed with SIGKILL and this process exits: to memtap,
an upstream killed in the middle of a write that it had in fact carried out.
With ``MEMTAP_TEST_HIDDEN_FILE`` the server's file is set here, out of memtap's sight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

TRIGGER = "KILL-AFTER-SAVE"


def main() -> None:
    env = dict(os.environ)
    if "MEMTAP_TEST_HIDDEN_FILE" in env:  # a file memtap cannot know of: it must ask the server
        env["MEMORY_FILE_PATH"] = env["MEMTAP_TEST_HIDDEN_FILE"]
    child = subprocess.Popen(
        [os.environ["MEMTAP_TEST_MEMORY_SERVER"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert child.stdin is not None and child.stdout is not None
    doomed: set[object] = set()
    lock = threading.Lock()

    def upstream_to_client() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                message = {}
            with lock:
                if isinstance(message, dict) and message.get("id") in doomed:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                    os._exit(0)
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        os._exit(0)

    threading.Thread(target=upstream_to_client, daemon=True).start()
    for line in sys.stdin.buffer:
        if TRIGGER.encode() in line:
            with lock:
                doomed.add(json.loads(line).get("id"))
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
