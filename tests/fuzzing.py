"""Fuzzing memtap's HTTP API: from its OpenAPI description (schemathesis), and the MCP endpoint
with malformed and edge-case JSON-RPC (hypothesis). Used by tests/test_fuzz.py (a short run)
and benchmarks/fuzz_soak.py (a long one). The property: no 5xx, and the server stays up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
PROTOCOL = "2025-06-18"
TOOLS = ("memory_add", "memory_add_batch", "memory_search", "memory_get", "memory_list", "memory_update",
         "memory_delete", "memory_history")  # fmt: skip


@dataclass
class FuzzReport:
    """Cases sent and the ones answered with a 5xx (method, path, status, what was sent)."""

    cases: int = 0
    server_errors: list[str] = field(default_factory=list)
    by_status: dict[int, int] = field(default_factory=dict)

    def saw(self, status: int, what: str) -> None:
        self.cases += 1
        self.by_status[status] = self.by_status.get(status, 0) + 1
        if status >= 500:
            self.server_errors.append(f"{status}: {what[:300]}")

    def line(self, label: str) -> str:
        return f"{label}: fuzz cases {self.cases}, 5xx {len(self.server_errors)}; statuses {dict(sorted(self.by_status.items()))}"


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def fuzz_openapi(base: str, examples: int, *, model: str | None = None) -> FuzzReport:
    """Every operation of ``base``'s /openapi.json, ``examples`` cases each in schemathesis's
    positive and negative modes. ``model``: swap it into half the JSON bodies, so generated
    chats reach the upstream instead of stopping at an unknown model."""
    import schemathesis
    from schemathesis.generation.modes import GenerationMode

    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    report = FuzzReport()
    for result in schema.get_all_operations():
        operation = result.ok()
        inputs = (operation.body, operation.path_parameters, operation.headers, operation.query)
        modes = [GenerationMode.POSITIVE]
        if any(len(each) for each in inputs):  # an operation that takes no input has no negative cases
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            try:
                _fuzz_operation(operation, mode, base, examples, model, report)
            except Unsatisfiable:  # every generated case was filtered out: nothing to send
                continue
    return report


def _fuzz_operation(
    operation: Any, mode: Any, base: str, examples: int, model: str | None, report: FuzzReport
) -> None:
    @_settings(examples)
    @given(case=operation.as_strategy(generation_mode=mode), swap=st.booleans())
    def run(case: Any, swap: bool) -> None:
        if model is not None and swap and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = model
        try:
            response = case.call(base_url=base, timeout=30)
        except Exception as exc:  # a request the client library refuses to send is not the server's
            if "Connection" in type(exc).__name__ or "Connection" in str(exc):
                report.saw(599, f"{operation.label}: connection failed: {exc}")
            return
        report.saw(response.status_code, f"{operation.label} {mode.value}: {case.body!r}")

    run()


# -- MCP JSON-RPC --------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["", "x" * 5000, "mem_" + "0" * 26, "../../etc/passwd", "\u0000", "é"]),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_context = st.fixed_dictionaries(
    {},
    optional={
        "namespace": st.one_of(st.text(max_size=20), st.just("n" * 3000), st.just("\ud800")),
        "session": _scalars,
        "turn": st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.text(max_size=10)),
        "role": st.sampled_from(["user", "assistant", "narrator", "", None]),
    },
)
_tool_args = st.fixed_dictionaries(
    {},
    optional={
        "content": st.one_of(st.text(max_size=50), _scalars, st.just("a\ud83d")),  # a lone surrogate
        "query": st.one_of(st.text(max_size=30), _scalars),
        "id": _scalars,
        "limit": st.one_of(st.integers(min_value=-(2**64), max_value=2**64), _scalars),
        "offset": st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.just(2**63)),
        "metadata": st.one_of(_json, st.just({"blob": "y" * 100_000})),
        "access": st.one_of(_json, st.just({"visibility": "public", "allow": ["a"] * 2000})),
    },
).flatmap(lambda args: _context.map(lambda ctx: {**args, **ctx}))


def tool_calls(tools: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """``tools/call`` messages naming ``tools`` (or nonsense), with edge-case arguments."""
    return st.builds(
        lambda name, args, rid: {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                 "params": {"name": name, "arguments": args}},
        st.one_of(st.sampled_from(tools), st.text(max_size=20)),
        st.one_of(_tool_args, _json),
        st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=10)),
    )  # fmt: skip


_calls = tool_calls(TOOLS)
_methods = st.sampled_from(
    ["tools/list", "tools/call", "ping", "logging/setLevel", "resources/list", "prompts/get", "initialize",
     "completion/complete", "notifications/cancelled", "no/such/method", ""]
)  # fmt: skip
_messages = st.one_of(
    st.builds(
        lambda method, params, rid, version: {"jsonrpc": version, "id": rid, "method": method, "params": params},
        _methods, _json, _scalars, st.sampled_from(["2.0", "1.0", 2, None]),
    ),
    st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]), _json, max_size=5),
    _calls,
)  # fmt: skip


def _deep(depth: int, opener: str) -> str:
    """A memory_add whose metadata nests ``depth`` arrays or objects."""
    inner = "[" * depth + "]" * depth if opener == "[" else '{"a":' * depth + "1" + "}" * depth
    return (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_add",'
        f'"arguments":{{"content":"deep","metadata":{{"x":{inner}}}}}}}}}'
    )


_malformed = st.one_of(
    _messages.map(json.dumps),  # json.dumps escapes a lone surrogate as \ud800: valid JSON text
    st.lists(_messages, min_size=0, max_size=4).map(json.dumps),  # batches
    st.builds(_deep, st.integers(min_value=30, max_value=1500), st.sampled_from(["[", "{"])),
    st.sampled_from(["", "{", "null", "[]", "1e999", '{"jsonrpc":"2.0","id":1,"method":"ping"}' * 2,
                     '{"jsonrpc":"2.0","id":99999999999999999999999999,"method":"ping"}']),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)  # fmt: skip


def bodies(tools: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Half tool calls (they reach the memory service or the upstream), half anything else."""
    calls = tool_calls(tools).map(json.dumps)
    return st.booleans().flatmap(lambda call: calls if call else _malformed)


def mcp_session(client: httpx.Client, url: str) -> dict[str, str]:
    """Initialize an MCP session; the headers that name it on later requests."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}  # fmt: skip
    answer = client.post(url, json=init, headers=MCP_HEADERS)
    answer.raise_for_status()
    headers = {**MCP_HEADERS, "mcp-protocol-version": PROTOCOL}
    session = answer.headers.get("mcp-session-id")
    if session:
        headers["mcp-session-id"] = session
    client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def fuzz_mcp(url: str, examples: int, tools: tuple[str, ...] = TOOLS) -> FuzzReport:
    """``examples`` malformed or edge-case JSON-RPC bodies POSTed to ``url`` in one session;
    the tool calls among them name ``tools`` (memtap's memory tools by default)."""
    report = FuzzReport()
    with httpx.Client(timeout=30) as client:
        headers = mcp_session(client, url)

        @_settings(examples)
        @given(body=bodies(tools), with_session=st.integers(0, 9).map(bool))
        def run(body: str, with_session: bool) -> None:
            sent = headers if with_session else MCP_HEADERS
            raw = body.encode("utf-8", "surrogatepass")
            response = client.post(url, content=raw, headers=sent)
            report.saw(response.status_code, f"POST /mcp: {body[:200]!r}")

        run()
    return report
