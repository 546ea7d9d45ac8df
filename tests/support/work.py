"""How much work a call does, counted rather than timed: the lines of Python it runs, its own and
every library's. The count is the same on any machine, loaded or idle, so a test can say that an
input twice as long costs at most about twice the work, and fail on quadratic growth without
ever looking at a clock. (Work done inside one C call, a regular expression's scan say, is not
counted: that is what the output's size, measured beside it, and the algorithms' own structure
are for.)"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

#: How much more work, at most, twice the input may cost: twice, and a margin for what does not
#: grow with it (a parser's set-up) and for n log n. Quadratic growth costs four times.
LINEAR = 2.5


def lines_run(call: Callable[[], T]) -> tuple[int, T]:
    """How many lines of Python `call()` runs, in this thread, and what it returns."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        result = call()
    finally:
        sys.settrace(previous)
    return count, result


def growth(small: float, large: float) -> float:
    """How many times `large` is `small`."""
    return large / max(small, 1.0)
