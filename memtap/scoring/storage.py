"""Storage level: what the backend wrote, changed and deleted, against the gold lifecycle.

One pass over an episode's write effects (in event order, each at its session's position)
builds every item's timeline (its versions, each aligned to gold keys, and its deletion) and
counts, per episode (see ``docs/scoring.md`` for the definitions):

- ``capture.*``: per session, new content against the session's ``gold.capture``;
- ``add.*`` and ``delete.*``: on sessions with gold changes, writes and removals against
  ``gold.update.add`` and ``gold.update.delete``;
- ``unsafe.*``: deletes of items holding a gold memory still valid then;
- ``erasure.*``: superseded memories whose every holder was deleted (not versioned);
- ``under.*``: gold changes no write ever held; ``over.*``: true memories of preserve episodes
  overwritten by an update.

A removal is an effect that takes content away: a delete, or an update whose new content no
longer holds a gold key its old content held. An update whose ``derived_from`` names another
item (the reference memory server replaces an observation by deleting it and adding a new one)
removes that item's content; the same removal is counted once per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtap.scoring.align import Aligner
from memtap.scoring.trace import Counts, EpisodeTrace, WriteOp, new_counts

__all__ = ["StorageView", "Version"]


@dataclass(frozen=True)
class Version:
    item_id: str
    n: int
    content: str | None
    pos: int
    keys: frozenset[str]


@dataclass
class _Removal:
    pos: int
    how: str  # delete | update
    item_id: str
    keys: frozenset[str]


@dataclass
class StorageView:
    """An episode's items over time, aligned to its gold, with the storage-level counts."""

    trace: EpisodeTrace
    aligner: Aligner
    counts: Counts = field(default_factory=new_counts)
    timeline: dict[str, list[tuple[int, Version | None]]] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)
    removals: list[_Removal] = field(default_factory=list)
    writes: list[Version] = field(default_factory=list)
    sessions: list[dict[str, object]] = field(default_factory=list)
    # An item an update wrote under a new id -> the items it replaced (ids that hash the content).
    replaced: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, trace: EpisodeTrace, aligner: Aligner) -> StorageView:
        view = cls(trace, aligner)
        view._replay(trace.ops)
        view._count()
        return view

    # -- the timeline ---------------------------------------------------------------------------

    def _current(self, item: str) -> Version | None:
        entries = self.timeline.get(item)
        return entries[-1][1] if entries else None

    def _replay(self, ops: list[WriteOp]) -> None:
        removed_here: set[tuple[int, str]] = set()
        for op in ops:
            if op.kind == "delete":
                prev = self._current(op.item_id)
                keys = prev.keys if prev else self.aligner.align(op.item_id, 0, op.before, op.pos)
                self.timeline.setdefault(op.item_id, []).append((op.pos, None))
                self.removals.append(_Removal(op.pos, "delete", op.item_id, keys))
                removed_here.add((op.pos, op.item_id))
                self.counts["unsafe.deletes"] += 1
                if any(self.aligner.valid_at(k, op.pos) for k in keys):
                    self.counts["unsafe.unsafe"] += 1
                continue
            n = sum(1 for _, v in self.timeline.get(op.item_id, []) if v is not None) + 1
            keys = self.aligner.align(op.item_id, n, op.after, op.pos)
            version = Version(op.item_id, n, op.after, op.pos, keys)
            if op.kind == "update":
                source = op.removed or op.item_id
                prev = self._current(source)
                before = prev.keys if prev else self.aligner.align(source, 0, op.before, op.pos)
                if source != op.item_id and prev is not None:
                    self.timeline[source].append((op.pos, None))  # replaced by a new item
                if source != op.item_id:
                    self.replaced.setdefault(op.item_id, set()).add(source)
                lost = before - keys
                if lost and (op.pos, source) not in removed_here:
                    self.removals.append(_Removal(op.pos, "update", source, lost))
                    removed_here.add((op.pos, source))
            self.timeline.setdefault(op.item_id, []).append((op.pos, version))
            self.writes.append(version)
            for key in keys:
                self.holders.setdefault(key, set()).add(op.item_id)

    def keys_at(self, item: str, pos: float) -> frozenset[str] | None:
        """The gold keys item ``item`` holds at ``pos`` (None: not written, or deleted, by then)."""
        state: Version | None = None
        for at, version in self.timeline.get(item, []):
            if at > pos:
                break
            state = version
        return state.keys if state is not None else None

    def version_of(self, item: str, content: str | None) -> Version | None:
        for _, version in reversed(self.timeline.get(item, [])):
            if version is not None and (content is None or version.content == content):
                return version
        return None

    def stored_at(self, key: str, pos: float) -> bool:
        return any(key in (self.keys_at(item, pos) or ()) for item in self.holders.get(key, ()))

    def outside_gold(self, item: str) -> bool:
        """Whether ``item`` is an item of this episode that never held a gold memory: no version of
        it or of an item it replaced (an update under a new id), and nothing a removal took from
        them, aligned to one. An item the episode never wrote is not known here, so not outside."""
        if item not in self.timeline:
            return False
        lineage, todo = set(), [item]
        while todo:
            one = todo.pop()
            if one not in lineage:
                lineage.add(one)
                todo += self.replaced.get(one, ())
        for one in lineage:
            if any(version is not None and version.keys for _, version in self.timeline.get(one, ())):
                return False
        return not any(r.item_id in lineage and r.keys for r in self.removals)

    def captured(self, key: str) -> bool:
        return bool(self.holders.get(key))

    def last_loss(self, key: str, pos: float) -> str | None:
        """How ``key`` was last taken away by ``pos``: ``delete`` or ``update`` (None: never)."""
        found = [r for r in self.removals if key in r.keys and r.pos <= pos]
        return found[-1].how if found else None

    def erased(self, key: str) -> bool:
        """Every item that ever held ``key`` was deleted (none kept it as a version)."""
        items = self.holders.get(key, set())
        return bool(items) and all(
            (entries := self.timeline.get(item)) is not None and entries[-1][1] is None for item in items
        )

    # -- the counts -----------------------------------------------------------------------------

    def _count(self) -> None:
        ep = self.trace.episode
        a, c = self.aligner, self.counts
        gold = ep.gold_memory
        update_adds = {k for s in ep.sessions for k in s.gold.update.add} | {
            k for k, g in gold.items() if g.replaces
        }
        changes = [i for i, s in enumerate(ep.sessions) if s.gold.update.add or s.gold.update.delete]
        by_pos: dict[int, list[Version]] = {}
        for version in self.writes:
            by_pos.setdefault(version.pos, []).append(version)
        for i, session in enumerate(ep.sessions):
            wanted = set(session.gold.capture)
            written = by_pos.get(i, [])
            tp = fp = restated = 0
            for version in written:
                keys = version.keys
                if keys & update_adds:
                    continue
                if keys & wanted:
                    tp += 1
                elif keys and all(a.valid_at(k, i) and a.created[k] < i for k in keys):
                    restated += 1
                else:
                    fp += 1
            held = {k for v in written for k in v.keys}
            got = len(wanted & held)
            c["capture.tp_pred"] += tp
            c["capture.pred"] += tp + fp
            c["capture.tp_gold"] += got
            c["capture.gold"] += len(wanted)
            c["capture.restated"] += restated
            self.sessions.append(
                {
                    "session": session.session_id,
                    "capture_gold": len(wanted),
                    "capture_hit": got,
                    "true_writes": tp,
                    "false_writes": fp,
                    "restated": restated,
                }
            )
        scored = set(changes)
        for i in changes:
            session = ep.sessions[i]
            written = by_pos.get(i, [])
            c["add.pred"] += len(written)
            c["add.tp_pred"] += sum(
                1 for v in written if any(k in update_adds and a.valid_at(k, i) for k in v.keys)
            )
            c["add.gold"] += len(session.gold.update.add)
            c["add.tp_gold"] += sum(
                1
                for k in session.gold.update.add
                if any(k in v.keys and v.pos in scored and v.pos >= a.created[k] for v in self.writes)
            )
            removals = [r for r in self.removals if r.pos == i]
            c["delete.pred"] += len(removals)
            c["delete.tp_pred"] += sum(1 for r in removals if any(a.invalidated[k] <= i for k in r.keys))
            c["delete.gold"] += len(session.gold.update.delete)
            c["delete.tp_gold"] += sum(
                1
                for k in session.gold.update.delete
                if any(k in r.keys and r.pos in scored and r.pos >= a.invalidated[k] for r in self.removals)
            )
        superseded = {old for g in gold.values() for old in g.replaces if old in gold}
        for key in superseded:
            if self.captured(key):
                c["erasure.captured"] += 1
                c["erasure.erased"] += self.erased(key)
        for key, memory in gold.items():
            if memory.replaces:
                c["under.changes"] += 1
                c["under.missed"] += not self.captured(key)
        if ep.expected_behavior == "preserve":
            end = len(ep.sessions)
            for key in gold:
                if a.invalidated[key] == float("inf") and self.captured(key):
                    c["over.true"] += 1
                    kept = self.stored_at(key, end)
                    c["over.overwritten"] += (not kept) and self.last_loss(key, end) == "update"
