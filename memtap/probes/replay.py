"""The replay driver: play a suite's episodes through a target, record the run, resume it.

Per episode (MemProbe's protocol): a fresh namespace (``RUN/EPISODE/ATTEMPT``); sessions in
time order, every turn marked on the replay clock and sent through the target's front door
with its context (run, episode, session, turn, role, speaker, access tags); each probe asked
by its requester once every session before its time has been played; the reader's answer
stored with what was retrieved. Episodes run in parallel on ``workers`` tasks.

A target that fails marks that episode ``failed`` with the error and the run goes on. Ctrl-C
(cancellation) marks the episodes in flight ``interrupted`` and the run ``interrupted`` (a
target that cannot start marks it ``failed``); a
resumed run skips ``done`` episodes and plays every other one again as a new attempt in a new
namespace, so the final trace holds each session exactly once (see ``runs.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio

from memtap.probes.ab_replay import RecordedPlayer, ab_summary, is_recorded
from memtap.probes.dialects import dialect_of
from memtap.probes.readers import Reader
from memtap.probes.replay_calls import PROBE_SESSION, batch_ingest, probe_call, probe_turn, turn_calls
from memtap.probes.runs import RunStore
from memtap.probes.schema import Episode, Probe, Session
from memtap.probes.suitefile import Suite
from memtap.probes.targets.base import (
    BatchIngest,
    EpisodeScope,
    PipelinedProbes,
    ProbeResult,
    Target,
    TargetError,
    TurnFailed,
)
from memtap.probes.threads import abandonable

__all__ = [
    "PROBE_SESSION",
    "Progress",
    "ReplayPlan",
    "batch_ingest",
    "describe_error",
    "episode_namespace",
    "probe_turn",
    "replay_suite",
]


def episode_namespace(run_id: str, episode_id: str, attempt: int) -> str:
    return f"{run_id}/{episode_id}/{attempt}"


def describe_error(exc: BaseException) -> str:
    """One line for an error, looking inside exception groups for the first real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class Progress:
    """Episodes, sessions and probes done, on one self-rewriting line (only on a terminal)."""

    episodes: int
    sessions: int
    probes: int
    out: TextIO | None = None
    done: dict[str, int] = field(
        default_factory=lambda: {"episodes": 0, "failed": 0, "sessions": 0, "probes": 0}
    )
    _last: float = 0.0

    def add(self, what: str, n: int = 1) -> None:
        self.done[what] += n
        now = time.monotonic()
        if self.out is not None and now - self._last >= 0.1:
            self._last = now
            self.render()

    def render(self, end: str = "") -> None:
        if self.out is None:
            return
        d = self.done
        failed = f" ({d['failed']} failed)" if d["failed"] else ""
        self.out.write(
            f"\rreplay: episodes {d['episodes']}/{self.episodes}{failed} · sessions {d['sessions']}/"
            f"{self.sessions} · probes {d['probes']}/{self.probes}{end}"
        )
        self.out.flush()


@dataclass
class ReplayPlan:
    run_id: str
    episodes: list[Episode]
    attempts: dict[str, int]  # attempts already made per episode (0 for new)
    workers: int = 1
    limit: int = 5
    ingest: str = "auto"  # auto (a session's turns at once where the target takes them), turn, batch


class _Player:
    def __init__(self, plan: ReplayPlan, target: Target, store: RunStore, reader: Reader, progress: Progress):
        self.plan, self.target, self.store, self.reader, self.progress = plan, target, store, reader, progress
        self.batch = batch_ingest(target, plan.ingest)

    async def worker(self, queue: list[Episode]) -> None:
        while queue:
            await self.play(queue.pop(0))

    async def play(self, episode: Episode) -> None:
        run = self.plan.run_id
        attempt = self.plan.attempts.get(episode.episode_id, 0) + 1
        scope = EpisodeScope(
            run,
            episode.episode_id,
            attempt,
            episode_namespace(run, episode.episode_id, attempt),
            episode.owner(),
        )
        self.store.start_episode(run, episode.episode_id, attempt, scope.namespace, len(episode.sessions))
        started = time.perf_counter()
        timings = {"ingest_ms": 0.0, "probe_ms": 0.0}
        counts: dict[str, int] | None = None
        try:
            if episode.paradigm == "canary":
                from memtap.probes.canary_replay import play_canary

                counts, _, probes = await play_canary(
                    self.target, self.store, episode, scope, self.plan.limit
                )
                self.progress.add("sessions", len(episode.sessions))
                self.progress.add("probes", probes)
            else:
                await self._open_play_close(episode, scope, timings)
        except anyio.get_cancelled_exc_class():
            self._finish(scope, "interrupted", started, timings, "interrupted")
            raise
        except Exception as exc:
            self._finish(scope, "failed", started, timings, describe_error(exc))
            self.progress.add("failed")
            return
        self._finish(scope, "done", started, timings, None, counts)
        self.progress.add("episodes")

    async def _open_play_close(
        self, episode: Episode, scope: EpisodeScope, timings: dict[str, float]
    ) -> None:
        """Close in the task that opened, inside no scope entered since: targets hold task groups."""
        await self.target.open_episode(scope)
        try:
            await self._episode(episode, scope, timings)
        except BaseException:
            with contextlib.suppress(Exception):  # the episode's own error is the one to record
                await self.target.close_episode(scope)
            raise
        await self.target.close_episode(scope)

    def _finish(
        self,
        scope: EpisodeScope,
        status: str,
        started: float,
        timings: dict[str, float],
        error: str | None,
        counts: dict[str, int] | None = None,
    ) -> None:
        elapsed = (time.perf_counter() - started) * 1000
        rounded = {k: round(v, 3) for k, v in timings.items()}
        self.store.finish_episode(
            scope.run,
            scope.episode,
            scope.attempt,
            status=status,
            duration_ms=elapsed,
            timings=rounded,
            error=error,
            counts=counts,
        )

    async def _episode(self, episode: Episode, scope: EpisodeScope, timings: dict[str, float]) -> None:
        pending = sorted(episode.probes, key=lambda p: p.time)
        done = {"sessions": 0, "turns": 0, "probes": 0}
        recorded = RecordedPlayer(self.target, self.store, scope) if is_recorded(episode) else None
        batch = self.batch if recorded is None else None  # recorded calls need their items' ids: one by one
        todo = list(episode.sessions)
        while todo:
            due = []
            while pending and pending[0].time < todo[0].time:
                due.append(pending.pop(0))
            await self._probes(episode, scope, due, timings, done)
            played = [todo.pop(0)]
            # Batched, the sessions up to the next probe due go together (they need no reaction between).
            while batch is not None and todo and not (pending and pending[0].time < todo[0].time):
                played.append(todo.pop(0))
            await self._ingest(episode, scope, played, timings, done, batch, recorded)
        await self._probes(episode, scope, pending, timings, done)
        self.store.progress(scope.run, scope.episode, scope.attempt, **done)

    async def _ingest(
        self,
        episode: Episode,
        scope: EpisodeScope,
        sessions: list[Session],
        timings: dict[str, float],
        done: dict[str, int],
        batch: BatchIngest | None,
        recorded: RecordedPlayer | None,
    ) -> None:
        """Send the turns of ``sessions`` (one session, unless batched) and count them played; a
        failed batch counts the sessions whose turns all came before the failed turn."""
        t0 = time.perf_counter()
        calls = [turn_calls(episode, session) for session in sessions]
        played = 0
        try:
            if batch is not None:
                await batch.ingest_turns(scope, [turn for turns in calls for turn in turns])
            else:
                for turn, call in zip(sessions[0].turns, calls[0], strict=True):
                    await self.target.mark(scope, call)
                    if recorded is not None:  # a recorded call: writes, updates, deletes (ab_replay.py)
                        await recorded.play(turn, call)
                    else:
                        await self.target.ingest_turn(scope, call)
            played = len(sessions)
        except TurnFailed as exc:
            ends = list(itertools.accumulate(len(turns) for turns in calls))
            played = sum(1 for end in ends if end <= exc.index)
            raise
        finally:
            timings["ingest_ms"] += (time.perf_counter() - t0) * 1000
            done["sessions"] += played
            done["turns"] += sum(len(turns) for turns in calls[:played])
            if played:
                self.store.progress(scope.run, scope.episode, scope.attempt, **done)
                self.progress.add("sessions", played)

    async def _probes(
        self, episode: Episode, scope: EpisodeScope, probes: list[Probe], timings: dict[str, float],
        done: dict[str, int],
    ) -> None:  # fmt: skip
        """Ask the probes due together (no turn between them): pipelined where the target takes them
        so, else one by one."""
        many = self.target if isinstance(self.target, PipelinedProbes) and not is_recorded(episode) else None
        if many is None or len(probes) < 2:
            for probe in probes:
                await self._probe(episode, scope, probe, timings)
                done["probes"] += 1
            return
        requesters = [episode.requester_of(probe) for probe in probes]
        calls = [probe_call(probe, requester) for probe, requester in zip(probes, requesters, strict=True)]
        results = await many.ask_probes(scope, calls, limit=self.plan.limit)
        for probe, requester, result in zip(probes, requesters, results, strict=True):
            await self._answer(episode, scope, probe, requester, result, timings)
            done["probes"] += 1

    async def _probe(
        self, episode: Episode, scope: EpisodeScope, probe: Probe, timings: dict[str, float]
    ) -> None:
        requester = episode.requester_of(probe)
        call = probe_call(probe, requester)
        # The replay clock marks the probe too, so the memory calls an agent makes on its own while it
        # answers are attributed to it (session "probes", turn PROBE_ID), as the builtin target's are.
        await self.target.mark(scope, probe_turn(probe, requester))
        try:
            result = await self.target.ask_probe(scope, call, limit=self.plan.limit)
        except TargetError as exc:
            if not is_recorded(episode):
                raise
            # a recorded retrieval the target refused: recorded, and the A/B run goes on
            self.store.record_probe(
                scope.run, scope.episode, scope.attempt, probe_id=probe.probe_id, probe_type=probe.type,
                requester=requester, answer=None, retrieved=[], retrieve_ms=None, reader_ms=None,
                status="failed", error=str(exc),
            )  # fmt: skip
            self.progress.add("probes")
            return
        await self._answer(episode, scope, probe, requester, result, timings)

    async def _answer(
        self, episode: Episode, scope: EpisodeScope, probe: Probe, requester: str, result: ProbeResult,
        timings: dict[str, float],
    ) -> None:  # fmt: skip
        """The reader's answer from what the probe retrieved, recorded with it."""
        t0 = time.perf_counter()
        dialect = dialect_of(episode)  # the field names the episode's published scorer reads
        if self.reader.blocking:
            answer = await abandonable(self.reader.answer, probe, requester, result, dialect)
        else:
            answer = self.reader.answer(probe, requester, result, dialect)
        reader_ms = (time.perf_counter() - t0) * 1000 if self.reader.name != "none" else None
        if result.reply is not None:
            answer = {"reply": result.reply, **(answer or {})}
        timings["probe_ms"] += result.retrieve_ms + (reader_ms or 0.0)
        self.store.record_probe(
            scope.run,
            scope.episode,
            scope.attempt,
            probe_id=probe.probe_id,
            probe_type=probe.type,
            requester=requester,
            answer=answer,
            retrieved=[r.item_id for r in result.retrieved],
            retrieve_ms=result.retrieve_ms,
            reader_ms=reader_ms,
        )
        self.progress.add("probes")


async def replay_suite(
    suite: Suite, plan: ReplayPlan, target: Target, store: RunStore, reader: Reader, *, show_progress: bool
) -> dict[str, Any]:
    """Play ``plan.episodes``; returns the run's summary. Cancellation marks the run interrupted."""
    todo = list(plan.episodes)
    progress = Progress(
        episodes=len(todo),
        sessions=sum(len(e.sessions) for e in todo),
        probes=sum(len(e.probes) for e in todo),
        out=sys.stderr if show_progress else None,
    )
    player = _Player(plan, target, store, reader, progress)
    started = time.perf_counter()
    status = "interrupted"
    try:
        _set_principals(plan, target)
        await target.start()
        progress.render()
        async with anyio.create_task_group() as tg:
            for _ in range(max(1, min(plan.workers, len(todo)))):
                tg.start_soon(player.worker, todo)
        status = "completed"
    except Exception:  # the target could not start, or the run's own bookkeeping failed
        status = "failed"
        raise
    finally:
        with anyio.move_on_after(120, shield=True):
            progress.render(end="\n")
            await target.aclose()
        summary = {
            "run": plan.run_id,
            "status": status,
            "target": target.describe(),
            "wall_s": round(time.perf_counter() - started, 3),
            **store.summary(plan.run_id),
        }
        played = progress.done["sessions"]  # this invocation's, whatever became of their episodes
        summary["sessions_played"] = played
        summary["sessions_per_s"] = round(played / summary["wall_s"], 2) if summary["wall_s"] else None
        summary.update(_trace_check(store, plan.run_id))
        summary.update(ab_summary(store, plan.run_id))
        store.end_run(plan.run_id, status, summary)
    return summary


def _set_principals(plan: ReplayPlan, target: Target) -> None:
    """A plan with canary episodes acts as one principal per user: the target makes their keys."""
    if not any(e.paradigm == "canary" for e in plan.episodes):
        return
    from memtap.probes.canary_replay import canary_principals
    from memtap.probes.targets.base import CanaryActions

    if isinstance(target, CanaryActions):
        bases = [
            (e, episode_namespace(plan.run_id, e.episode_id, plan.attempts.get(e.episode_id, 0) + 1))
            for e in plan.episodes
        ]
        target.set_principals(canary_principals(bases))


def _trace_check(store: RunStore, run_id: str) -> dict[str, Any]:
    """How many memory events the run recorded, and how many lack run, episode, session or turn."""
    row = store.conn.execute(
        "SELECT count(*), sum(episode IS NULL OR session IS NULL OR turn IS NULL) FROM events"
        " WHERE run_id = ? AND op IN ('write', 'update', 'delete', 'retrieve', 'read')",
        [run_id],
    ).fetchone()
    return {"memory_events": row[0], "memory_events_without_context": row[1] or 0}
