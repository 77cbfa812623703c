"""The engine: every detector sees each event in trace order, then the event updates the state.

One engine serves both modes: ``memtap check`` feeds it the events of a database, the live
detector thread feeds it each batch the recorder committed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from memtap.errors import ConfigError
from memtap.findings.access import (
    Canary,
    CanaryExposure,
    CrossNamespace,
    LeakInjection,
    LeakRetrieval,
    SecretStored,
)
from memtap.findings.lifecycle import (
    DestructiveUpdate,
    Duplicate,
    Erasure,
    LostOnFailure,
    ReaddDeletes,
    StaleCoexistence,
    UntrustedOverwrite,
)
from memtap.findings.model import Detector, EventView, Finding, Shape
from memtap.findings.state import TraceState, changes_state

__all__ = ["DETECTOR_NAMES", "Engine", "EngineStats", "gc_paused", "make_detectors"]

DETECTOR_NAMES = (
    "erasure",
    "destructive_update",
    "stale_coexistence",
    "readd_deletes",
    "lost_on_failure",
    "duplicate",
    "untrusted_overwrite",
    "leak_retrieval",
    "leak_injection",
    "cross_namespace",
    "canary_exposure",
    "secret_stored",
)


def make_detectors(canaries: Sequence[Canary] = (), only: Iterable[str] | None = None) -> list[Detector]:
    """A fresh instance of every detector (or of those ``only`` names), in a fixed order."""
    detectors: list[Detector] = [
        Erasure(),
        DestructiveUpdate(),
        StaleCoexistence(),
        ReaddDeletes(),
        LostOnFailure(),
        Duplicate(),
        UntrustedOverwrite(),
        LeakRetrieval(),
        LeakInjection(),
        CrossNamespace(),
        CanaryExposure([Canary(c.value, set(c.owners), c.configured) for c in canaries]),
        SecretStored(),
    ]
    if only is None:
        return detectors
    wanted = set(only)
    unknown = wanted - set(DETECTOR_NAMES)
    if unknown:
        raise ConfigError(
            f"unknown detector(s) {', '.join(sorted(unknown))}; known: {', '.join(DETECTOR_NAMES)}"
        )
    return [d for d in detectors if d.name in wanted]


_DENYING = ("observe:would-deny", "enforce:withheld")  # gate verdicts that name denied items


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk pass: the events, effects and state built here
    hold no reference cycles, and collecting a heap of millions of them again and again cost more
    than reading them. When the pass ends, what it allocated and still holds is moved into the
    oldest generation unscanned (``gc.freeze`` then ``gc.unfreeze``): left in the youngest, every
    object would be traversed once by the first collection after the pause (5% of a check)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


@dataclass
class EngineStats:
    events: int = 0
    findings: int = 0
    detector_errors: int = 0
    last_error: str | None = None
    last_error_event: str | None = None  # the id of the event of the last error
    by_kind: dict[str, int] = field(default_factory=dict)


class Engine:
    """Detectors plus the trace state they share."""

    def __init__(self, detectors: list[Detector] | None = None) -> None:
        self.detectors = detectors if detectors is not None else make_detectors()
        self.state = TraceState()
        self.stats = EngineStats()
        self._by_shape: dict[Shape, list[Detector]] = {}
        self._by_key: dict[tuple[object, ...], tuple[list[Detector], bool]] = {}

    def detectors_for(self, event: EventView) -> list[Detector]:
        """The detectors that want to see ``event`` (by its shape), in their fixed order."""
        return self._plan(event)[0]

    def _plan(self, event: EventView) -> tuple[list[Detector], bool]:
        """``detectors_for(event)``, and whether the event can change the state (``changes_state``:
        a retrieval, a quarter of a trace's events with ten effects each, is only counted)."""
        gate = event.gate
        effects = event.effects
        # A plain tuple as the key, the one effect's kind as it is (most events have one); the
        # ``Shape`` is made only for a key not seen before.
        key = (
            event.op,
            event.status == "ok",
            bool(event.error),
            effects[0].kind if len(effects) == 1 else frozenset([e.kind for e in effects]),
            event.context.role,
            None if gate is None else ("deny" if gate.startswith(_DENYING) else "other"),
            event.parent_id is not None,
        )
        plan = self._by_key.get(key)
        if plan is None:
            kinds = frozenset([e.kind for e in effects])
            plan = self._by_key[key] = (
                self._for_shape(Shape(key[0], key[1], key[2], kinds, *key[4:])),
                changes_state(key[0], kinds),
            )
        return plan

    def _for_shape(self, shape: Shape) -> list[Detector]:
        chosen = self._by_shape.get(shape)
        if chosen is None:
            chosen = self._by_shape[shape] = [d for d in self.detectors if d.wants(shape)]
        return chosen

    def feed(self, events: Iterable[EventView]) -> list[Finding]:
        return [finding for _, finding in self.feed_seen(events)]

    def feed_seen(self, events: Iterable[EventView]) -> list[tuple[str, Finding]]:
        """``feed``, each finding paired with the id of the event that was seen when it was found
        (a finding may be located at an earlier event: a chat judged when its search is seen)."""
        found: list[tuple[str, Finding]] = []
        append, state, stats = found.append, self.state, self.stats
        for event in events:
            stats.events += 1
            seen = event.id
            detectors, changes = self._plan(event)
            for detector in detectors:
                try:
                    for finding in detector.observe(event, state):
                        append((seen, finding))
                except Exception as exc:  # a broken rule must not stop the others, nor recording
                    stats.detector_errors += 1
                    stats.last_error = f"{detector.name} on {event.id}: {type(exc).__name__}: {exc}"
                    stats.last_error_event = event.id
            if changes:
                state.apply(event)
            else:
                state.events_seen += 1  # all ``apply`` would do
        by_kind = stats.by_kind
        for _, finding in found:
            stats.findings += 1
            by_kind[finding.kind] = by_kind.get(finding.kind, 0) + 1
        return found
