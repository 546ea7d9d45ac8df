"""Conversations: the history rule, turns, bounds, and the stores that keep them."""
