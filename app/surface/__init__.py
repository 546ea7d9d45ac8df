"""The surfaces callers reach: MCP tools and REST routes, both thin over one service."""
