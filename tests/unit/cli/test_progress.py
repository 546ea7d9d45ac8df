"""`anvil index`'s progress: one line rewritten in place on a terminal, with the time left; plain
lines, one a finished stage, anywhere else; reading and cutting in bytes."""

from __future__ import annotations

import io

from app.cli.progress import IndexProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def fed(stream: io.StringIO) -> str:
    ticks = iter(range(100))
    progress = IndexProgress(stream, clock=lambda: float(next(ticks)))
    for done in (0, 1_000_000, 2_000_000, 4_000_000):
        progress("reading", done, 4_000_000)
    for done in (1000, 2000):
        progress("indexing", done, 2000)
    progress("embedding", 1, 1)
    return stream.getvalue()


def test_elsewhere_each_finished_stage_is_one_plain_line() -> None:
    assert fed(io.StringIO()).splitlines() == [
        "anvil: read 4.0 MB in 3.0 s",
        "anvil: indexed 2,000 passages in 1.0 s",
        "anvil: embedded 1 passage in 0.0 s",
    ]


def test_on_a_terminal_one_line_says_how_far_and_how_long_is_left() -> None:
    said = fed(Terminal())
    # No time left is said before there is a rate to tell it from: nothing done, or too soon.
    assert "\r\x1b[Kanvil: 1.0 of 4.0 MB read\r" in said
    assert "\r\x1b[Kanvil: 2.0 of 4.0 MB read, about 2 s left" in said
    assert "\r\x1b[Kanvil: 1,000 of 2,000 passages indexed\r" in said
    assert said.endswith("\r\x1b[Kanvil: embedded 1 passage in 0.0 s\n")
