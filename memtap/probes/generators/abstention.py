"""Fabricated-premise questions, each paired with a grounded foil built from a real turn.

Each episode states three facts of different types across three sessions (with a filler
between them). For each stated fact there is a pair of probes sharing ``metadata.pair``:

- the grounded foil asks for the fact as the user stated it (``qa``, answer the value, the
  stating turn as evidence, the fact's gold memory as support);
- the fabricated question presupposes something the history never says (``abstention``,
  expecting ``abstain``, no support), in one of three ways (``metadata.premise``):
  ``false_change`` (a switch to a value never mentioned), ``unmentioned_fact`` (a fact type
  never discussed), or ``wrong_person`` (a person who never appears said something about it).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from memtap.probes.generators._facts import FACTS, NAMES, sentence
from memtap.probes.schema import FORMAT

__all__ = ["generate"]

ASSISTANT = "assistant"
PREMISES = ("false_change", "unmentioned_fact", "wrong_person")


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _episode(seed: int, index: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}-abstention-{index}")
    user = f"user-{index:03d}"
    stated = rng.sample(FACTS, 4)
    facts, unused = stated[:3], stated[3]
    clock = datetime(2026, 3, 2, 9, tzinfo=UTC) + timedelta(days=rng.randrange(200))
    sessions: list[dict[str, Any]] = []
    bank: dict[str, Any] = {}
    probes: list[dict[str, Any]] = []
    strangers = [n for n in NAMES if n != "Jamie"]
    for n, fact in enumerate(facts):
        value, other, *_ = rng.sample(fact.values, len(fact.values))
        clock += timedelta(days=rng.randint(1, 3), hours=rng.randint(0, 6))
        sid, key = f"s{len(sessions)}", f"{fact.name}@v0"
        turn = f"{sid}-t0"
        sessions.append(
            {
                "session_id": sid,
                "time": _stamp(clock),
                "participants": [user, ASSISTANT],
                "turns": [
                    {
                        "turn_id": turn,
                        "role": "user",
                        "speaker": user,
                        "content": sentence(fact.state.format(v=value)),
                        "time": _stamp(clock),
                    },
                    {
                        "turn_id": f"{sid}-t1",
                        "role": "assistant",
                        "speaker": ASSISTANT,
                        "content": "Noted.",
                        "time": _stamp(clock + timedelta(minutes=1)),
                    },
                ],
                "gold": {"capture": [key]},
                "metadata": {"fact_type": fact.name},
            }
        )
        bank[key] = {
            "content": sentence(fact.fact.format(v=value)),
            "type": fact.memory_type,
            "source": "user",
            "created_in": sid,
            "metadata": {"value": value},
        }
        clock += timedelta(days=1)
        filler = f"s{len(sessions)}"
        sessions.append(
            {
                "session_id": filler,
                "time": _stamp(clock),
                "participants": [user, ASSISTANT],
                "turns": [
                    {
                        "turn_id": f"{filler}-t0",
                        "role": "user",
                        "speaker": user,
                        "content": "Can you suggest a good book for a long train ride?",
                        "time": _stamp(clock),
                    },
                    {
                        "turn_id": f"{filler}-t1",
                        "role": "assistant",
                        "speaker": ASSISTANT,
                        "content": "A short story collection works well on trains.",
                        "time": _stamp(clock + timedelta(minutes=1)),
                    },
                ],
            }
        )
        premise = PREMISES[(index + n) % len(PREMISES)]
        if premise == "false_change":
            fabricated = f"Why did the user switch {fact.topic} from {value} to {other}?"
        elif premise == "unmentioned_fact":
            fabricated = f"What is {unused.topic}?"
        else:
            fabricated = f"What did {rng.choice(strangers)} Okonkwo say about {fact.topic}?"
        pair = f"pair-{n}"
        probes.append(
            {
                "type": "qa",
                "question": f"What is {fact.topic}?",
                "expected_action": "answer",
                "gold": {"answer": value},
                "support": [key],
                "evidence_turns": [turn],
                "metadata": {"pair": pair, "role": "grounded_foil"},
            }
        )
        probes.append(
            {
                "type": "abstention",
                "question": fabricated,
                "expected_action": "abstain",
                "gold": {"answer": None},
                "support": [],
                "evidence_turns": [],
                "metadata": {"pair": pair, "role": "fabricated", "premise": premise},
            }
        )
    ask_at = _stamp(clock + timedelta(days=2))
    rng.shuffle(probes)
    for i, probe in enumerate(probes):
        probe.update({"probe_id": f"p{i}", "requester": user, "time": ask_at})
    return {
        "format": FORMAT,
        "episode_id": f"abs-{index:03d}",
        "suite": "abstention",
        "paradigm": "abstention",
        "namespace": user,
        "participants": [{"id": user, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}],
        "sessions": sessions,
        "gold_memory": bank,
        "probes": probes,
        "metadata": {"source": "generated", "generator": "abstention", "seed": seed},
    }


def generate(seed: int, episodes: int) -> list[dict[str, Any]]:
    return [_episode(seed, index) for index in range(episodes)]
