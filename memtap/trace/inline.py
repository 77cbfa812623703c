"""A call's event, committed in the same transaction as the write it describes.

The builtin backend keeps its memory in the trace's own SQLite file. For each storage
call (add, update, delete) :func:`memtap.trace.calls.recorded_call` offers the call's
event as an :class:`InlineEvent`; the backend, on its own thread and inside its write
transaction, :meth:`~InlineEvent.claim`\\ s it with the value and effects it is about to
commit and inserts it with :func:`memtap.trace.store.insert_events`. The write and its
event then commit together, or neither does: no write exists without its event, in
durable mode or not, whatever kills the process. ``recorded_call`` then does not hand
the event to the recorder again.

Exactly one side records the event:

- ``OPEN``: nobody has it yet. A backend may claim it; a front door whose call is
  cancelled takes it (``FRONT``) and records the call as cancelled;
- ``BACKEND``: a backend claimed it in its transaction. If that transaction rolls back,
  the backend :meth:`~InlineEvent.release`\\ s it, back to ``OPEN`` (or, when the call
  was abandoned meanwhile, the front door's fallback records it then);
- ``FRONT``: the front door recorded it (cancelled before the backend's commit). A
  backend that tries to claim it now gets ``None`` and must roll its write back.
"""

from __future__ import annotations

import contextvars
import enum
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memtap.trace.models import MemoryEffect, TraceEvent

__all__ = ["InlineEvent", "current_inline_event"]

_CURRENT: contextvars.ContextVar[InlineEvent | None] = contextvars.ContextVar("memtap_inline", default=None)


class _State(enum.Enum):
    OPEN = "open"
    BACKEND = "backend"
    FRONT = "front"


class InlineEvent:
    """The event of one storage call, for a backend that writes the trace's own file."""

    def __init__(
        self,
        path: Path,
        build: Callable[[Any, list[MemoryEffect]], TraceEvent],
        on_committed: Callable[[], None],
    ) -> None:
        self.path = path  # the trace database the event belongs in
        self._build = build
        self._on_committed = on_committed
        self._lock = threading.Lock()
        self._state = _State.OPEN
        self._fallback: Callable[[], None] | None = None
        self.event: TraceEvent | None = None

    @property
    def claimed(self) -> bool:
        """Whether a backend committed (or is committing) the event with its write."""
        return self._state is _State.BACKEND

    def claim(self, value: Any, effects: list[MemoryEffect]) -> TraceEvent | None:
        """In the backend's transaction: the event to insert, or None if the call was abandoned
        (the backend must then roll its write back)."""
        event = self._build(value, effects)
        with self._lock:
            if self._state is not _State.OPEN:
                return None
            self._state = _State.BACKEND
            self.event = event
            return event

    def committed(self) -> None:
        """The backend's transaction holding the event committed."""
        self._on_committed()

    def release(self) -> None:
        """The backend's transaction rolled back after its claim: the event is not in the file."""
        with self._lock:
            fallback, self._fallback = self._fallback, None
            self._state = _State.FRONT if fallback is not None else _State.OPEN
            self.event = None
        if fallback is not None:
            fallback()

    def abandon(self, record: Callable[[], None]) -> None:
        """The front door's call was cancelled: ``record`` its event unless a backend has it.

        Called while a backend is committing, ``record`` runs only if that commit fails.
        """
        with self._lock:
            if self._state is _State.BACKEND:
                self._fallback = record
                return
            self._state = _State.FRONT
        record()


def current_inline_event(path: Path) -> InlineEvent | None:
    """The event of the storage call being served, if it belongs in the file at ``path``."""
    offer = _CURRENT.get()
    return offer if offer is not None and offer.path == path else None


def offer(inline: InlineEvent | None) -> contextvars.Token[InlineEvent | None]:
    return _CURRENT.set(inline)


def withdraw(token: contextvars.Token[InlineEvent | None]) -> None:
    _CURRENT.reset(token)
