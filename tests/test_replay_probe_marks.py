"""The replay marks each probe on the replay clock before asking it, so memory calls an agent makes
on its own while answering are attributed to the probe (session ``probes``, turn PROBE_ID)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from memtap.probes.generators import generate
from memtap.probes.readers import NoReader
from memtap.probes.replay import PROBE_SESSION, ReplayPlan, replay_suite
from memtap.probes.runs import RunStore
from memtap.probes.suitefile import load_suite, write_suite
from memtap.probes.targets.base import EpisodeScope, ProbeCall, ProbeResult, TurnCall


class RecordingTarget:
    """A target made of plain bookkeeping: it records the order of marks, turns and probes."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    async def start(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        return {"target": self.name}

    async def open_episode(self, scope: EpisodeScope) -> None: ...

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None:
        self.calls.append(("mark", turn.session, turn.turn))

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None:
        self.calls.append(("turn", turn.session, turn.turn))

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult:
        self.calls.append(("ask", PROBE_SESSION, probe.probe_id))
        return ProbeResult([], 0.0)

    async def close_episode(self, scope: EpisodeScope) -> None: ...

    async def aclose(self) -> None: ...


def test_every_probe_is_marked_on_the_replay_clock_just_before_it_is_asked(tmp_path: Path) -> None:
    path = tmp_path / "suite.jsonl"
    write_suite(generate("paradigms", seed=2, episodes=1), path)
    suite = load_suite(path)
    store = RunStore(tmp_path / "trace.db")
    store.create_run("r", suite_path=path, suite_sha256=suite.sha256, episodes=suite.episodes, target="recording",
                     config={}, reader="none")  # fmt: skip
    target = RecordingTarget()
    plan = ReplayPlan("r", list(suite.episodes), {})
    anyio.run(lambda: replay_suite(suite, plan, target, store, NoReader(), show_progress=False))
    store.close()
    asks = [i for i, call in enumerate(target.calls) if call[0] == "ask"]
    assert len(asks) == len(suite.episodes[0].probes)
    for i in asks:
        assert target.calls[i - 1] == ("mark", PROBE_SESSION, target.calls[i][2])
