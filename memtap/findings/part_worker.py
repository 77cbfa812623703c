"""One part of a ``memtap check`` split by namespace (``parallel.py``), in its own process:
``python -m memtap.findings.part_worker``, the part's arguments pickled on stdin, its
``PartResult`` pickled on stdout."""

from __future__ import annotations

import pickle
import sys

from memtap.findings.parallel import check_part

__all__ = ["main"]


def main() -> None:
    path, run, only, names = pickle.load(sys.stdin.buffer)
    result = check_part(path, run, only, names)
    sys.stdout.buffer.write(pickle.dumps(result, pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
