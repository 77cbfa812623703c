"""The four MemProbe paradigms as matched update/preserve pairs, deterministic from a seed.

A pair shares everything but its perturbation: the user, the fact and its values, the
encoding sessions, the fillers before and after, every time, and the six probes' questions.
Only the perturbation (an authoritative change, or noise that must not change the memory)
and the gold differ, so any policy that cannot tell the two perturbations apart scores
0.5 on the pair. Within a perturbation, the new value is always the last value mentioned
(in both members), and post-perturbation fillers are shared, so "answer the latest value"
cannot separate the pair either; ``memtap suite stats`` reports what such shortcuts score.

Conditions (update / preserve): interference — authoritative_update / decoy_no_update;
misinformation — user_explicit / assistant_noise, third_party_noise, stale_tool;
consolidation — high, low / high_weak_challenge, low_weak_challenge (high has four encoding
sessions, low one); reconsolidation — reactivated, direct / reactivated_weak, direct_weak
(reactivated perturbations first recall the old value). Every third pair (so every paradigm
has some) has a split perturbation: the trigger and reason in ``perturbation_p1``, the value in
``perturbation_p2``, with a filler between them.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from memtap.probes.generators._facts import DOMAIN, FACTS, NAMES, FactType, sentence
from memtap.probes.generators._paradigm_gold import assemble

__all__ = ["CONDITIONS", "generate"]

CONDITIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "interference": (("authoritative_update", "decoy_no_update"),),
    "misinformation": (
        ("user_explicit", "assistant_noise"),
        ("user_explicit", "third_party_noise"),
        ("user_explicit", "stale_tool"),
    ),
    "consolidation": (("high", "high_weak_challenge"), ("low", "low_weak_challenge")),
    "reconsolidation": (("reactivated", "reactivated_weak"), ("direct", "direct_weak")),
}
PARADIGMS = tuple(CONDITIONS)
FILLERS = ("weakly_related", "near_miss", "confusable", "decoy_nonupdate")
ASSISTANT, TOOL = "assistant", "tool"


class _Pair:
    """Everything the two members of a pair share."""

    def __init__(self, rng: random.Random, index: int, fact: FactType) -> None:
        self.rng, self.index, self.fact = rng, index, fact
        self.domain = DOMAIN[fact.domain]
        self.paradigm = PARADIGMS[index % len(PARADIGMS)]
        options = CONDITIONS[self.paradigm]
        self.update_condition, self.preserve_condition = options[(index // len(PARADIGMS)) % len(options)]
        self.old, self.new, *self.distractors = rng.sample(fact.values, 4)
        self.user = f"user-{index:03d}"
        self.friend = rng.choice(NAMES)
        self.trigger, self.reason = rng.choice(self.domain.reasons)
        self.split = index % 3 == 2  # every third pair; paradigms take turns, so all get split pairs
        self.clock = datetime(2026, 1, 5, 9, tzinfo=UTC) + timedelta(days=rng.randrange(240))

    def tick(self) -> datetime:
        self.clock += timedelta(days=self.rng.randint(1, 3), hours=self.rng.randint(0, 9))
        return self.clock

    def state(self, value: str) -> str:
        return self.fact.state.format(v=value)

    def other(self, value: str) -> str:
        return self.fact.other.format(v=value, who=self.rng.choice(self.domain.others))


def _session(sid: str, at: datetime, phase: str, kind: str, lines: list[tuple[str, str]]) -> dict[str, Any]:
    turns = [
        {
            "turn_id": f"{sid}-t{k}",
            "role": role,
            "speaker": speaker,
            "content": text,
            "time": (at + timedelta(minutes=k)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for k, (speaker, text) in enumerate(lines)
        for role in [speaker if speaker in (ASSISTANT, TOOL) else "user"]
    ]
    return {
        "session_id": sid,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "phase": phase,
        "participants": sorted({speaker for speaker, _ in lines}),
        "turns": turns,
        "metadata": {"session_type": kind},
    }


def _encoding(p: _Pair, n: int) -> list[tuple[str, str]]:
    openers = ("Quick planning question.", "Small thing to keep in mind.", "Context for later:")
    return [
        (p.user, f"{openers[n % len(openers)]} {sentence(p.state(p.old))}"),
        (ASSISTANT, "Got it, I'll keep that in mind."),
    ]


def _filler(p: _Pair, kind: str) -> list[tuple[str, str]]:
    u, noun = p.user, p.fact.noun
    if kind == "weakly_related":
        topic = p.rng.choice(p.domain.topics)
        return [
            (u, f"Any tips on {topic}?"),
            (ASSISTANT, "Start small, keep a short checklist, and review it weekly."),
        ]
    if kind == "near_miss":
        return [
            (u, f"I need to sort out some paperwork about my {noun} next week."),
            (ASSISTANT, f"I can remind you about the {noun} paperwork on Monday."),
        ]
    if kind == "confusable":
        value = p.new if p.rng.random() < 0.5 else p.distractors[0]
        return [(u, f"Funny coincidence: {p.other(value)}."), (ASSISTANT, "That is a nice coincidence.")]
    if kind == "decoy_nonupdate":
        return [
            (u, f"I looked at {p.new} again, but nothing changes for me: {p.state(p.old)}."),
            (ASSISTANT, "Understood, nothing to change then."),
        ]
    # stale_reference (after the perturbation only)
    return [
        (u, f"I found an old note from last year that still says {p.old}."),
        (ASSISTANT, "Old notes pile up."),
    ]


def _perturbation(p: _Pair, condition: str, part: str) -> list[tuple[str, str]]:
    """The lines of a perturbation; ``part`` is whole, p1 or p2.

    The new value is always the last value mentioned, in update and preserve alike."""
    u, new, noun = p.user, p.new, p.fact.noun
    lines: list[tuple[str, str]] = []
    if condition.startswith("reactivated") and part != "p2":
        lines += [
            (u, f"Remind me, what do you have on file for my {noun}?"),
            (ASSISTANT, f"On file: {sentence(p.fact.fact.format(v=p.old))}"),
        ]
    if part == "p1":  # trigger and reason only: no value at all
        if condition in CONDITIONS_UPDATE:
            lines += [
                (
                    u,
                    f"Heads up: after {p.trigger}, my old {noun} is not current anymore, because "
                    f"{p.reason}. I'll confirm the new one soon.",
                ),
                (ASSISTANT, f"Noted: the old {noun} is outdated; waiting for the new one."),
            ]
        else:
            lines += [
                (u, f"After {p.trigger}, people keep asking me about my {noun}."),
                (ASSISTANT, "People do love to ask."),
            ]
        return lines
    if condition in CONDITIONS_UPDATE:
        lines += [
            (u, f"Update: after {p.trigger}, that changed because {p.reason}. {sentence(p.state(new))}"),
            (ASSISTANT, "Thanks, I've updated my notes."),
        ]
        return lines
    if condition == "decoy_no_update":
        lines += [
            (u, f"I tried {new} once with {p.friend}. Nothing changes for me, but {new} was fun."),
            (ASSISTANT, f"Glad you enjoyed trying {new}."),
        ]
    elif condition == "assistant_noise":
        lines += [
            (u, f"Can you help me plan around my {noun} this week?"),
            (ASSISTANT, f"Sure. Since your {noun} is {new} now, mornings look best for {new}."),
            (u, "That's not right, nothing changed. Let's leave planning for later."),
        ]
    elif condition == "third_party_noise":
        lines += [
            (u, f"My coworker {p.friend} keeps insisting that I switched to {new}. No idea why."),
            (ASSISTANT, f"Understood, {p.friend} mentioned {new}."),
        ]
    elif condition == "stale_tool":
        lines += [
            (TOOL, f"[profile export, last synced 2023-03-02] {noun}: {new}"),
            (u, "That export is from an old backup; ignore it."),
            (ASSISTANT, f"Okay. The old backup listed {new}."),
        ]
    else:  # the weak challenges
        lines += [
            (u, f"My friend {p.friend} thinks {new} would suit me better. Maybe one day; we'll see."),
            (ASSISTANT, f"Noted as an idea for someday: {new}."),
        ]
    return lines


CONDITIONS_UPDATE = frozenset(update for options in CONDITIONS.values() for update, _ in options)


def _episode(p: _Pair, seed: int, behaviour: str, layout: list[tuple[str, str, datetime]]) -> dict[str, Any]:
    condition = p.update_condition if behaviour == "update" else p.preserve_condition
    saved = p.rng.getstate()
    p.rng.seed(f"{seed}-{p.index}-shared")  # both members draw the same filler wording
    sessions: list[dict[str, Any]] = []
    uses_tool = False
    for n, (kind, phase, at) in enumerate(layout):
        sid = f"s{n}"
        if phase == "encoding":
            lines = _encoding(p, n)
        elif phase.startswith("perturbation"):
            part = {"perturbation_p1": "p1", "perturbation_p2": "p2"}.get(phase, "whole")
            lines = _perturbation(p, condition, part)
        else:
            lines = _filler(p, kind)
        uses_tool |= any(speaker == TOOL for speaker, _ in lines)
        sessions.append(_session(sid, at, phase, kind, lines))
    p.rng.setstate(saved)
    return assemble(p, seed, behaviour, condition, sessions, uses_tool)


def _layout(p: _Pair) -> list[tuple[str, str, datetime]]:
    """(session kind, phase, time) of every session the pair shares."""
    encodings = {"high": 4, "low": 1}.get(p.update_condition, 2)
    pre = list(FILLERS) + [p.rng.choice(FILLERS) for _ in range(p.rng.randint(0, 2))]
    p.rng.shuffle(pre)
    post = [p.rng.choice((*FILLERS, "stale_reference")) for _ in range(p.rng.randint(1, 2))]
    layout = [("encoding", "encoding", p.tick()) for _ in range(encodings)]
    layout += [(kind, "filler", p.tick()) for kind in pre]
    if p.split:
        layout += [
            ("perturbation_p1", "perturbation_p1", p.tick()),
            ("confusable", "filler", p.tick()),
            ("perturbation_p2", "perturbation_p2", p.tick()),
        ]
    else:
        layout.append(("perturbation", "perturbation", p.tick()))
    layout += [(kind, "post", p.tick()) for kind in post]
    return layout


def generate(seed: int, episodes: int) -> list[dict[str, Any]]:
    """``episodes`` episodes as update/preserve pairs (an odd count leaves the last preserve out)."""
    rng = random.Random(seed)
    facts = list(FACTS)
    rng.shuffle(facts)
    out: list[dict[str, Any]] = []
    for index in range((episodes + 1) // 2):
        pair = _Pair(random.Random(f"{seed}-{index}"), index, facts[index % len(facts)])
        layout = _layout(pair)
        for behaviour in ("update", "preserve")[: min(2, episodes - len(out))]:
            out.append(_episode(pair, seed, behaviour, layout))
    return out
