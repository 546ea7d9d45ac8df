"""Anvil: a sessionless MCP service with conversation history."""

__version__ = "0.6.0"
