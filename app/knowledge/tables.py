"""How a knowledge index stores strings: tables decoded one at a time, and lists read whole."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

_SEPARATOR = "\0"  # in no term, path or heading word


class TextTable:
    """Strings stored as one UTF-8 blob and their offsets; one is decoded when asked for."""

    def __init__(self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> None:
        self._blob = blob
        self._offsets = offsets

    @staticmethod
    def arrays(prefix: str, strings: Iterable[str]) -> dict[str, npt.NDArray[Any]]:
        encoded = [s.encode() for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return {f"{prefix}.blob": blob, f"{prefix}.offsets": offsets}

    @classmethod
    def of(cls, get: Callable[[str], npt.NDArray[Any]], prefix: str) -> TextTable:
        return cls(get(f"{prefix}.blob"), get(f"{prefix}.offsets"))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, n: int) -> str:
        return self._blob[self._offsets[n] : self._offsets[n + 1]].tobytes().decode()


def string_list(strings: Sequence[str]) -> npt.NDArray[np.uint8]:
    """Strings that are all read on opening, each ended by the separator (so "" survives)."""
    return np.frombuffer("".join(s + _SEPARATOR for s in strings).encode(), dtype=np.uint8)


def strings(array: npt.NDArray[np.uint8]) -> list[str]:
    return array.tobytes().decode().split(_SEPARATOR)[:-1]
