"""What the trace's privacy step costs per event, against the store's own cost of encoding it.

``TracePrivacy.apply`` runs on every event in ``recorded_call``. Timed on three event shapes
(a ``memory_add`` with one effect, a ``memory_search`` with 10 hits and 10 retrieve effects,
a chat with a 6-message conversation) under four settings, in one run so the ratios hold on
a noisy machine:

* off      -- no policy, no secret configured (the default): one attribute check;
* secrets  -- 1,000 API keys configured (the redaction check: one JSON encoding of the
  event's parts and a substring search per secret);
* hashed   -- the namespace's policy is ``hashed`` (every body hashed);
* both     -- hashed and 1,000 secrets.

The baseline is ``json_text`` of the event's arguments and result, which the store does for
every event anyway. Run: ``python benchmarks/privacy_overhead.py``.
"""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime

from memtap.jsontext import json_text
from memtap.trace.models import Context, EffectKind, MemoryEffect, Op, TraceEvent
from memtap.trace.privacy import ContentPolicy, TracePrivacy

N = 2000
NOW = datetime.now(UTC)
TEXT = "The user goes to FitLife on Tuesdays and prefers the early class before work."


def _event(tool: str) -> TraceEvent:
    ctx = Context(principal="alice", namespace="alice", session="s1", turn="t3")
    if tool == "memory_add":
        args, result = {"content": TEXT, "metadata": {"source": "chat"}}, {"id": "mem_1", "version": 1}
        effects = [MemoryEffect(kind=EffectKind.ADD, item_id="mem_1", content_after=TEXT)]
    elif tool == "memory_search":
        args = {"query": "where does the user train", "limit": 10}
        hits = [
            {"id": f"mem_{i}", "content": TEXT, "metadata": {}, "score": 1.0 / (i + 1)} for i in range(10)
        ]
        result = {"results": hits}
        effects = [
            MemoryEffect(kind=EffectKind.RETRIEVE, item_id=f"mem_{i}", content_after=TEXT, rank=i)
            for i in range(10)
        ]
    else:
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": TEXT} for i in range(6)]
        args = {"model": "gpt", "messages": messages}
        result = {"choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}}], "usage": {}}
        effects = []
    op = Op.WRITE if tool == "memory_add" else Op.RETRIEVE if tool == "memory_search" else Op.CHAT
    return TraceEvent(
        id="e", started_at=NOW, ended_at=NOW, front_door="mcp-http", backend="builtin",
        tool=tool, op=op, context=ctx, arguments=args, result=result, effects=effects,
    )  # fmt: skip


def _per_event_us(fn: object, events: list[TraceEvent]) -> float:
    start = time.perf_counter()
    for event in events:
        fn(event)  # type: ignore[operator]
    return (time.perf_counter() - start) / len(events) * 1e6


def main() -> None:
    secrets = [f"sk-key-{i:06d}-0123456789abcdef" for i in range(1000)]
    settings = {
        "off": TracePrivacy(),
        "secrets": TracePrivacy(secrets=secrets),
        "hashed": TracePrivacy(ContentPolicy([("alice", "hashed")])),
        "both": TracePrivacy(ContentPolicy([("alice", "hashed")]), secrets=secrets),
    }
    print(f"{'event':<15}{'baseline us':>12}" + "".join(f"{name + ' us':>12}{'x':>7}" for name in settings))
    for tool in ("memory_add", "memory_search", "chat.completions"):
        template = _event(tool)
        base = _per_event_us(lambda e: (json_text(e.arguments), json_text(e.result)), [template] * N)
        row = f"{tool:<15}{base:>12.1f}"
        for privacy in settings.values():
            events = [copy.deepcopy(template) for _ in range(N)]
            cost = _per_event_us(privacy.apply, events)
            row += f"{cost:>12.1f}{cost / base:>7.2f}"
        print(row)


if __name__ == "__main__":
    main()
