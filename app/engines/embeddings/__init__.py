"""Embedders: the adapters of the `Embedder` port."""
