"""``memory_add_batch``: several ``memory_add`` calls in one request, recorded one event per item.

A replay (or any client) that has many memories to store and no reason to wait for each one
sends them in one call; the trace must not tell the difference. So each item is served by
:meth:`MemoryService.call_tool` as the ``memory_add`` it stands for: its own argument parse,
context, grants, caps, backend call and event, with the same arguments (the item without its
``meta``, under the batch's own context arguments) and the same context sources (the
connection's headers and ``_meta``, then the item's ``meta`` as the strongest of them, then the
operator's pins, which nothing may contradict). A batch whose items each succeed leaves exactly
the events, effects and lineage the same ``memory_add`` calls sent one by one would leave.

Two levels of refusal:

- **the batch's shape**: ``items`` missing, not a list, empty or over :data:`MAX_BATCH_ITEMS`;
  an item that is not an object; a ``meta`` that is not an object of known context fields; an
  unknown or invalid top-level argument. The whole call is refused before any item is served,
  with one error naming every bad index, and recorded as one ``memory_add_batch`` event (status
  ``error``, the arguments as sent, the connection's context). Nothing is stored.
- **an item**: refused by ``memory_add``'s own rules (an empty content, a cap, a namespace the
  caller has no ``write`` grant on, a field contradicting a pin). That item is recorded as that
  failed ``memory_add`` (its own error event) and the items after it are still served: each item
  is independent, as separate calls are. The answer lists every item's outcome by index; it is a
  tool error when any item failed, naming each failed index and how many were stored.

On a backend that commits concurrent writes in the order they started (``ordered_writes``: the
builtin one) the items are started together, in order, so their writes share transactions (one
commit for up to 64 instead of one each) while ids, events and lineage keep the items' order;
on any other backend (mem0, whose duplicate detection depends on the order of the adds) they are
served one after another.

A batch cancelled while it runs (the client went away) stops: every item in flight is recorded as
a cancelled ``memory_add`` is (it wrote with its event, or did not write at all); items not yet
started (only on a backend served one item at a time) are neither served nor recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from memtap.auth import Caller, best_context
from memtap.errors import InvalidArguments
from memtap.limits import MAX_BATCH_ITEMS
from memtap.proxy.tools import BATCH_TOOL, CONTEXT_FIELDS, ITEM_META_FIELDS, ContextArgs
from memtap.trace.calls import recorded_call
from memtap.trace.models import Op

if TYPE_CHECKING:
    from memtap.proxy.service import MemoryService, ToolOutcome

__all__ = ["add_batch", "batch_problems"]

_SHOWN_FAILURES = 10  # failed items named in the error text; the rest are counted


def batch_problems(arguments: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with the batch's shape (empty when nothing), and its context arguments."""
    problems: list[str] = []
    top = {k: v for k, v in arguments.items() if k != "items"}
    context: dict[str, Any] = {}
    try:
        parsed = ContextArgs.model_validate(top)
        context = {k: v for k in CONTEXT_FIELDS if (v := getattr(parsed, k)) is not None}
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(part) for part in err["loc"]) or "arguments"
            problems.append(f"{where}: {err['msg']}")
    items = arguments.get("items")
    if items is None:
        problems.append("items: required (a list of the memories to add)")
    elif not isinstance(items, list):
        problems.append(f"items: not a list but {type(items).__name__}")
    elif not items:
        problems.append("items: empty; give at least one memory")
    elif len(items) > MAX_BATCH_ITEMS:
        problems.append(
            f"items: {len(items)} items; the limit is {MAX_BATCH_ITEMS} per call (split the batch)"
        )
    else:
        for index, item in enumerate(items):
            problems += _item_shape(index, item)
    return problems, context


def _item_shape(index: int, item: Any) -> list[str]:
    if not isinstance(item, dict):
        return [f"items[{index}]: not an object but {type(item).__name__}"]
    meta = item.get("meta")
    if meta is None:
        return []
    if not isinstance(meta, dict):
        return [f"items[{index}].meta: not an object but {type(meta).__name__}"]
    unknown = sorted(str(k) for k in meta if k not in ITEM_META_FIELDS)
    if unknown:
        known = ", ".join(sorted(ITEM_META_FIELDS))
        return [f"items[{index}].meta: unknown field(s) {', '.join(map(repr, unknown))} (known: {known})"]
    return []


async def add_batch(
    service: MemoryService,
    arguments: Mapping[str, Any] | None,
    *,
    caller: Caller,
    front_door: str,
    client: str | None,
    layers: tuple[Mapping[str, Any], ...],
) -> ToolOutcome:
    """Serve one ``memory_add_batch`` call (see the module's docstring)."""
    from memtap.proxy.service import ToolOutcome

    args_in = dict(arguments or {})
    problems, context = batch_problems(args_in)
    if problems:
        return await _refuse(service, args_in, problems, caller, front_door, client, layers)
    items: list[dict[str, Any]] = args_in["items"]
    outcomes: list[ToolOutcome | None] = [None] * len(items)

    async def serve(index: int) -> None:
        item = items[index]
        item_args = {**context, **{k: v for k, v in item.items() if k != "meta"}}
        meta = {k: v for k, v in (item.get("meta") or {}).items() if v is not None}
        outcomes[index] = await service.call_tool(
            "memory_add",
            item_args,
            caller=caller,
            front_door=front_door,
            client=client,
            layers=(*layers, meta) if meta else layers,
        )

    if getattr(service.backend, "ordered_writes", False):
        # Started together, in order: the backend commits them in that order, in shared transactions
        # (one commit for up to 64 writes instead of one each); ids and events keep the items' order.
        async with anyio.create_task_group() as tg:
            for index in range(len(items)):
                tg.start_soon(serve, index)
    else:  # a backend that may reorder concurrent writes (mem0's duplicate detection is order-dependent)
        for index in range(len(items)):
            await serve(index)
    return ToolOutcome(*_answer([o for o in outcomes if o is not None]))


def _answer(outcomes: list[ToolOutcome]) -> tuple[dict[str, Any], bool]:
    listed: list[dict[str, Any]] = []
    failed: list[tuple[int, str]] = []
    for index, outcome in enumerate(outcomes):
        if outcome.is_error:
            error = outcome.error or "the call failed"
            failed.append((index, error))
            listed.append({"index": index, "error": error, "event_id": outcome.event_id})
        else:
            item_id = outcome.value.get("id") if isinstance(outcome.value, dict) else None
            listed.append({"index": index, "id": item_id, "event_id": outcome.event_id})
    value: dict[str, Any] = {"stored": len(outcomes) - len(failed), "failed": len(failed), "items": listed}
    if not failed:
        return value, False
    named = "; ".join(f"item {index}: {error}" for index, error in failed[:_SHOWN_FAILURES])
    more = f"; and {len(failed) - _SHOWN_FAILURES} more" if len(failed) > _SHOWN_FAILURES else ""
    value["error"] = (
        f"{BATCH_TOOL}: {len(failed)} of {len(outcomes)} items failed and {value['stored']} were stored "
        f"(each item is recorded as its own memory_add event): {named}{more}"
    )
    return value, True


async def _refuse(
    service: MemoryService,
    arguments: dict[str, Any],
    problems: list[str],
    caller: Caller,
    front_door: str,
    client: str | None,
    layers: tuple[Mapping[str, Any], ...],
) -> ToolOutcome:
    """The whole batch refused for its shape: one recorded event, nothing served."""
    from memtap.proxy.service import ToolOutcome

    async with recorded_call(
        service.recorder,
        tool=BATCH_TOOL,
        op=Op.WRITE,
        front_door=front_door,
        backend=service.backend.name,
        arguments=arguments,
        fallback_context=lambda: best_context(
            caller, layers=layers, arguments=arguments, client=client, clock=service.clock
        ),
    ) as call:
        raise InvalidArguments(f"{BATCH_TOOL}: {'; '.join(problems)}; nothing was stored")
    return ToolOutcome(call.value, is_error=True, event_id=call.id)
