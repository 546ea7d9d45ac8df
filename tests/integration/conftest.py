"""Fixtures shared by the integration tests."""

from __future__ import annotations

from support.azurite import azurite_fixture

__all__ = ["azurite_fixture"]
