"""Measures as formulas over per-episode counts, with episode-level bootstrap intervals.

Every measure is a function of sums of per-episode counts (``capture.tp_pred``,
``recall_n.sum``, ...). Its value is the function of the sums over all scored episodes; its 95%
interval comes from 2,000 resamples of the episodes with replacement (fixed seed), the
function recomputed on each resample's sums, and the 2.5th and 97.5th percentiles taken over
the resamples where it is defined. ``compare`` resamples the episodes two runs share with the
same draws and reports the difference (B minus A) the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "RESAMPLES",
    "SEED",
    "Array",
    "Measure",
    "Sums",
    "bootstrap",
    "f1",
    "harmonic",
    "mean2",
    "paired_bootstrap",
    "ratio",
    "resample_weights",
]

RESAMPLES = 2000
SEED = 20261130
Array = npt.NDArray[np.float64]
Sums = Mapping[str, Array]


def _get(sums: Sums, name: str) -> Array:
    value = sums.get(name)
    if value is None:
        some = next(iter(sums.values()))
        return np.zeros_like(some)
    return value


def _div(num: Array, den: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def ratio(num: str, den: str) -> Callable[[Sums], Array]:
    return lambda s: _div(_get(s, num), _get(s, den))


def f1(tp_pred: str, pred: str, tp_gold: str, gold: str) -> Callable[[Sums], Array]:
    """F1 of precision tp_pred/pred and recall tp_gold/gold; 0 when one side is empty and the other
    is not, undefined when both are."""

    def formula(s: Sums) -> Array:
        p_den, r_den = _get(s, pred), _get(s, gold)
        p = np.nan_to_num(_div(_get(s, tp_pred), p_den))
        r = np.nan_to_num(_div(_get(s, tp_gold), r_den))
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1.0), 0.0)
        return np.where((p_den == 0) & (r_den == 0), np.nan, value)

    return formula


def harmonic(a: Callable[[Sums], Array], b: Callable[[Sums], Array]) -> Callable[[Sums], Array]:
    def formula(s: Sums) -> Array:
        x, y = a(s), b(s)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(x + y > 0, 2 * x * y / np.where(x + y > 0, x + y, 1.0), 0.0) + 0 * x * y

    return formula


def mean2(a: Callable[[Sums], Array], b: Callable[[Sums], Array]) -> Callable[[Sums], Array]:
    """The mean of two measures where both are defined, the one that is where only one is."""

    def formula(s: Sums) -> Array:
        x, y = a(s), b(s)
        both = np.vstack([x, y])
        count = np.sum(~np.isnan(both), axis=0)
        total = np.nansum(both, axis=0)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    return formula


@dataclass(frozen=True)
class Measure:
    name: str
    level: str
    formula: Callable[[Sums], Array]
    n: str | tuple[str, ...]  # the count(s) whose total is the measure's n
    definition: str


def resample_weights(episodes: int, resamples: int = RESAMPLES, seed: int = SEED) -> Array:
    """How many times each episode is drawn in each resample: (resamples, episodes)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, episodes, size=(resamples, episodes))
    weights = np.zeros((resamples, episodes))
    np.add.at(weights, (np.arange(resamples)[:, None], draws), 1.0)
    return weights


def _matrix(counts: Sequence[Mapping[str, float]], names: list[str]) -> Array:
    return np.array([[float(c.get(n, 0.0)) for n in names] for c in counts], dtype=np.float64).reshape(
        len(counts), len(names)
    )


def _round(value: float) -> float:
    return float(round(value, 4))


def _summary(point: float, draws: Array, n: int) -> dict[str, Any]:
    defined = draws[~np.isnan(draws)]
    value = None if np.isnan(point) else _round(point)
    ci = None
    if value is not None and defined.size:
        low, high = np.percentile(defined, [2.5, 97.5])
        ci = [_round(low), _round(high)]
    return {"value": value, "ci": ci, "n": n}


def _n(measure: Measure, totals: Mapping[str, float]) -> int:
    names = (measure.n,) if isinstance(measure.n, str) else measure.n
    return round(sum(totals.get(name, 0.0) for name in names))


def bootstrap(
    measures: Sequence[Measure], counts: Sequence[Mapping[str, float]], weights: Array | None = None
) -> dict[str, dict[str, Any]]:
    """``{name: {value, ci, n}}`` for each measure, from per-episode ``counts``."""
    names = sorted({k for c in counts for k in c})
    if not counts or not names:
        return {m.name: {"value": None, "ci": None, "n": 0} for m in measures}
    matrix = _matrix(counts, names)
    w = weights if weights is not None else resample_weights(len(counts))
    totals = dict(zip(names, matrix.sum(axis=0), strict=True))
    point = {n: np.array([v]) for n, v in totals.items()}
    sampled = w @ matrix
    draws = {n: sampled[:, i] for i, n in enumerate(names)}
    return {m.name: _summary(float(m.formula(point)[0]), m.formula(draws), _n(m, totals)) for m in measures}


def paired_bootstrap(
    measures: Sequence[Measure],
    counts_a: Sequence[Mapping[str, float]],
    counts_b: Sequence[Mapping[str, float]],
    weights: Array | None = None,
) -> dict[str, dict[str, Any]]:
    """``{name: {a, b, difference: {value, ci, n}}}``: B minus A over paired episodes (same order)."""
    names = sorted({k for c in [*counts_a, *counts_b] for k in c})
    if not counts_a or not names:
        empty = {"value": None, "ci": None, "n": 0}
        return {m.name: {"a": None, "b": None, "difference": empty} for m in measures}
    ma, mb = _matrix(counts_a, names), _matrix(counts_b, names)
    w = weights if weights is not None else resample_weights(len(counts_a))
    ta, tb = ma.sum(axis=0), mb.sum(axis=0)
    pa = {n: np.array([ta[i]]) for i, n in enumerate(names)}
    pb = {n: np.array([tb[i]]) for i, n in enumerate(names)}
    sa, sb = w @ ma, w @ mb
    da = {n: sa[:, i] for i, n in enumerate(names)}
    db = {n: sb[:, i] for i, n in enumerate(names)}
    out: dict[str, dict[str, Any]] = {}
    for m in measures:
        a, b = float(m.formula(pa)[0]), float(m.formula(pb)[0])
        n = min(_n(m, dict(zip(names, ta, strict=True))), _n(m, dict(zip(names, tb, strict=True))))
        diff = _summary(b - a, m.formula(db) - m.formula(da), n)
        out[m.name] = {
            "a": None if np.isnan(a) else _round(a),
            "b": None if np.isnan(b) else _round(b),
            "difference": diff,
        }
    return out
