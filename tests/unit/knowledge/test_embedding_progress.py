"""A background embedding says in the log how far it is, once per tenth, with the time left."""

from __future__ import annotations

import logging

import pytest

from app.knowledge.served import TenthsTold


def test_each_tenth_is_said_once_with_the_time_left_and_the_end_is_left_to_the_swap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    told = TenthsTold(clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="app.knowledge.served")
    for done in (0, 4, 8, 12, 16, 50, 52, 200):  # batches of a 200-passage embedding
        now[0] = 100.0 + done / 2  # two passages a second
        told(done, 200)
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "index: embedded 50 of 200 passages in the background (20 %), about 75 s left",
    ], "a jump over a tenth says the last one reached; the end is said when the index is swapped"
    now[0] = 150.0  # 100 done in 50 s
    told(100, 200)
    assert caplog.records[-1].getMessage().endswith("(50 %), about 50 s left")
