"""``--paraphrase MODEL``: rewrite surface wording through a chat model, keeping gold verbatim.

``MODEL`` names a model of the ``model_list`` of the config given with ``--config`` (an
OpenAI-compatible ``api_base``). Every non-empty turn is sent to it on its own (temperature 0),
asking for the same message in other words with every name, number, date and value kept as
written; its reply replaces the turn's content. Then each episode is checked again with
:func:`verbatim_problems` (the check the generator tests run on every generated suite): each
answer that the gold says is stated in the dialogue must still appear, word for word, in the
turns given as its evidence. An episode whose paraphrase lost one keeps its original wording
as a whole (a partly paraphrased episode could still read inconsistently); how many did, and
which, is reported. Gold memories, probes and everything else are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from memtap.errors import ConfigError
from memtap.probes.schema import Episode
from memtap.probes.stats import value_pattern

__all__ = ["PROMPT", "Paraphrased", "paraphrase_episodes", "paraphrase_suite", "verbatim_problems"]

PROMPT = (
    "Rewrite the message below in different words, as the same speaker would say it. Keep its meaning, "
    "and keep every name, number, date, time, place and value exactly as written. Reply with the "
    "rewritten message only.\n\nMessage: "
)

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


@dataclass
class Paraphrased:
    episodes: list[Episode]
    model: str
    rewritten: int = 0  # episodes whose turns were all rewritten
    kept: list[str] = field(default_factory=list)  # episodes that kept their wording: a gold value was lost
    problems: list[str] = field(default_factory=list)


def _rewrite(chat: Callable[[str], str], text: str) -> str:
    if not text.strip():
        return text
    reply = chat(PROMPT + text).strip()
    return reply or text


def paraphrase_episodes(
    episodes: list[Episode], chat: Callable[[str], str], *, model: str, workers: int = 8
) -> Paraphrased:
    """Rewrite every turn through ``chat``; episodes that lose a stated gold value keep their wording."""
    out = Paraphrased([], model)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for episode in episodes:
            turns = [t for s in episode.sessions for t in s.turns]
            texts = list(pool.map(lambda t: _rewrite(chat, t.content), turns))
            by_id = dict(zip((t.turn_id for t in turns), texts, strict=True))
            sessions = [
                s.model_copy(
                    update={"turns": [t.model_copy(update={"content": by_id[t.turn_id]}) for t in s.turns]}
                )
                for s in episode.sessions
            ]
            rewritten = episode.model_copy(update={"sessions": sessions})
            problems = verbatim_problems(rewritten)
            if problems:
                out.kept.append(episode.episode_id)
                out.problems.extend(problems)
                out.episodes.append(episode)
            else:
                out.rewritten += 1
                out.episodes.append(rewritten)
    return out


def paraphrase_suite(episodes: list[Episode], *, model: str, config: Path | None) -> Paraphrased:
    """``--paraphrase MODEL --config FILE``: the model of the config's model_list rewrites the turns."""
    if config is None:
        raise ConfigError(f"--paraphrase {model}: pass --config FILE whose model_list names the model")
    from memtap.adapters.model_endpoint import resolve_model

    return paraphrase_episodes(episodes, resolve_model(model, config).chat, model=model)
