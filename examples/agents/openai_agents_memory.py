"""An agent built with the OpenAI Agents SDK whose long-term memory is memtap.

The agent reaches memtap's memory tools (``memory_add``, ``memory_search``, ...) as an MCP server
over streamable HTTP (``memtap serve --http``), and is served behind a small OpenAI-compatible
endpoint (``chat_endpoint.py``) so ``memtap replay --target openai:http://HOST:PORT/v1`` can
drive it turn by turn. Each chat call is one agent run with its own MCP connection, opened with
the call's ``X-Memtap-*`` headers: memtap records every memory call the agent makes with the
run, episode, session and turn the replay named.

Its model is any OpenAI-compatible chat model, by URL::

    python examples/agents/openai_agents_memory.py --memtap-url http://127.0.0.1:8765/mcp \\
        --model-url https://api.openai.com/v1 --model gpt-4o-mini --port 8800

The model's key is ``--model-key`` or ``OPENAI_API_KEY``. Tracing to OpenAI is off
(``set_tracing_disabled``): nothing leaves the machine but the model's and memtap's calls.
See docs/agents.md.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # before the SDK reads it

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from chat_endpoint import Chat, serve
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "You are an assistant with a long-term memory, reached through the memory tools. "
    "When the user states a fact about themselves or their life, store it with memory_add, "
    "in the user's own words. Before answering a question, search the memory with "
    "memory_search and answer only from what it returned; say you don't know when it "
    "returned nothing relevant."
)


def build_responder(memtap_url: str, model: OpenAIChatCompletionsModel, max_turns: int):  # type: ignore[no-untyped-def]
    async def respond(chat: Chat) -> str:
        memory = MCPServerStreamableHttp(
            {"url": memtap_url, "headers": chat.headers, "timeout": 30},
            name="memtap",
            cache_tools_list=True,
            client_session_timeout_seconds=30,
        )
        async with memory:
            instructions = chat.instructions(INSTRUCTIONS)
            agent = Agent(name="memory-agent", instructions=instructions, model=model, mcp_servers=[memory])
            result = await Runner.run(agent, input=chat.messages, max_turns=max_turns)  # type: ignore[arg-type]
        return str(result.final_output or "")

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
    parser.add_argument("--name", default="openai-agents-memory", help="the model name the endpoint lists")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8800)
    parser.add_argument("--max-turns", type=int, default=6, help="model calls per chat at most")
    args = parser.parse_args()
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=args.model_url, api_key=args.model_key)
    model = OpenAIChatCompletionsModel(model=args.model, openai_client=client)
    serve(args.name, build_responder(args.memtap_url, model, args.max_turns), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
