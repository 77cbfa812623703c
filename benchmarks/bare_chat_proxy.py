"""The floor for a Python chat proxy: uvicorn and one aiohttp session, forwarding, recording nothing.

``chat_trees.py`` runs this as its ``bare`` path: a raw ASGI app (no framework, no routing,
no authentication, no parsing, no recording) on the same server stack ``memtap serve`` uses
(uvicorn with httptools on uvloop) that posts each request body to the upstream as it came
and sends the answer back, a stream chunk by chunk as it arrives. What memtap's chat proxy
costs beyond this is what its own work (the gate, the request parse, the event) costs.

Usage: ``python benchmarks/bare_chat_proxy.py PORT UPSTREAM_BASE_URL``.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import uvicorn
import uvloop


class BareProxy:
    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
                    self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self.session is not None
        path = scope["path"].removeprefix("/v1")
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.base + path, data=body, headers=headers) as response:
            content_type = response.headers.get("Content-Type", "application/json").encode()
            if not content_type.startswith(b"text/event-stream"):
                data = await response.read()
                await send({"type": "http.response.start", "status": response.status,
                            "headers": [(b"content-type", content_type),
                                        (b"content-length", str(len(data)).encode())]})  # fmt: skip
                await send({"type": "http.response.body", "body": data})
                return
            await send({"type": "http.response.start", "status": response.status,
                        "headers": [(b"content-type", content_type)]})  # fmt: skip
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


def main() -> None:
    port, base = int(sys.argv[1]), sys.argv[2]
    config = uvicorn.Config(
        BareProxy(base), host="127.0.0.1", port=port, log_level="warning", access_log=False
    )
    uvloop.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
