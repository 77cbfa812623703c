"""Item-level agreement of memtap's answer scorers with the labels MemProbe published.

    python scripts/memprobe_agreement.py REPORT.json EPISODES [--scorer memprobe] [--only ID ...]

REPORT is one of MemProbe's reports (``results/suite56/reports/*.json``: system -> episode ->
answers, each with ``probe_type``, ``predicted`` and MemProbe's label ``match``); EPISODES is
MemProbe's ``data/suite56/episodes.jsonl`` (imported with memtap's importer here) or a memtap
suite imported from it. Each published prediction is stored as memtap's LLM reader stores a
reply (parsed, with ``raw_reply``) and scored with ``--scorer`` (default ``memprobe``; ``strict``
for memtap's rules). Prints, per probe type, how many probes get MemProbe's exact label and how
many agree on correct-or-not; the last line is the total.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from memtap.probes.importers import import_file
from memtap.probes.readers import parse_reply
from memtap.probes.schema import Episode
from memtap.probes.suitefile import load_suite
from memtap.scoring.scorers import make_scorer

_LABEL = {"execution_error": "incorrect", "unknown": "skip"}


def _episodes(path: Path) -> dict[str, Episode]:
    first = path.open().readline()
    suite = (
        load_suite(path).episodes if '"memtap-suite/1"' in first else import_file("memprobe", path).episodes
    )
    return {e.episode_id: e for e in suite}


def _answers(entry: Any) -> list[dict[str, Any]]:
    if isinstance(entry, dict):
        return list(entry.get("answers") or [])
    return list(entry) if isinstance(entry, list) else []


def agreement(
    report: dict[str, Any], episodes: dict[str, Episode], scorer_name: str, only: set[str]
) -> list[str]:
    scorer = make_scorer(scorer_name)
    exact: Counter[str] = Counter()
    binary: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for system, by_episode in report.items():
        if not isinstance(by_episode, dict) or system in ("meta", "stored_memories"):
            continue
        for episode_id, entry in by_episode.items():
            episode = episodes.get(episode_id)
            if episode is None or (only and episode_id not in only):
                continue
            for probe, answer in zip(episode.probes, _answers(entry), strict=False):
                if probe.type != answer.get("probe_type") or "match" not in answer:
                    continue
                predicted = str(answer.get("predicted") or "")
                stored = {**parse_reply(predicted), "raw_reply": predicted}
                label = scorer.score(episode, probe, stored).outcome
                published = _LABEL.get(answer["match"], answer["match"])
                total[probe.type] += 1
                exact[probe.type] += label == published
                binary[probe.type] += (label == "correct") == (published == "correct")
    lines = [
        f"{kind:18} n={total[kind]:4}  exact {exact[kind] / total[kind]:.3f}  correct-or-not "
        f"{binary[kind] / total[kind]:.3f}"
        for kind in sorted(total)
    ]
    n = sum(total.values())
    if n:
        same, either = sum(exact.values()) / n, sum(binary.values()) / n
        lines.append(f"{'all':18} n={n:4}  exact {same:.3f}  correct-or-not {either:.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path)
    parser.add_argument("episodes", type=Path)
    parser.add_argument("--scorer", default="memprobe")
    parser.add_argument("--only", nargs="*", default=[], help="episode ids to keep")
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    for line in agreement(report, _episodes(args.episodes), args.scorer, set(args.only)):
        print(line)


if __name__ == "__main__":
    main()
