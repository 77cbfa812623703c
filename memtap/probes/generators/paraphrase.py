"""``--paraphrase MODEL``: rewrite surface wording through a chat model, keeping gold verbatim.

The rewriting needs memtap's upstream chat client (the OpenAI-compatible proxy's), which
this build does not have yet, so :func:`paraphrase_suite` refuses with a ConfigError. What
a paraphrase must preserve is already checked by :func:`verbatim_problems`, which the
generator tests run on every generated suite: each answer that the gold says is stated in
the dialogue must still appear, word for word, in the turns given as its evidence.
"""

from __future__ import annotations

from memtap.errors import ConfigError
from memtap.probes.schema import Episode
from memtap.probes.stats import value_pattern

__all__ = ["paraphrase_suite", "verbatim_problems"]

# Probe types whose gold answer is a value stated in the dialogue (not a judgement about it).
STATED = frozenset({"current_value", "previous_value", "qa", "permission"})


def verbatim_problems(episode: Episode) -> list[str]:
    """Every stated gold value that no longer appears verbatim in its evidence turns."""
    turns = {t.turn_id: t.content.lower() for s in episode.sessions for t in s.turns}
    problems = []
    for probe in episode.probes:
        value = (
            probe.gold.answer
            if probe.expected_action in ("answer", "disclose")
            else probe.gold.fields.protected_fact
        )
        if probe.type not in STATED or not value or not probe.evidence_turns:
            continue
        pattern = value_pattern(value)
        if not any(pattern.search(turns.get(turn_id, "")) for turn_id in probe.evidence_turns):
            problems.append(
                f"{episode.episode_id}: {probe.probe_id}: {value!r} is in none of its evidence turns"
            )
    return problems


def paraphrase_suite(episodes: list[Episode], *, model: str) -> list[Episode]:
    raise ConfigError(
        f"--paraphrase {model} needs a configured chat upstream (the OpenAI-compatible chat proxy's "
        "upstream client), which this build does not have yet; generate without --paraphrase"
    )
