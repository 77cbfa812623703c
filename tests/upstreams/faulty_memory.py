"""A deliberately faulty memory server speaking the reference memory server's tools, for the
findings tests. memtap wraps it with the ``server-memory`` profile and reads its state with
``open_nodes`` before and after each write, so what it really did is recorded as effects.

``FAULT`` (environment) picks the fault; without one it behaves like the reference server:

- ``overwrite``: ``add_observations`` replaces the entity's observations with the new ones;
- ``wrong_delete``: ``delete_observations`` deletes every observation of the entity;
- ``readd``: ``add_observations`` of an observation the entity holds deletes it and adds nothing;
- ``fail_add``: ``add_observations`` fails (a tool error) without adding anything;
- ``lossy_update``: ``add_observations`` to an entity that holds observations merges the new one
  into the entity's latest, as a summarising memory would, and loses detail doing it: the latest
  observation is rewritten to its first sentence (its gist) followed by the new observation, so
  whatever else it said is gone (memtap records the rewrite as an update of that observation);
- ``leak``: every process shares one graph, kept in the file ``LEAK_FILE`` (environment), so a
  server started for one namespace (one user, one episode) returns what another one wrote.

Plain newline-delimited JSON-RPC, no SDK, state in memory.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

FAULT = os.environ.get("FAULT", "")
LEAK_FILE = os.environ.get("LEAK_FILE", "")
_OBJ: dict[str, Any] = {"type": "object"}
TOOLS = [
    {"name": name, "description": f"{name} (faulty memory server)", "inputSchema": _OBJ}
    for name in ("create_entities", "add_observations", "delete_observations", "delete_entities",
                 "search_nodes", "open_nodes", "read_graph")
]  # fmt: skip

entities: dict[str, dict[str, Any]] = {}


def result(data: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(data)}], "structuredContent": data}


def graph(names: set[str] | None = None) -> dict[str, Any]:
    chosen = [e for n, e in entities.items() if names is None or n in names]
    return {"entities": chosen, "relations": []}


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if FAULT != "leak" or not LEAK_FILE:
        return _call(name, args)
    if os.path.exists(LEAK_FILE):  # the graph every server shares: what the others wrote too
        with open(LEAK_FILE, encoding="utf-8") as f:
            entities.clear()
            entities.update(json.load(f))
    answered = _call(name, args)
    with open(LEAK_FILE, "w", encoding="utf-8") as f:
        json.dump(entities, f)
    return answered


def _gist(text: str) -> str:
    """The first sentence of ``text`` (all of it when it has one)."""
    for at, char in enumerate(text):
        if char in ".!?" and (at + 1 == len(text) or text[at + 1] == " "):
            return text[: at + 1]
    return text


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "create_entities":
        made = []
        for entity in args.get("entities", []):
            if entity["name"] not in entities:
                entities[entity["name"]] = {
                    "name": entity["name"],
                    "entityType": entity.get("entityType", "thing"),
                    "observations": list(entity.get("observations", [])),
                }
                made.append(entities[entity["name"]])
            elif FAULT == "leak":  # another server's user of that name: both write to one entity
                held = entities[entity["name"]]["observations"]
                held += [o for o in entity.get("observations", []) if o not in held]
        return result({"entities": made})
    if name == "add_observations":
        if FAULT == "fail_add":
            return {"content": [{"type": "text", "text": "storage unavailable"}], "isError": True}
        added = []
        for spec in args.get("observations", []):
            entity = entities[spec["entityName"]]
            new = list(spec.get("contents", []))
            if FAULT == "overwrite":
                entity["observations"] = new
            elif FAULT == "lossy_update" and entity["observations"]:
                for text in new:
                    held = entity["observations"]
                    merged = f"{_gist(held[-1])} {text}"
                    if merged not in held:
                        held[-1] = merged
            elif FAULT == "readd":
                for text in new:
                    if text in entity["observations"]:
                        entity["observations"].remove(text)
                    else:
                        entity["observations"].append(text)
            else:
                entity["observations"] += [t for t in new if t not in entity["observations"]]
            added.append({"entityName": spec["entityName"], "addedObservations": new})
        return result({"results": added})
    if name == "delete_observations":
        for spec in args.get("deletions", []):
            entity = entities.get(spec["entityName"])
            if entity is None:
                continue
            if FAULT == "wrong_delete":
                entity["observations"] = []
            else:
                gone = set(spec.get("observations", []))
                entity["observations"] = [o for o in entity["observations"] if o not in gone]
        return result({"success": True})
    if name == "delete_entities":
        for entity_name in args.get("entityNames", []):
            entities.pop(entity_name, None)
        return result({"success": True})
    if name == "search_nodes":
        query = str(args.get("query", "")).lower()
        hits = {
            n
            for n, e in entities.items()
            if query in n.lower() or any(query in o.lower() for o in e["observations"])
        }
        return result(graph(hits))
    if name == "open_nodes":
        return result(graph(set(args.get("names", []))))
    if name == "read_graph":
        return result(graph())
    return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method = message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "faulty-memory", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return call(str(params["name"]), dict(params.get("arguments") or {}))
    return None


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        answered = answer(message)
        reply = (
            {"jsonrpc": "2.0", "id": message["id"], "result": answered}
            if answered is not None
            else {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": "Method not found"},
            }
        )
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
