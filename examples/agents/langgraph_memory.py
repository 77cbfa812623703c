"""An agent built with LangGraph whose long-term memory is memtap.

A two-node graph (the model, then the tools it asked for, until it answers) over
``MessagesState``; the model is LangChain's ``ChatOpenAI`` pointed at any OpenAI-compatible API,
and memtap's memory tools come from ``langchain-mcp-adapters`` over streamable HTTP
(``memtap serve --http``). It is served behind a small OpenAI-compatible endpoint
(``chat_endpoint.py``) so ``memtap replay --target openai:http://HOST:PORT/v1`` can drive it turn
by turn. Each chat call is one graph run with its own MCP session, opened with the call's
``X-Memtap-*`` headers: memtap records every memory call the agent makes with the run, episode,
session and turn the replay named.

``langchain-mcp-adapters`` needs the MCP SDK 1.x and memtap the 2.x, so this agent runs in an
environment of its own (``examples/agents/requirements-langgraph.txt``)::

    python -m venv .venv-langgraph
    .venv-langgraph/bin/pip install -r examples/agents/requirements-langgraph.txt
    .venv-langgraph/bin/python examples/agents/langgraph_memory.py --memtap-url http://127.0.0.1:8765/mcp \\
        --model-url https://api.openai.com/v1 --model gpt-4o-mini --port 8801

The model's key is ``--model-key`` or ``OPENAI_API_KEY``. LangSmith tracing is off
(``LANGSMITH_TRACING=false``): nothing leaves the machine but the model's and memtap's calls.
See docs/agents.md.
"""

from __future__ import annotations

import argparse
import os

for _name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
    os.environ[_name] = "false"  # before LangChain reads them: no run is sent to LangSmith

from chat_endpoint import Chat, serve
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

INSTRUCTIONS = (
    "You are an assistant with a long-term memory, reached through the memory tools. "
    "When the user states a fact about themselves or their life, store it with memory_add, "
    "in the user's own words. Before answering a question, search the memory with "
    "memory_search and answer only from what it returned; say you don't know when it "
    "returned nothing relevant."
)
_MESSAGE = {"system": SystemMessage, "developer": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def build_graph(model: ChatOpenAI, tools: list, instructions: str):  # type: ignore[no-untyped-def,type-arg]
    """model -> (tools -> model)* -> end, the agent loop as a LangGraph graph."""
    bound = model.bind_tools(tools)

    async def call_model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await bound.ainvoke([SystemMessage(instructions), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile()


def build_responder(memtap_url: str, model: ChatOpenAI, max_turns: int):  # type: ignore[no-untyped-def]
    async def respond(chat: Chat) -> str:
        client = MultiServerMCPClient(
            {"memtap": {"transport": "streamable_http", "url": memtap_url, "headers": chat.headers}}
        )
        async with client.session("memtap") as session:
            graph = build_graph(model, await load_mcp_tools(session), chat.instructions(INSTRUCTIONS))
            messages = [_MESSAGE[m["role"]](m["content"]) for m in chat.messages]
            state = await graph.ainvoke({"messages": messages}, {"recursion_limit": 2 * max_turns + 1})
        content = state["messages"][-1].content
        return content if isinstance(content, str) else str(content)

    return respond


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--memtap-url", required=True, help="memtap's MCP endpoint, e.g. http://127.0.0.1:8765/mcp"
    )
    parser.add_argument(
        "--model-url", required=True, help="an OpenAI-compatible API base for the agent's model"
    )
    parser.add_argument("--model", required=True, help="the model's name at --model-url")
    parser.add_argument("--model-key", default=os.environ.get("OPENAI_API_KEY", "unused"))
    parser.add_argument("--name", default="langgraph-memory", help="the model name the endpoint lists")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8801)
    parser.add_argument("--max-turns", type=int, default=6, help="model calls per chat at most")
    args = parser.parse_args()
    model = ChatOpenAI(model=args.model, base_url=args.model_url, api_key=args.model_key, temperature=0)
    serve(args.name, build_responder(args.memtap_url, model, args.max_turns), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
