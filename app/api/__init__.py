"""The HTTP surfaces: operations defined once, served as MCP tools and REST routes."""
