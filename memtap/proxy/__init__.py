"""Front doors: the MCP server, request context, the access gate, the ASGI app."""
