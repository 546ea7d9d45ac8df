"""Readers of each document format, each writing the Markdown the corpus is cut from."""
