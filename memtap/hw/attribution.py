"""Energy (or CPU time) of a sampled series, and its attribution to calls with known intervals.

A series is the samples of one device, in time order. Between two consecutive samples lies a
*segment*, whose amount is

- the difference of a counter where both samples have one (the GPU's energy counter, the host's
  busy core-seconds, the process's CPU seconds); a counter that went backwards is a gap;
- else the trapezoid of a rate where both samples have one: ``(P0 + P1) / 2 * (t1 - t0)``;
- else nothing: a gap (a failed reading), which no call is given energy for.

Within a segment the amount is spread evenly over time. A call gets, of every stretch of time it
overlaps, that stretch's amount divided equally among the calls active during it: two calls
running together each get half of what the hardware spent while both ran. With an idle baseline
(a rate measured before the run), a call's *net* amount is its share of ``amount - baseline *
duration``; net figures can be negative when a call ran below idle power.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Point", "Segment", "Share", "attribute", "baseline_rate", "integrate", "segments"]


@dataclass(frozen=True)
class Point:
    """One sample of one quantity: a rate (power), a counter (energy), or both."""

    ts: float
    rate: float | None = None
    counter: float | None = None


@dataclass(frozen=True)
class Segment:
    t0: float
    t1: float
    amount: float | None  # None: a gap


@dataclass
class Share:
    """What one call was given: ``gross`` and baseline-subtracted ``net`` amounts, and how many
    of its seconds lay in measured segments (``covered_s``) out of ``duration_s``."""

    gross: float = 0.0
    net: float = 0.0
    covered_s: float = 0.0
    duration_s: float = 0.0

    @property
    def mean_rate(self) -> float | None:
        """The call's share of power (amount per second) over its covered time."""
        return self.gross / self.covered_s if self.covered_s > 0 else None


def segments(points: Sequence[Point], *, use: str = "best") -> list[Segment]:
    """Segments between consecutive points; ``use``: ``best`` (counter, else rate), ``counter``
    or ``rate`` only."""
    out = []
    for a, b in itertools.pairwise(points):
        if b.ts <= a.ts:
            continue
        amount = None
        if use != "rate" and a.counter is not None and b.counter is not None and b.counter >= a.counter:
            amount = b.counter - a.counter
        elif use != "counter" and a.rate is not None and b.rate is not None:
            amount = (a.rate + b.rate) / 2 * (b.ts - a.ts)
        out.append(Segment(a.ts, b.ts, amount))
    return out


def integrate(
    segs: Sequence[Segment], start: float | None = None, end: float | None = None
) -> tuple[float, float]:
    """(amount, seconds measured) over ``[start, end]`` (default: everything), pro rata in time."""
    total = seconds = 0.0
    for s in segs:
        lo = s.t0 if start is None else max(s.t0, start)
        hi = s.t1 if end is None else min(s.t1, end)
        if s.amount is None or hi <= lo:
            continue
        total += s.amount * (hi - lo) / (s.t1 - s.t0)
        seconds += hi - lo
    return total, seconds


def baseline_rate(segs: Sequence[Segment], start: float, end: float) -> float | None:
    """The mean rate (e.g. idle watts) over ``[start, end]``, or None when nothing was measured."""
    total, seconds = integrate(segs, start, end)
    return total / seconds if seconds > 0 else None


def attribute(
    segs: Sequence[Segment], calls: Sequence[tuple[str, float, float]], baseline: float = 0.0
) -> dict[str, Share]:
    """Each call's share (``calls``: key, start, end, in the series' time) of the segments."""
    shares = {key: Share(duration_s=max(0.0, end - start)) for key, start, end in calls}
    ordered = sorted((c for c in calls if c[2] > c[1]), key=lambda c: c[1])
    open_calls: list[tuple[str, float, float]] = []
    nxt = 0
    for seg in sorted(segs, key=lambda s: s.t0):
        while nxt < len(ordered) and ordered[nxt][1] < seg.t1:
            open_calls.append(ordered[nxt])
            nxt += 1
        open_calls = [c for c in open_calls if c[2] > seg.t0]
        if seg.amount is None or not open_calls:
            continue
        rate = seg.amount / (seg.t1 - seg.t0)
        cuts = {seg.t0, seg.t1}
        for _, start, end in open_calls:
            cuts.update(t for t in (start, end) if seg.t0 < t < seg.t1)
        edges = sorted(cuts)
        for lo, hi in itertools.pairwise(edges):
            active = [c for c in open_calls if c[1] <= lo and c[2] >= hi]
            if not active:
                continue
            width = hi - lo
            for key, _, _ in active:
                share = shares[key]
                share.gross += rate * width / len(active)
                share.net += (rate - baseline) * width / len(active)
                share.covered_s += width
    return shares
