"""mem0 (the ``mem0ai`` library, 2.x) as a memory backend, with its real effects recorded.

``memtap.backend: mem0`` in the config file; ``memtap.mem0`` is mem0's own config dictionary
(``Memory.from_config``), ``memtap.mem0_infer`` whether ``add`` asks mem0's LLM for facts
(default true). A namespace is a mem0 ``user_id``.

What mem0 2.x does, read from its source (``mem0/memory/main.py``), and what memtap records:

- ``add(infer=True)`` makes one JSON call to the LLM for facts, then stores each extracted fact
  as its own memory, except a fact whose md5 equals the hash of one of the ten stored memories
  nearest the message (or of an earlier fact of the same reply), which it skips silently.
  memtap records one ``add`` effect per stored fact, and in the result the facts the LLM
  extracted and each skipped one with why (``duplicate_of`` names the stored memory).
  An extraction reply that is not JSON mem0 logs and treats as "no facts"; memtap reads the
  same reply (captured at mem0's LLM object) with mem0's own parser and fails the call with a
  clear error instead, so it is recorded and not mistaken for an empty extraction.
- ``add(infer=False)`` stores the message as one memory.
- ``add`` never updates or deletes: those come only from ``update()`` and ``delete()``, recorded
  with content before and after, each checked against the last row of mem0's ``history()``.

mem0 is synchronous: every call runs on one dedicated thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from memtap.adapters.base import BackendResult, StoredMemory, StoredVersion
from memtap.errors import BackendError, ConfigError, ItemNotFound
from memtap.trace.models import AccessTags, EffectKind, MemoryEffect, Provenance, utc_now

__all__ = ["Mem0Backend", "mem0_config"]

T = TypeVar("T")
_Rows = list[dict[str, Any]]
_MEMTAP_KEY = "memtap"  # mem0 metadata key holding memtap's tags and provenance


def _import_mem0() -> Any:
    """mem0's ``Memory`` class, its telemetry off (it reads ``MEM0_TELEMETRY`` on import)."""
    os.environ["MEM0_TELEMETRY"] = "False"
    try:
        from mem0 import Memory
        from mem0.memory import telemetry
    except ImportError as exc:
        raise ConfigError(
            f"memtap.backend mem0 needs the mem0ai library: pip install 'memtap[mem0]' ({exc})"
        ) from None
    telemetry.MEM0_TELEMETRY = False
    return Memory


def mem0_config(config: dict[str, Any], models: dict[str, dict[str, Any]], data_dir: Path) -> dict[str, Any]:
    """mem0's config with memtap's defaults: its files under ``data_dir`` (a local qdrant and
    the history database), and an LLM naming a ``model_list`` alias pointed at that model."""
    resolved: dict[str, Any] = json.loads(json.dumps(config))  # a deep copy, JSON-shaped
    resolved.setdefault("history_db_path", str(data_dir / "history.db"))
    resolved.setdefault(
        "vector_store", {"provider": "qdrant", "config": {"path": str(data_dir / "qdrant"), "on_disk": True}}
    )
    llm = resolved.get("llm")
    if isinstance(llm, dict) and llm.get("provider", "openai") == "openai":
        options = llm.setdefault("config", {})
        params = models.get(str(options.get("model")))
        if params is not None:  # a model_list alias: the deployment behind it
            options["model"] = str(params["model"]).removeprefix("openai/")
            if params.get("api_base"):
                options.setdefault("openai_base_url", params["api_base"])
            if params.get("api_key"):
                options.setdefault("api_key", params["api_key"])
    return resolved


def _config_error(exc: Exception) -> ConfigError:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        parts = []
        for error in errors():
            where = ".".join(str(part) for part in error.get("loc", ()))
            parts.append(f"memtap.mem0.{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return ConfigError("mem0 rejected its config: " + "; ".join(parts))
    return ConfigError(f"mem0 could not start with memtap.mem0: {type(exc).__name__}: {exc}")


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


class Mem0Backend:
    """mem0's ``Memory`` behind memtap's backend protocol, on a thread of its own."""

    name = "mem0"

    def __init__(self, config: dict[str, Any], *, infer: bool = True) -> None:
        self.infer = infer
        self._replies: list[str] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mem0")
        try:
            self._memory = self._executor.submit(self._open, config).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    def _open(self, config: dict[str, Any]) -> Any:
        memory_class = _import_mem0()
        try:
            memory = memory_class.from_config(config)
        except ConfigError:
            raise
        except Exception as exc:
            raise _config_error(exc) from exc
        generate = memory.llm.generate_response

        def captured(*args: Any, **kwargs: Any) -> Any:
            reply = generate(*args, **kwargs)
            self._replies.append(reply if isinstance(reply, str) else json.dumps(reply))
            return reply

        memory.llm.generate_response = captured  # mem0's LLM reply, as mem0 got it
        return memory

    @property
    def memory(self) -> Any:
        """mem0's ``Memory`` (call it only through :meth:`run`)."""
        return self._memory

    async def run(self, call: Callable[[], T]) -> T:
        """Run ``call`` on mem0's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def close(self) -> None:
        close = getattr(self._memory, "close", None)
        if close is not None:
            await self.run(close)
        self._executor.shutdown(wait=True)

    # -- the protocol --------------------------------------------------------------------------

    async def add(
        self,
        namespace: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        stamp = {**(metadata or {}), _MEMTAP_KEY: _stamp(tags, provenance)}
        return await self.run(lambda: self._add(namespace, content, stamp, tags))

    def _add(
        self, namespace: str, content: str, stamp: dict[str, Any], tags: AccessTags | None
    ) -> BackendResult:
        self._replies.clear()
        result = self._call(
            "add", lambda: self._memory.add(content, user_id=namespace, metadata=stamp, infer=self.infer)
        )
        stored = [r for r in result.get("results", []) if r.get("event") == "ADD"]
        effects = [
            MemoryEffect(
                kind=EffectKind.ADD,
                item_id=r["id"],
                namespace=namespace,
                content_after=r["memory"],
                tags_after=tags,
            )
            for r in stored
        ]
        value: dict[str, Any] = {"results": stored, "infer": self.infer}
        if self.infer:
            facts = self._extracted()
            value["extracted"] = facts
            value["skipped"] = self._skipped(namespace, facts, {r["memory"] for r in stored})
        return BackendResult(value, effects)

    def _extracted(self) -> list[str]:
        """The facts of the LLM's reply, parsed as mem0 parses it; a reply mem0 cannot parse fails."""
        from mem0.memory.utils import extract_json, remove_code_blocks

        if not self._replies:
            return []
        reply = self._replies[-1]
        try:
            text = remove_code_blocks(reply)
            if not text or not text.strip():
                return []
            try:
                facts = json.loads(text, strict=False).get("memory", [])
            except json.JSONDecodeError:
                facts = json.loads(extract_json(text), strict=False).get("memory", [])
        except Exception as exc:
            raise BackendError(
                f"mem0 could not parse the LLM's fact extraction ({type(exc).__name__}: {exc}), so it"
                f" stored nothing; the reply began {reply[:120]!r}"
            ) from None
        return [str(fact["text"]) for fact in facts if isinstance(fact, dict) and fact.get("text")]

    def _skipped(self, namespace: str, facts: list[str], stored: set[str]) -> list[dict[str, Any]]:
        if all(fact in stored for fact in facts):
            return []
        listed = self._memory.get_all(filters={"user_id": namespace}, top_k=10_000).get("results", [])
        by_hash = {item.get("hash"): item["id"] for item in listed}
        skipped, seen = [], set()
        for fact in facts:
            if fact in seen:
                skipped.append({"text": fact, "reason": "repeated in the same extraction"})
            elif fact not in stored:
                twin = by_hash.get(_md5(fact))
                if twin is not None:
                    skipped.append(
                        {"text": fact, "reason": "already stored (same md5 hash)", "duplicate_of": twin}
                    )
                else:
                    skipped.append({"text": fact, "reason": "not stored by mem0 (no embedding for it)"})
            seen.add(fact)
        return skipped

    async def search(self, namespace: str, query: str, *, limit: int = 10) -> BackendResult:
        if limit <= 0 or not query.strip():
            return BackendResult({"results": []})
        found = await self.run(
            lambda: self._call(
                "search", lambda: self._memory.search(query, filters={"user_id": namespace}, top_k=limit)
            )
        )
        results, effects = [], []
        for rank, item in enumerate(found.get("results", [])[:limit], start=1):
            memory = _memory(item, namespace)
            memory.rank, memory.score = rank, round(float(item.get("score") or 0.0), 6)
            results.append(memory.model_dump(mode="json", exclude_none=True))
            effects.append(
                MemoryEffect(
                    kind=EffectKind.RETRIEVE, item_id=memory.id, namespace=namespace,
                    content_after=memory.content, tags_after=memory.tags, rank=rank, score=memory.score,
                )
            )  # fmt: skip
        return BackendResult({"results": results}, effects)

    async def get(self, namespace: str, item_id: str) -> BackendResult:
        item = await self.run(lambda: self._item(namespace, item_id))
        return BackendResult(_memory(item, namespace).model_dump(mode="json", exclude_none=True))

    async def list(self, namespace: str, *, limit: int = 50, offset: int = 0) -> BackendResult:
        listed = await self.run(
            lambda: self._call(
                "get_all", lambda: self._memory.get_all(filters={"user_id": namespace}, top_k=10_000)
            )
        )
        items = sorted(listed.get("results", []), key=lambda item: (item.get("created_at") or "", item["id"]))
        page = [
            _memory(i, namespace).model_dump(mode="json", exclude_none=True)
            for i in items[offset : offset + limit]
        ]
        return BackendResult({"items": page, "total": len(items), "offset": offset})

    async def update(
        self,
        namespace: str,
        item_id: str,
        *,
        content: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        return await self.run(lambda: self._update(namespace, item_id, content, metadata, tags, provenance))

    def _update(
        self, namespace: str, item_id: str, content: str | None, metadata: dict[str, Any] | None,
        tags: AccessTags | None, provenance: Provenance | None,
    ) -> BackendResult:  # fmt: skip
        before = self._item(namespace, item_id)
        old_tags = _tags(before)
        new_tags = old_tags if tags is None else tags
        stamp = {
            **(metadata if metadata is not None else _user_metadata(before)),
            _MEMTAP_KEY: _stamp(new_tags, provenance),
        }
        self._call("update", lambda: self._memory.update(item_id, text=content, metadata=stamp))
        after = self._item(namespace, item_id)
        self._check_history(item_id, "UPDATE", before["memory"], after["memory"])
        effect = MemoryEffect(
            kind=EffectKind.UPDATE, item_id=item_id, namespace=namespace, content_before=before["memory"],
            content_after=after["memory"], tags_before=old_tags, tags_after=new_tags,
        )  # fmt: skip
        return BackendResult(_memory(after, namespace).model_dump(mode="json", exclude_none=True), [effect])

    async def delete(
        self, namespace: str, item_id: str, *, provenance: Provenance | None = None
    ) -> BackendResult:
        return await self.run(lambda: self._delete(namespace, item_id))

    def _delete(self, namespace: str, item_id: str) -> BackendResult:
        before = self._item(namespace, item_id)
        self._call("delete", lambda: self._memory.delete(item_id))
        self._check_history(item_id, "DELETE", before["memory"], None)
        effect = MemoryEffect(
            kind=EffectKind.DELETE, item_id=item_id, namespace=namespace, content_before=before["memory"],
            tags_before=_tags(before),
        )  # fmt: skip
        return BackendResult({"id": item_id, "deleted": True, "deleted_at": utc_now().isoformat()}, [effect])

    async def history(self, namespace: str, item_id: str) -> BackendResult:
        rows = await self.run(lambda: self._history(namespace, item_id))
        versions: _Rows = []
        for number, row in enumerate(rows, start=1):
            if row["event"] == "DELETE":
                continue
            closer = rows[number]["event"].lower() if number < len(rows) else None
            versions.append(
                StoredVersion(
                    version=len(versions) + 1, content=row["new_memory"] or "",
                    valid_from=datetime.fromisoformat(row.get("updated_at") or row["created_at"]),
                    valid_to=datetime.fromisoformat(rows[number]["updated_at"]) if closer else None,
                    closed_by=closer,
                ).model_dump(mode="json", exclude_none=True)
            )  # fmt: skip
        return BackendResult({"id": item_id, "namespace": namespace, "versions": versions})

    def _history(self, namespace: str, item_id: str) -> _Rows:
        rows: _Rows = (
            self._call("history", lambda: self._memory.history(item_id)) if _is_uuid(item_id) else []
        )
        if not rows:
            raise ItemNotFound(item_id, namespace)
        try:
            self._item(namespace, item_id)
        except ItemNotFound:
            if rows[-1]["event"] != "DELETE":
                raise
        return rows

    # -- helpers -------------------------------------------------------------------------------

    def _item(self, namespace: str, item_id: str) -> dict[str, Any]:
        item = self._call("get", lambda: self._memory.get(item_id)) if _is_uuid(item_id) else None
        if not item or item.get("user_id") != namespace:
            raise ItemNotFound(item_id, namespace)
        return dict(item)

    def _check_history(self, item_id: str, event: str, before: str, after: str | None) -> None:
        last = self._memory.history(item_id)[-1]
        if (last["event"], last["old_memory"], last["new_memory"]) != (event, before, after):
            raise BackendError(
                f"mem0's history of {item_id} disagrees with the {event.lower()} memtap saw: its last"
                f" row is {last['event']} {last['old_memory']!r} -> {last['new_memory']!r}"
            )

    @staticmethod
    def _call(what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (BackendError, ConfigError):
            raise
        except Exception as exc:
            raise BackendError(f"mem0 {what} failed: {type(exc).__name__}: {exc}") from None


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _stamp(tags: AccessTags | None, provenance: Provenance | None) -> dict[str, Any]:
    stamp: dict[str, Any] = {}
    if tags is not None:
        stamp["tags"] = tags.model_dump(mode="json", exclude_none=True)
    if provenance is not None:
        stamp["provenance"] = provenance.model_dump(mode="json", exclude_none=True)
    return stamp


def _user_metadata(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (item.get("metadata") or {}).items() if k != _MEMTAP_KEY}


def _tags(item: dict[str, Any]) -> AccessTags | None:
    raw = ((item.get("metadata") or {}).get(_MEMTAP_KEY) or {}).get("tags")
    return AccessTags.model_validate(raw) if raw else None


def _memory(item: dict[str, Any], namespace: str) -> StoredMemory:
    stamp = (item.get("metadata") or {}).get(_MEMTAP_KEY) or {}
    created = item.get("created_at") or utc_now().isoformat()
    return StoredMemory(
        id=item["id"],
        namespace=namespace,
        content=item["memory"],
        metadata=_user_metadata(item),
        tags=_tags(item),
        provenance=Provenance.model_validate(stamp.get("provenance") or {}),
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(item.get("updated_at") or created),
    )
