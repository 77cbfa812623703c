"""The scripted model behind the example agents (``examples/agents/``): the fake upstream's
``memory-agent`` model, which decides when to call the memory tools as a tool-using LLM would.

From the last message of the conversation it is sent:

- a user message that asks something (it ends with ``?``): a call of the memory search tool
  with the question as its query;
- any other user message (a statement): a call of the memory add tool with the message, as the
  fact the user stated, tagged for the people its instructions name (``The people in this
  conversation: A, B.``: ``access`` visible to those participants);
- the result of a search: the answer, read off the results: the best-ranked memory's text
  (``I don't know.`` when the search found nothing);
- the result of an add: ``Noted.``.

The tools are found by name among the request's ``tools`` (a name ending in ``memory_search``
or ``memory_add``, so a framework's prefix does not matter); without them it answers in text.
Tool results are read as the frameworks send them: the tool's JSON text, wrapped or not in a
``{"type": "text", "text": ...}`` content block or a list of them.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

MODEL = "memory-agent"
_ids = itertools.count(1)


def _tool(body: dict[str, Any], suffix: str) -> str | None:
    for tool in body.get("tools") or []:
        name = (tool.get("function") or {}).get("name", "")
        if name.endswith(suffix):
            return str(name)
    return None


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(_text(part) for part in content)
    if isinstance(content, dict):
        return _text(content.get("text", ""))
    return content if isinstance(content, str) else ""


def _unwrap(text: str) -> Any:
    """The JSON a tool returned, through the frameworks' content-block wrappers."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    while True:
        if isinstance(value, list) and value and isinstance(value[0], dict) and "text" in value[0]:
            value = "".join(str(v.get("text", "")) for v in value)
        elif isinstance(value, dict) and value.get("type") == "text" and isinstance(value.get("text"), str):
            value = value["text"]
        else:
            return value
        try:
            value = json.loads(value)
        except ValueError:
            return None


def _called(messages: list[dict[str, Any]], call_id: str) -> str:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call.get("id") == call_id:
                return str(call["function"]["name"])
    return ""


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"id": f"call_mem{next(_ids)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _access(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    for message in messages:
        if message.get("role") in ("system", "developer"):
            found = re.search(
                r"The people in this conversation: (.*?)\. ", _text(message.get("content")) + " "
            )
            if found:
                return {"visibility": "participants", "participants": found.group(1).split(", ")}
    return None


def _say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message the scripted model answers ``body`` with."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        called = _called(messages, str(last.get("tool_call_id")))
        if not called.endswith("memory_search"):
            return _say("Noted.")
        found = _unwrap(_text(last.get("content")))
        results = found.get("results") if isinstance(found, dict) else None
        if not results:
            return _say("I don't know.")
        return _say(str(results[0].get("content", "")))
    said = _text(last.get("content")).strip() if last.get("role") == "user" else ""
    if not said:
        return _say("Hello.")
    search, add = _tool(body, "memory_search"), _tool(body, "memory_add")
    if said.endswith("?"):
        return _call(search, {"query": said}) if search else _say("I don't know.")
    if add is None:
        return _say("Noted.")
    access = _access(messages)
    return _call(add, {"content": said, **({"access": access} if access else {})})
