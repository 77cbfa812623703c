"""What a suite holds, and what the shortcuts that a good suite must defeat would score on it.

Tokens are counted approximately, as words and punctuation marks (``\\w+|[^\\w\\s]``): no
tokenizer is a dependency, and the count is for sizing a replay, not for billing.

Shortcut baselines, for the four MemProbe paradigms, scored on ``current_value`` and
``change_detection`` probes (the two whose gold says which value holds):

- **always-update** answers the perturbation's new value and "changed";
- **always-preserve** answers the original value and "unchanged";
- **latest-value** answers whichever of the two values was mentioned last in the dialogue
  before the probe, and "changed" when that is the new one.

A suite where any of these is far above 0.5 can be solved without memory of *why* a value
changed. The two values of an episode come from its probes: the current value, and the
previous value (update episodes) or the conflicting value (preserve episodes).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from memtap.probes.schema import MEMPROBE_PARADIGMS, Episode

__all__ = [
    "count_tokens",
    "episode_values",
    "latest_mention",
    "render_stats",
    "shortcut_baselines",
    "suite_stats",
    "value_pattern",
]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def value_pattern(value: str) -> re.Pattern[str]:
    """A value as a whole phrase: "weekly" does not match inside "bi-weekly"."""
    return re.compile(r"(?<![\w-])" + re.escape(value.lower()) + r"(?![\w-])")


def turns_mentioning(sessions: list[dict[str, Any]], phases: tuple[str, ...], value: str | None) -> list[str]:
    """Ids of the turns, in sessions of these phases, whose content holds ``value`` as a phrase."""
    if not value:
        return []
    pattern = value_pattern(value)
    return [
        t["turn_id"]
        for s in sessions
        if s["phase"] in phases
        for t in s["turns"]
        if pattern.search(t["content"].lower())
    ]


def episode_values(episode: Episode) -> tuple[str, str] | None:
    """(original, new) value of a paradigm episode, from its probes' gold; None when not given."""
    by_type = {probe.type: probe for probe in episode.probes}
    current = by_type.get("current_value")
    if current is None or not current.gold.answer:
        return None
    temporal = by_type.get("temporal")
    tgold = temporal.gold.fields.temporal if temporal else None
    if episode.expected_behavior == "update":
        previous = by_type.get("previous_value")
        old = previous.gold.answer if previous else None
        old = old or (tgold.old_value if tgold else None)
        return (old, current.gold.answer) if old else None
    conflict = by_type.get("conflict_value")
    cgold = conflict.gold.fields.conflict if conflict else None
    new = cgold.value if cgold else None
    return (current.gold.answer, new) if new else None


def latest_mention(episode: Episode, values: tuple[str, str], before: Any) -> str | None:
    patterns = [(value, value_pattern(value)) for value in values]
    latest: str | None = None
    for session in episode.sessions:
        if session.time > before:
            break
        for turn in session.turns:
            text = turn.content.lower()
            spots = [(m.start(), value) for value, pattern in patterns for m in pattern.finditer(text)]
            if spots:
                latest = max(spots)[1]
    return latest


def shortcut_baselines(episodes: Iterable[Episode]) -> dict[str, Any]:
    correct: Counter[str] = Counter()
    probes = scored = skipped = 0
    for episode in episodes:
        if episode.paradigm not in MEMPROBE_PARADIGMS or episode.expected_behavior is None:
            continue
        values = episode_values(episode)
        if values is None:
            skipped += 1
            continue
        scored += 1
        old, new = values
        updated = episode.expected_behavior == "update"
        for probe in episode.probes:
            if probe.type not in ("current_value", "change_detection"):
                continue
            probes += 1
            truth_changed = probe.gold.fields.changed if probe.gold.fields.changed is not None else updated
            latest = latest_mention(episode, values, probe.time)
            guesses = {
                "always_update": (new, True),
                "always_preserve": (old, False),
                "latest_value": (latest, latest == new),
            }
            for name, (value, changed) in guesses.items():
                if probe.type == "current_value":
                    hit = value is not None and value.lower() == (probe.gold.answer or "").lower()
                else:
                    hit = changed == truth_changed
                correct[name] += hit
    rates = {name: round(correct[name] / probes, 3) if probes else None for name in _BASELINES}
    return {"episodes": scored, "episodes_skipped": skipped, "probes": probes, **rates, "chance": 0.5}


_BASELINES = ("always_update", "always_preserve", "latest_value")


def suite_stats(episodes: list[Episode]) -> dict[str, Any]:
    sessions = [s for e in episodes for s in e.sessions]
    turns = [t for s in sessions for t in s.turns]
    probes = [p for e in episodes for p in e.probes]
    behaviours = Counter(e.expected_behavior or "none" for e in episodes)
    return {
        "episodes": len(episodes),
        "sessions": len(sessions),
        "turns": len(turns),
        "tokens": sum(count_tokens(t.content) for t in turns),
        "probes": len(probes),
        "suites": dict(Counter(e.suite or "-" for e in episodes)),
        "paradigms": dict(Counter(e.paradigm for e in episodes)),
        "conditions": dict(Counter(e.condition for e in episodes if e.condition)),
        "behaviour": {"update": behaviours["update"], "preserve": behaviours["preserve"]},
        "split_episodes": sum(e.split_perturbation for e in episodes),
        "phases": dict(Counter(s.phase or "-" for s in sessions)),
        "probes_by_type": dict(Counter(p.type for p in probes)),
        "expected_actions": dict(Counter(p.expected_action for p in probes)),
        "gold_memories": sum(len(e.gold_memory) for e in episodes),
        "shortcut_baselines": shortcut_baselines(episodes),
    }


def render_stats(stats: dict[str, Any]) -> str:
    lines = []
    for key in ("episodes", "sessions", "turns", "tokens", "probes", "gold_memories", "split_episodes"):
        lines.append(f"{key.replace('_', ' '):<18}{stats[key]}")
    lines.append(f"{'update/preserve':<18}{stats['behaviour']['update']}/{stats['behaviour']['preserve']}")
    for key in ("suites", "paradigms", "conditions", "phases", "probes_by_type", "expected_actions"):
        if stats[key]:
            shown = ", ".join(f"{name} {count}" for name, count in sorted(stats[key].items()))
            lines.append(f"{key.replace('_', ' '):<18}{shown}")
    base = stats["shortcut_baselines"]
    if base["probes"]:
        lines.append(
            f"{'shortcuts':<18}always-update {base['always_update']:.3f}, always-preserve "
            f"{base['always_preserve']:.3f}, latest-value {base['latest_value']:.3f} (chance 0.5; "
            f"{base['probes']} current_value/change_detection probes in {base['episodes']} episodes)"
        )
    return "\n".join(lines)
