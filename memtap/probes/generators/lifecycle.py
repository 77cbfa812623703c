"""Multi-session user-assistant histories with DyadMem's six memory types and lifecycle gold.

Each episode follows six threads, one per memory type (episodic, user_profile, fact,
agent_identity, agent_method, agent_knowledge), over six sessions. A thread's first mention
is captured (``gold.capture``) in its session; two threads are later superseded (the new
version ``replaces`` the old one: ``gold.update`` deletes the old key and adds the new) and
one is invalidated (the user asks to forget it: deleted, nothing added). Each thread ends in a
probe asked after the last session: a ``qa`` probe whose support is the version valid then,
or, for the invalidated thread, an ``abstention`` probe (the memory must no longer be used).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from memtap.probes.generators._facts import FACTS, sentence
from memtap.probes.schema import FORMAT

__all__ = ["generate"]

ASSISTANT = "assistant"
# memory type -> (name, what the user says with {v}, the memory with {v}, the question, values)
THREADS: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "agent_identity": (
        "answer_style",
        "From now on, please {v} when you answer me.",
        "The assistant should {v} when answering the user.",
        "How should the assistant answer the user?",
        ("lead with the verdict", "end with a one-line summary", "use short bullet points"),
    ),
    "agent_method": (
        "menu_check",
        "When I send you a menu, {v}.",
        "When the user sends a menu, the assistant should {v}.",
        "What should the assistant do when the user sends a menu?",
        ("check it for shellfish first", "list the vegetarian dishes first", "flag anything deep-fried"),
    ),
    "fact": (
        "office",
        "Our office address is {v}.",
        "The office is at {v}.",
        "Where is the office?",
        ("12 Harbour Street", "4 Mill Lane", "88 King Road", "7 Elm Court"),
    ),
    "episodic": (
        "trip",
        "I'd like help planning a trip to {v}.",
        "The user asked for help planning a trip to {v}.",
        "Which trip did the user ask for help planning?",
        ("Porto", "Kyoto", "Oslo", "Quito"),
    ),
}


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _threads(rng: random.Random) -> list[dict[str, Any]]:
    threads = []
    for kind, (name, say, memory, question, values) in THREADS.items():
        threads.append(
            {
                "type": kind,
                "name": name,
                "say": say,
                "memory": memory,
                "question": question,
                "values": rng.sample(values, 2),
            }
        )
    for kind, domain in (("user_profile", "personal"), ("agent_knowledge", "agentic")):
        fact = rng.choice([f for f in FACTS if f.domain == domain])
        threads.append(
            {
                "type": kind,
                "name": fact.name,
                "say": sentence(fact.state),
                "memory": sentence(fact.fact),
                "question": f"What is {fact.topic}?",
                "values": rng.sample(fact.values, 2),
            }
        )
    rng.shuffle(threads)
    return threads


def _episode(seed: int, index: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}-lifecycle-{index}")
    user = f"user-{index:03d}"
    threads = _threads(rng)
    changeable = [t for t in threads if t["type"] != "episodic"]
    superseded = rng.sample(changeable, 2)
    invalidated = rng.choice([t for t in changeable if t not in superseded])
    # session -> list of (thread, event): intro in sessions 0-3, changes in sessions 3-5
    plan: dict[int, list[tuple[dict[str, Any], str]]] = {n: [] for n in range(6)}
    for n, thread in enumerate(threads):
        thread["intro"] = n % 4
        plan[n % 4].append((thread, "intro"))
    for thread in [*superseded, invalidated]:
        at = rng.randint(max(thread["intro"] + 1, 3), 5)
        plan[at].append((thread, "forget" if thread is invalidated else "change"))
    clock = datetime(2026, 1, 12, 9, tzinfo=UTC) + timedelta(days=rng.randrange(200))
    sessions: list[dict[str, Any]] = []
    bank: dict[str, Any] = {}
    for n in range(6):
        clock += timedelta(days=rng.randint(2, 6), hours=rng.randint(0, 8))
        sid = f"s{n}"
        lines: list[tuple[str, str]] = []
        capture: list[str] = []
        deleted: list[str] = []
        added: list[str] = []
        for thread, event in plan[n] or [({}, "chat")]:
            if event == "chat":
                lines += [
                    (user, "Nothing new today, just saying hi."),
                    (ASSISTANT, "Hi! Happy to help anytime."),
                ]
                continue
            old, new = thread["values"]
            v0, v1 = f"{thread['name']}@v0", f"{thread['name']}@v1"
            if event == "intro":
                lines += [(user, thread["say"].format(v=old)), (ASSISTANT, "Noted.")]
                bank[v0] = {
                    "content": thread["memory"].format(v=old),
                    "type": thread["type"],
                    "source": "user",
                    "created_in": sid,
                    "metadata": {"value": old},
                }
                capture.append(v0)
            elif event == "change":
                lines += [(user, f"That has changed. {thread['say'].format(v=new)}"), (ASSISTANT, "Updated.")]
                bank[v0]["invalidated_in"] = sid
                bank[v1] = {
                    "content": thread["memory"].format(v=new),
                    "type": thread["type"],
                    "source": "user",
                    "created_in": sid,
                    "replaces": [v0],
                    "metadata": {"value": new},
                }
                deleted.append(v0)
                added.append(v1)
            else:
                lines += [
                    (user, f"Please forget what I told you about {old}; it no longer applies."),
                    (ASSISTANT, "Done, I won't use that anymore."),
                ]
                bank[v0]["invalidated_in"] = sid
                deleted.append(v0)
        sessions.append(
            {
                "session_id": sid,
                "time": _stamp(clock),
                "participants": [user, ASSISTANT],
                "turns": [
                    {
                        "turn_id": f"{sid}-t{k}",
                        "role": "assistant" if who == ASSISTANT else "user",
                        "speaker": who,
                        "content": text,
                        "time": _stamp(clock + timedelta(minutes=k)),
                    }
                    for k, (who, text) in enumerate(lines)
                ],
                "gold": {"capture": capture, "update": {"delete": deleted, "add": added}},
            }
        )
    ask_at = _stamp(clock + timedelta(days=2))
    probes = []
    for i, thread in enumerate(threads):
        v0, v1 = f"{thread['name']}@v0", f"{thread['name']}@v1"
        probe: dict[str, Any] = {
            "probe_id": f"p{i}",
            "requester": user,
            "question": thread["question"],
            "time": ask_at,
            "metadata": {"memory_type": thread["type"]},
        }
        if thread is invalidated:
            probe |= {
                "type": "abstention",
                "expected_action": "abstain",
                "gold": {"answer": None},
                "support": [],
            }
        else:
            key = v1 if v1 in bank else v0
            probe |= {"type": "qa", "gold": {"answer": bank[key]["metadata"]["value"]}, "support": [key]}
        probes.append(probe)
    return {
        "format": FORMAT,
        "episode_id": f"life-{index:03d}",
        "suite": "lifecycle",
        "paradigm": "lifecycle",
        "namespace": user,
        "participants": [{"id": user, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}],
        "sessions": sessions,
        "gold_memory": bank,
        "probes": probes,
        "metadata": {"source": "generated", "generator": "lifecycle", "seed": seed},
    }


def generate(seed: int, episodes: int) -> list[dict[str, Any]]:
    return [_episode(seed, index) for index in range(episodes)]
