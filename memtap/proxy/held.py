"""``--durable`` on the OpenAI front door: the end of an answer waits for its event's commit.

A chat or embeddings call is recorded when its ``recorded_call`` block ends, which is
after the answer was produced. In durable mode the messages that complete the answer
(the whole response when not streaming; the ``data: [DONE]`` event and the end of the
body when streaming) go to a :class:`HeldReply` instead of the client, and are released
after the commit. If the commit failed, the client gets an error in their place (a
``503`` body, or an SSE error event before the end of the stream), never an answer that
looks acknowledged. Outside durable mode the reply sends at once.
"""

from __future__ import annotations

from starlette.types import Message, Send

from memtap.adapters.llm import error_body
from memtap.proxy.http import send_bytes
from memtap.trace.calls import CallRecord

__all__ = ["DONE", "HeldReply"]

DONE = b"data: [DONE]\n\n"


class HeldReply:
    """An ASGI ``send`` that, when holding, keeps its messages until :meth:`release`."""

    def __init__(self, send: Send, *, hold: bool) -> None:
        self.send = send
        self.hold = hold
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        if self.hold:
            self.messages.append(message)
        else:
            await self.send(message)

    async def release(self, call: CallRecord, *, stream: bool) -> None:
        """After the call's event was handed over: send what was held, or the commit's failure."""
        messages, self.messages = self.messages, []
        if not messages:
            return
        if call.commit_error is None:
            for message in messages:
                await self.send(message)
            return
        body = error_body(call.commit_error, "server_error", code="trace_not_committed")
        if stream:  # the 200 and the answer's chunks are out: end the stream with an error event
            await self.send(
                {"type": "http.response.body", "body": b"data: " + body + b"\n\n", "more_body": True}
            )
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await send_bytes(self.send, 503, body)
