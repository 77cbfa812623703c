"""Retrieval level: what the backend returned at probe time, against the probe's gold support.

For every probe, the retrieved items (ranked; the retrieve effects of the probe's own calls, or
the ids the run stored when no call was linked) are aligned to gold keys through the item
version they returned. Per probe with support (``n`` keys): Recall@n, Recall@n+4 and Recall@all
(the share of support keys held by the first k items), precision (the share of retrieved items
holding a support key), Hit@1, and the rank of the first item holding a *current* support key
(one valid at probe time). For every probe: a leak when an item is returned for a requester
whose access its tags deny, or (on a DENY probe) an item holds the protected fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtap.scoring.storage import StorageView
from memtap.scoring.text import tokens, value_match
from memtap.scoring.trace import Counts, EpisodeTrace, ProbeRecord
from memtap.trace.models import AccessTags

__all__ = ["ProbeRetrieval", "holds_fact", "score_retrieval"]


@dataclass
class ProbeRetrieval:
    probe_id: str
    keys: list[frozenset[str]] = field(default_factory=list)  # per hit, in rank order
    support_found: set[str] = field(default_factory=set)
    leaked_items: list[tuple[str, str]] = field(default_factory=list)  # (item, why)


def holds_fact(content: str | None, fact: str | None) -> bool:
    """Whether ``content`` discloses ``fact``: the fact as a phrase (after value normalisation), or
    for a fact of four or more content words, at least 80% of them."""
    if not content or not fact:
        return False
    if value_match(fact, content)[0]:
        return True
    wanted = tokens(fact)
    return len(wanted) >= 4 and len(wanted & tokens(content)) / len(wanted) >= 0.8


def _permitted(tags: AccessTags, requester: str, trace: EpisodeTrace) -> bool:
    """Whether ``tags`` let ``requester`` see an item. The suite's namespace owner owns the episode
    attempt's namespace the replay made for it: a backend that tags items with their namespace only
    (a wrapped server, whose items memtap tags ``owner`` = the namespace) shows them to their owner."""
    if tags.permits(requester):
        return True
    return (
        requester == trace.episode.namespace and tags.owner == trace.namespace and requester not in tags.deny
    )


def _recall(support: list[str], keys: list[frozenset[str]], k: int) -> float:
    held = {key for item in keys[:k] for key in item}
    return sum(1 for key in support if key in held) / len(support)


def score_retrieval(view: StorageView, record: ProbeRecord, counts: Counts) -> ProbeRetrieval:
    probe = record.probe
    out = ProbeRetrieval(probe.probe_id)
    for hit in record.hits:
        version = view.version_of(hit.item_id, hit.content)
        if version is not None and (hit.content is None or version.content == hit.content):
            keys = version.keys
        else:
            keys = view.aligner.align(hit.item_id, 0, hit.content, record.pos)
        out.keys.append(keys)
        why = []
        if hit.tags is not None and not _permitted(hit.tags, record.requester, view.trace):
            why.append(f"tags deny {record.requester}")
        if probe.expected_action == "withhold" and holds_fact(hit.content, probe.gold.fields.protected_fact):
            why.append("holds the protected fact")
        if why:
            out.leaked_items.append((hit.item_id, "; ".join(why)))
            counts["leak.items_by_tags"] += any(w.startswith("tags") for w in why)
            counts["leak.items_by_fact"] += any(w.startswith("holds") for w in why)
    counts["leak.probes"] += 1
    counts["leak.leaked"] += bool(out.leaked_items)
    if probe.expected_action == "withhold":
        counts["leak.deny_probes"] += 1
        counts["leak.deny_leaked"] += any("protected" in w for _, w in out.leaked_items)
    if not record.linked:
        counts["retrieval.unlinked"] += 1
    support = [k for k in probe.support if k in view.trace.episode.gold_memory]
    if not support:
        return out
    out.support_found = {k for item in out.keys for k in item if k in support}
    n, total = len(support), len(out.keys)
    counts["recall.probes"] += 1
    counts["recall_n.sum"] += _recall(support, out.keys, n)
    counts["recall_n4.sum"] += _recall(support, out.keys, n + 4)
    counts["recall_all.sum"] += _recall(support, out.keys, total)
    counts["hit1.sum"] += bool(out.keys) and bool(out.keys[0] & set(support))
    if total:
        counts["precision.probes"] += 1
        counts["precision.sum"] += sum(1 for item in out.keys if item & set(support)) / total
    else:
        counts["retrieval.empty"] += 1
    current = {k for k in support if view.aligner.valid_at(k, record.pos)}
    if current:
        counts["rank.probes"] += 1
        rank = next((i for i, item in enumerate(out.keys, 1) if item & current), None)
        if rank is not None:
            counts["rank.found"] += 1
            counts["rank.sum"] += rank
            counts["rank.rr_sum"] += 1 / rank
    return out
