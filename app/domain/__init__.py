"""The rules of Anvil, free of HTTP, MCP and storage: conversations, the history rule, the caller."""
