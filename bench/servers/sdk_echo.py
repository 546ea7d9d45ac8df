"""(B) The bare `mcp` SDK: `MCPServer`, stateless JSON responses, a sync `echo` tool as its docs show."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

# The SDK logs every stateless handshake-era POST at INFO by default ("Terminating session");
# Anvil's servers in the benchmark log warnings only, and so does this one.
server = MCPServer("sdk-echo", log_level="WARNING")


@server.tool()
def ask(question: str) -> str:
    """Echo the question back."""
    return question


app = server.streamable_http_app(stateless_http=True, json_response=True)
# Starlette runs the session manager through the app's own lifespan here (no FastAPI around it).
