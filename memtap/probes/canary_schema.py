"""The checks a canary episode (paradigm ``canary``) needs beyond the suite models.

A canary episode keeps everything the isolation probe needs in fields the format already has
(``metadata`` of the episode, turns and probes), so ``memtap-suite/1`` only gains the paradigm
and the probe type ``canary``. These checks make those metadata fields as strict as typed ones;
``docs/suite-format.md`` documents them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memtap.probes.schema import Episode, Probe

__all__ = ["OPS", "TARGETS", "VIAS", "canary_probe_problems", "canary_tokens", "canary_turn_problems"]

OPS = ("write", "update", "search")
TARGETS = ("own", "owner", "shared")
VIAS = ("search", "list")


def canary_tokens(ep: Episode) -> dict[str, list[str]]:
    """Each user's canaries, from ``metadata.canaries`` (empty when it is malformed)."""
    found = ep.metadata.get("canaries")
    if not isinstance(found, dict):
        return {}
    return {
        str(user): [str(t) for t in tokens]
        for user, tokens in found.items()
        if isinstance(tokens, list) and all(isinstance(t, str) and t for t in tokens)
    }


def _shared(ep: Episode) -> str | None:
    value = ep.metadata.get("shared_namespace")
    return value if isinstance(value, str) and value else None


def canary_turn_problems(ep: Episode) -> list[tuple[str, str]]:
    """Problems of a canary episode's own metadata and its turns, as (field path, message)."""
    problems: list[tuple[str, str]] = []
    people = {p.id for p in ep.participants}
    tokens = canary_tokens(ep)
    raw = ep.metadata.get("canaries")
    if not isinstance(raw, dict) or len(tokens) != len(raw):
        problems.append(("metadata.canaries", "a canary episode maps each user to a list of canary strings"))
    everyone: dict[str, str] = {}
    for user, mine in tokens.items():
        if user not in people:
            problems.append((f"metadata.canaries.{user}", f"{user!r} is not one of the participants"))
        for token in mine:
            if token in everyone and everyone[token] != user:
                problems.append(
                    (f"metadata.canaries.{user}", f"canary {token!r} is also {everyone[token]}'s")
                )
            everyone[token] = user
    shared = _shared(ep)
    writes: dict[str, tuple[str, Any]] = {}  # turn id -> (speaker, namespace label)
    for i, session in enumerate(ep.sessions):
        for j, turn in enumerate(session.turns):
            where = f"sessions[{i}].turns[{j}].metadata"
            meta: dict[str, Any] = turn.metadata
            op = meta.get("op", "write")
            namespace = meta.get("namespace")
            if op not in OPS:
                problems.append((f"{where}.op", f"{op!r} is not one of {', '.join(OPS)}"))
                continue
            if namespace is not None and namespace != shared:
                problems.append(
                    (
                        f"{where}.namespace",
                        f"{namespace!r} is not the episode's shared namespace ({shared!r})",
                    )
                )
            said = meta.get("canary")
            if said is not None and said not in tokens.get(turn.speaker, []):
                problems.append((f"{where}.canary", f"{said!r} is not a canary of {turn.speaker!r}"))
            if op == "write":
                writes[turn.turn_id] = (turn.speaker, namespace)
            elif op == "update":
                target = meta.get("updates")
                if target not in writes:
                    problems.append((f"{where}.updates", f"{target!r} is not an earlier write turn"))
                elif writes[target] != (turn.speaker, namespace):
                    problems.append(
                        (
                            f"{where}.updates",
                            f"{target!r} was written by another user or in another namespace",
                        )
                    )
    return problems


def canary_probe_problems(ep: Episode, probe: Probe) -> list[tuple[str, str]]:
    """Problems of one probe of a canary episode (or a canary probe elsewhere)."""
    if ep.paradigm != "canary":
        return [("type", "canary probes belong to canary episodes")]
    if probe.type != "canary":
        return [("type", "a canary episode has only canary probes")]
    problems: list[tuple[str, str]] = []
    people = {p.id for p in ep.participants}
    if probe.requester not in people:
        problems.append(("requester", "a canary probe is asked by one of the users"))
    meta = probe.metadata
    owner, token = meta.get("canary_owner"), meta.get("canary")
    if owner not in people:
        problems.append(("metadata.canary_owner", f"{owner!r} is not one of the participants"))
    elif token not in canary_tokens(ep).get(str(owner), []):
        problems.append(("metadata.canary", f"{token!r} is not a canary of {owner!r}"))
    target, via = meta.get("target"), meta.get("via")
    if target not in TARGETS:
        problems.append(("metadata.target", f"{target!r} is not one of {', '.join(TARGETS)}"))
    elif target == "shared" and _shared(ep) is None:
        problems.append(("metadata.target", "the episode has no shared namespace"))
    if via not in VIAS:
        problems.append(("metadata.via", f"{via!r} is not one of {', '.join(VIAS)}"))
    elif via == "search" and not (isinstance(meta.get("query"), str) and meta["query"].strip()):
        problems.append(("metadata.query", "a search probe needs the text it searches for"))
    return problems
