"""Runs of alike stream events, read in a few C calls instead of a Python step per event.

A chat completion stream is mostly events that differ in their text alone: the same bytes
(``prefix``) before a JSON string and the same bytes (``suffix``) after it. :func:`text_run`
takes such a run in one go: it cuts the stream after each ``suffix`` and blank line, checks with
one regular expression that what follows each ``prefix`` is exactly one JSON string, and with one
comparison that the events so rebuilt are the stream's bytes (so each event is its prefix, its
text and its suffix, and nothing else), and decodes the texts all at once. What it finds is what
reading the events one by one finds (the templates of :mod:`memtap.proxy.sse`): the same count
and the same text. Whatever it cannot vouch for (a piece that is not
one plain JSON string, text that is not UTF-8, a run that does not end at a blank line) it
leaves to that event-by-event path.
"""

from __future__ import annotations

import json
import json.scanner
import operator
import re
from collections.abc import Callable
from itertools import repeat

__all__ = ["text_run"]

_getitem: Callable[[bytes, slice], bytes] = operator.getitem  # type: ignore[assignment]
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_CHAR = rb'[^"\\\x00-\x1f]'
# Texts joined by line feeds (which no JSON string holds), each one whole JSON string: with no
# escapes, and with any (the scanner checks the four hex digits of a \u escape).
_PLAIN = re.compile(rb'"%s*"(?:\n"%s*")*' % (_CHAR, _CHAR))
_ESCAPED = re.compile(rb'"(?:%s|\\["\\/bfnrtu])*"(?:\n"(?:%s|\\["\\/bfnrtu])*")*' % (_CHAR, _CHAR))


def text_run(data: bytes, pos: int, prefix: bytes, suffix: bytes) -> tuple[int, int, str] | None:
    """The run of two or more events at ``data[pos:]`` that are each ``prefix``, one JSON string
    and ``suffix``, and end at a blank line: (how many, where the event after them begins, their
    texts joined), or None where there is no such run or it is not certain."""
    close = suffix + b"\n\n"
    if not data.startswith(prefix, pos):
        return None
    # Cut after each event's suffix: every piece but the last is an event's prefix and text (or
    # not, when an event of another shape came between: then the run is not taken).
    pieces = data[pos:].split(close)
    count = len(pieces) - 1
    if count < 2:
        return None
    texts: list[bytes] = list(map(_getitem, pieces[:count], repeat(slice(len(prefix), None))))
    run = b"\n".join(texts)
    escaped = run.find(b"\\") >= 0
    if (_ESCAPED if escaped else _PLAIN).fullmatch(run) is None:
        return None
    end = pos + len(prefix) * count + len(run) - (count - 1) + len(close) * count
    if not data.startswith(prefix + (close + prefix).join(texts) + close, pos):
        return None  # a piece did not begin with the prefix
    try:
        text = run.decode()  # strict: text that is not UTF-8 is replaced on the other way
        if escaped:
            values, _ = _SCAN("[" + text.replace("\n", ",") + "]", 0)
            joined = "".join(values)
        else:
            joined = text.replace('"', "").replace("\n", "")
    except (ValueError, StopIteration):
        return None
    return count, end, joined
