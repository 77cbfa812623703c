"""One part of a ``memtap check`` split by namespace (``parallel.py``), in its own process:
``python -m memtap.findings.part_worker``, the part's arguments pickled on stdin, its
``PartResult`` pickled on stdout. The process ends without freeing the part's state (``os._exit``
once the result is written: freeing millions of objects one by one cost seconds), and with the
cyclic garbage collector off throughout: pickling the result allocates, and a collection then
would traverse the part's whole state (millions of objects) again and again for nothing."""

from __future__ import annotations

import gc
import os
import pickle
import sys

from memtap.findings.parallel import check_part

__all__ = ["main"]


def main() -> None:
    gc.disable()  # for good: the process ends with os._exit, nothing is ever collected
    path, run, only, names, columns = pickle.load(sys.stdin.buffer)
    keep: list[object] = []
    result = check_part(path, run, only, names, keep=keep, columns=columns)
    sys.stdout.buffer.write(pickle.dumps(result, pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
