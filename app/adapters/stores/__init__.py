"""Conversation stores: memory, SQLite, Cosmos DB; each passes `tests/contract`."""
