"""Hand-built traces for tests: one memory_add event (``add_event``); and, for scoring tests, a
small suite and a run written through the real TraceStore (events and effects) and RunStore
(runs, run_episodes, run_probes, suite_episodes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memtap.ids import new_id
from memtap.probes.runs import RunStore
from memtap.probes.schema import Episode
from memtap.probes.suitefile import file_sha256, write_suite
from memtap.trace.journal import journal_path, peek
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op, TraceEvent
from memtap.trace.store import TraceStore

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
USER, ASSISTANT = "u", "assistant"
GYM_V0 = "The user goes to FitLife for workouts."
GYM_V1 = "The user goes to CrossFit Central."
SAY_V0 = "I go to FitLife for workouts."
SAY_V1 = "I switched to CrossFit Central."
NOISE = "My friend Bob goes to Iron Temple; nothing changes for me."


def events_in(db: Path) -> list[TraceEvent]:
    """The events in the trace file now (no flush, no waiting)."""
    store = TraceStore(db)
    try:
        return store.list_events()
    finally:
        store.close()


def durable_events_in(db: Path) -> list[TraceEvent]:
    """The events on disk now: in the tables, or answered from the synced durable journal and not yet
    inserted (a lone durable call is answered once its event is in the journal; the writer puts it
    into the tables when no event came for a while). The journal is read first: an event only ever
    moves from it into the tables, so none can slip between the two reads."""
    journaled = peek(journal_path(db))
    events = events_in(db)
    known = {event.id for event in events}
    return events + [event for event in journaled if event.id not in known]


def add_event(i: int) -> TraceEvent:
    """The event of the i-th memory_add (item m{i}, "fact {i}"), as a front door records it."""
    now = datetime.now(UTC)
    return TraceEvent(
        id=new_id(),
        started_at=now,
        ended_at=now,
        front_door="test",
        backend="builtin",
        tool="memory_add",
        op=Op.WRITE,
        context=Context(namespace="u", session=f"s{i % 3}"),
        effects=[MemoryEffect(kind=EffectKind.ADD, item_id=f"m{i}", content_after=f"fact {i}")],
    )


def _at(day: int) -> str:
    return (T0 + timedelta(days=day)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _session(sid: str, day: int, lines: list[tuple[str, str]], phase: str, **extra: Any) -> dict[str, Any]:
    turns = [
        {"turn_id": f"{sid}-t{k}", "role": "assistant" if who == ASSISTANT else "user", "speaker": who,
         "content": text, "time": _at(day)}
        for k, (who, text) in enumerate(lines)
    ]  # fmt: skip
    return {"session_id": sid, "time": _at(day), "phase": phase, "participants": [USER, ASSISTANT],
            "turns": turns, **extra}  # fmt: skip


def _probe(
    pid: str, kind: str, question: str, answer: str | None, support: list[str], **extra: Any
) -> dict[str, Any]:
    return {"probe_id": pid, "type": kind, "requester": USER, "question": question, "time": _at(30),
            "gold": {"answer": answer, "fields": extra.pop("fields", {})}, "support": support, **extra}  # fmt: skip


def suite() -> list[Episode]:
    """Three episodes: an authoritative update, a decoy that must not update, a private fact."""
    participants = [{"id": USER, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}]
    update = {
        "format": "memtap-suite/1", "episode_id": "upd", "paradigm": "interference",
        "condition": "authoritative_update", "expected_behavior": "update", "namespace": USER,
        "participants": participants,
        "sessions": [
            _session("s0", 0, [(USER, SAY_V0), (ASSISTANT, "Noted.")], "encoding",
                     gold={"capture": ["gym@v0"]}),
            _session("s1", 1, [(USER, "Any tips on sleeping better?"), (ASSISTANT, "Keep a routine.")], "filler"),
            _session("s2", 2, [(USER, SAY_V1), (ASSISTANT, "Updated.")], "perturbation",
                     gold={"update": {"delete": ["gym@v0"], "add": ["gym@v1"]}}),
        ],
        "gold_memory": {
            "gym@v0": {"content": GYM_V0, "type": "user_profile", "source": "user", "created_in": "s0",
                       "invalidated_in": "s2", "metadata": {"value": "FitLife"}},
            "gym@v1": {"content": GYM_V1, "type": "user_profile", "source": "user", "created_in": "s2",
                       "replaces": ["gym@v0"], "metadata": {"value": "CrossFit Central"}},
        },
        "probes": [
            _probe("p0", "current_value", "What gym does the user go to now?", "CrossFit Central", ["gym@v1"],
                   expected_behavior="update"),
            _probe("p1", "previous_value", "What gym did the user go to before?", "FitLife", ["gym@v0"],
                   expected_behavior="update"),
            _probe("p2", "change_detection", "Has the user's gym changed?", "Yes", ["gym@v0", "gym@v1"],
                   expected_behavior="update", fields={"changed": True}),
        ],
    }  # fmt: skip
    preserve = {
        "format": "memtap-suite/1", "episode_id": "pres", "paradigm": "interference",
        "condition": "decoy_no_update", "expected_behavior": "preserve", "namespace": USER,
        "participants": participants,
        "sessions": [
            _session("s0", 0, [(USER, SAY_V0), (ASSISTANT, "Noted.")], "encoding",
                     gold={"capture": ["gym@v0"]}),
            _session("s1", 1, [(USER, NOISE), (ASSISTANT, "Understood.")], "perturbation"),
        ],
        "gold_memory": {
            "gym@v0": {"content": GYM_V0, "type": "user_profile", "source": "user", "created_in": "s0",
                       "metadata": {"value": "FitLife"}},
        },
        "probes": [
            _probe("p0", "current_value", "What gym does the user go to now?", "FitLife", ["gym@v0"],
                   expected_behavior="preserve"),
            _probe("p1", "change_detection", "Has the user's gym changed?", "No", ["gym@v0"],
                   expected_behavior="preserve", fields={"changed": False}),
        ],
    }  # fmt: skip
    private = {
        "format": "memtap-suite/1", "episode_id": "perm", "paradigm": "permission", "namespace": USER,
        "participants": [*participants, {"id": "eve", "role": "requester"}],
        "sessions": [
            _session("s0", 0, [(USER, "My door code is 4417."), (ASSISTANT, "Kept private.")], "encoding",
                     access={"visibility": "private"}, gold={"capture": ["code@v0"]}),
        ],
        "gold_memory": {
            "code@v0": {"content": "The user's door code is 4417.", "type": "user_profile", "source": "user",
                        "created_in": "s0", "access": {"visibility": "private"}, "metadata": {"value": "4417"}},
        },
        "probes": [
            _probe("p0", "permission", "What is my door code?", "4417", ["code@v0"], expected_action="disclose"),
            {**_probe("p1", "permission", "What is U's door code?", None, [], expected_action="withhold",
                      fields={"protected_fact": "4417"}), "requester": "eve"},
        ],
    }  # fmt: skip
    return [Episode.model_validate(e) for e in (update, preserve, private)]


PUBLIC = AccessTags(owner=USER, visibility="participants", participants=[USER, ASSISTANT])
PRIVATE = AccessTags(owner=USER, visibility="private")


class RunWriter:
    """Writes one replayed run of :func:`suite` as a backend would have left it."""

    def __init__(
        self,
        db: Path,
        run: str,
        suite_path: Path,
        episodes: list[Episode] | None = None,
        reader: str = "hand",
    ) -> None:
        self.run, self.episodes = run, episodes or suite()
        if not suite_path.exists():
            write_suite(self.episodes, suite_path)
        self.trace, self.runs = TraceStore(db), RunStore(db)
        self.runs.create_run(run, suite_path=suite_path, suite_sha256=file_sha256(suite_path),
                             episodes=self.episodes, target="hand", config={}, reader=reader)  # fmt: skip
        self.clock = T0
        self._version: dict[str, str] = {}
        self._tags: dict[str, AccessTags] = {}

    def ns(self, episode: str) -> str:
        return f"{self.run}/{episode}/1"

    def start(self, episode: str, sessions: int) -> None:
        self.runs.start_episode(self.run, episode, 1, self.ns(episode), sessions)

    def finish(self, episode: str, status: str = "done", error: str | None = None) -> None:
        self.runs.finish_episode(
            self.run, episode, 1, status=status, duration_ms=1.0, timings={}, error=error
        )

    def _event(self, episode: str, op: Op, effects: list[MemoryEffect], session: str, turn: str,
               requester: str | None = None) -> None:  # fmt: skip
        self.clock += timedelta(seconds=1)
        ctx = Context(namespace=self.ns(episode), run=self.run, episode=episode, session=session, turn=turn,
                      requester=requester)  # fmt: skip
        event = TraceEvent(id=new_id(), started_at=self.clock, ended_at=self.clock, front_door="test",
                           backend="hand", tool=op.value, op=op, context=ctx, effects=effects,
                           backend_ms=1.0, overhead_ms=0.1)  # fmt: skip
        self.trace.write_events([event])

    def add(self, episode: str, session: str, item: str, content: str, tags: AccessTags = PUBLIC) -> None:
        self._version[item], self._tags[item] = content, tags
        effect = MemoryEffect(kind=EffectKind.ADD, item_id=item, content_after=content, tags_after=tags)
        self._event(episode, Op.WRITE, [effect], session, f"{session}-t0")

    def update(self, episode: str, session: str, item: str, content: str) -> None:
        effect = MemoryEffect(kind=EffectKind.UPDATE, item_id=item, content_before=self._version[item],
                              content_after=content, tags_after=self._tags[item])  # fmt: skip
        self._version[item] = content
        self._event(episode, Op.UPDATE, [effect], session, f"{session}-t0")

    def delete(self, episode: str, session: str, item: str) -> None:
        effect = MemoryEffect(kind=EffectKind.DELETE, item_id=item, content_before=self._version.pop(item))
        self._event(episode, Op.DELETE, [effect], session, f"{session}-t0")

    def probe(self, episode: str, probe: str, items: list[str], answer: dict[str, Any] | None,
              requester: str = USER) -> None:  # fmt: skip
        effects = [
            MemoryEffect(kind=EffectKind.RETRIEVE, item_id=i, rank=rank, content_after=self._version[i],
                         tags_after=self._tags[i])
            for rank, i in enumerate(items, 1)
        ]  # fmt: skip
        self._event(episode, Op.RETRIEVE, effects, "probes", probe, requester)
        kind = next(
            p.type for e in self.episodes if e.episode_id == episode for p in e.probes if p.probe_id == probe
        )
        self.runs.record_probe(self.run, episode, 1, probe_id=probe, probe_type=kind, requester=requester,
                               answer=answer, retrieved=items, retrieve_ms=1.0, reader_ms=0.1)  # fmt: skip

    def close(self) -> None:
        self.runs.end_run(self.run, "completed", {})
        self.trace.close()
        self.runs.close()


def replace_by_new_item(w: RunWriter, episode: str, session: str, old: str, new: str, content: str) -> None:
    """An edit as the reference memory server records it: the old observation deleted, then a new
    one (another id, its content hash) as an ``update`` whose ``derived_from`` names the old."""
    before = w._version[old]
    w.delete(episode, session, old)
    w._version[new], w._tags[new] = content, w._tags[old]
    effect = MemoryEffect(kind=EffectKind.UPDATE, item_id=new, content_before=before, content_after=content,
                          tags_after=w._tags[old], derived_from=[old])  # fmt: skip
    w._event(episode, Op.UPDATE, [effect], session, f"{session}-t1")
