"""Answer engines: embedded retrieval (default) and echo."""
