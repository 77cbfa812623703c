"""Sortable identifiers: 26 Crockford base32 characters, time first (ULID layout).

Ids made in one process are strictly increasing, also within one millisecond, so
sorting event ids sorts events by the time they started.
"""

from __future__ import annotations

import os
import random
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0
# Ids need uniqueness, not secrecy: a generator seeded once from the OS is enough, and
# avoids a system call per id (which, under load, also waits for the GIL).
_random = random.Random(os.urandom(32))


# Every 10-bit value as its two characters: an id is 13 look-ups, not 26 shifts and appends.
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_SHIFTS = {length: tuple(range(5 * length - 10, -1, -10)) for length in (10, 16)}


def _encode(value: int, length: int) -> str:
    """The low ``5 * length`` bits of ``value`` in ``length`` characters (an even number)."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS[length]])


def new_id() -> str:
    """A new time-sortable id, unique and increasing within this process."""
    global _last_ms, _last_rand
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            now = _last_ms
            rand = _last_rand + 1
        else:
            rand = _random.getrandbits(79)  # 80 bits, the top one left free to count up
        _last_ms, _last_rand = now, rand
    return _encode(now, 10) + _encode(rand, 16)


def id_time_ms(identifier: str) -> int:
    """The millisecond timestamp encoded at the start of an id."""
    value = 0
    for char in identifier[:10]:
        value = value * 32 + _ALPHABET.index(char)
    return value
