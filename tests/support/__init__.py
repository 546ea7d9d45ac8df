"""Shared test fixtures that start real processes."""
