"""Implementations of the ports: conversation stores, answer engines, sign-in."""
