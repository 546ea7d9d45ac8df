"""The knowledge index as one file: a versioned container of named arrays, read in place.

Layout: the magic `ANVILIDX`, the length of a JSON header (8 bytes, little-endian), the header,
then each section at an offset that is a multiple of 64. The header names the format, the
index's version, what it was built from and when, and every section's place, length, dtype and
shape. A section is an array of fixed-size numbers (`int32`, `int64`, `float32`, `float64`) or bytes
(`uint8`: UTF-8 text tables).

The version is a SHA-256 over the sections and the header's `content` (not over when it was
built), so an index built twice from the same documents has one version. Opening a file refuses
anything but a regular file (`regular_files`), and checks its magic, its format, the types of its
header, that every section lies inside it and, unless told not to, its version: a truncated or
altered index is refused with `InvalidIndex`, never served (what the server reads of a whole
index is checked by `index_checks`). Sections are mapped,
not read: opening a large index costs its header and its hash, and a query touches only the
pages it needs.

Writing goes to a temporary file beside the target, flushed to disk, then renamed over it, so a
reader sees the old index or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
import numpy.typing as npt

from app.knowledge.regular_files import NotARegularFile, open_regular

MAGIC = b"ANVILIDX"
#: The layout this version of Anvil writes and reads.
FORMAT = 1
_ALIGN = 64
_DTYPES = frozenset({"int32", "int64", "float32", "float64", "uint8"})
_HASH_CHUNK = 1 << 20


class InvalidIndex(ValueError):
    """A file that is not a knowledge index this version can serve (the message says why)."""


@dataclass(frozen=True)
class Section:
    offset: int
    length: int
    dtype: str
    shape: tuple[int, ...]


def write_index(
    target: Path,
    arrays: Mapping[str, npt.NDArray[Any]],
    content: Mapping[str, Any],
    built: Mapping[str, Any],
    *,
    mode: int = 0o644,
) -> str:
    """Write an index of `arrays` to `target` atomically (with file mode `mode`) and return its version.

    `content` is what serving needs besides the arrays (JSON-ready, part of the version);
    `built` says when and from what (JSON-ready, not part of the version).
    """
    digest = hashlib.sha256()
    sections: dict[str, dict[str, Any]] = {}
    payloads: list[tuple[int, npt.NDArray[Any]]] = []
    offset = 0
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        if array.dtype.name not in _DTYPES:
            raise ValueError(f"section {name!r}: dtype {array.dtype} is not one the index stores")
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        offset = _aligned(offset)
        sections[name] = {
            "offset": offset,
            "length": array.nbytes,
            "dtype": array.dtype.name,
            "shape": list(array.shape),
        }
        payloads.append((offset, array))
        offset += array.nbytes
    content_text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    digest.update(content_text.encode())
    for name, (_, array) in zip(sorted(arrays), payloads, strict=True):
        digest.update(name.encode() + b"\0" + array.dtype.name.encode() + b"\0")
        digest.update(array.tobytes())
    version = digest.hexdigest()[:32]
    header = json.dumps(
        {"format": FORMAT, "version": version, "content": content, "built": built, "sections": sections},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    start = _aligned(len(MAGIC) + 8 + len(header))
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(MAGIC + len(header).to_bytes(8, "little") + header)
            out.write(b"\0" * (start - out.tell()))
            for section_offset, array in payloads:
                out.write(b"\0" * (start + section_offset - out.tell()))
                out.write(array.tobytes())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return version


class IndexFile:
    """An opened index: its header and its sections, mapped read-only. `close()` unmaps it
    (arrays taken from it must not be used after that).

    With `copy_to`, what is mapped is a copy of the file in that folder, which no other process
    can reach (it has no name): a mapped file cut short under a reader kills the reader at its
    next look past the new end (SIGBUS), and an index given by path may be overwritten in place
    by anyone who can write it. An index Anvil itself keeps privately is mapped as it is.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        verify: bool = True,
        copy_to: Path | None = None,
        fill: Callable[[BinaryIO], object] | None = None,
    ) -> None:
        """Open the index at `path`; with `fill`, the private copy (in `copy_to`) is what `fill`
        writes into it (a download), and `path` only names the index in messages."""
        self.path = path
        # Kept open (and closed by `close`): the mapping is made from it.
        self._file = tempfile.TemporaryFile(dir=copy_to) if copy_to is not None or fill else None  # noqa: SIM115
        # What the mapping was made from, read again (not reopened by name) to check its version.
        source: IO[bytes] | None = None
        try:
            if fill is not None and self._file is not None:
                fill(self._file)
                self._file.flush()
                self._map_file(self._file)
            else:
                try:
                    source = open_regular(path)
                except NotARegularFile as error:
                    raise InvalidIndex(
                        f"{error}: give the path of an index file `anvil index` wrote"
                    ) from None
                if self._file is not None:
                    shutil.copyfileobj(source, self._file, _HASH_CHUNK)
                    self._file.flush()
                self._map_file(self._file if self._file is not None else source)
        except BaseException:
            if source is not None:
                source.close()
            if self._file is not None:
                self._file.close()
            raise
        try:
            self._read_header(verify, self._file if self._file is not None else source)
        except BaseException:
            self.close()
            raise
        finally:
            if source is not None:
                source.close()

    def _map_file(self, file: IO[bytes]) -> None:
        try:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise InvalidIndex(f"{self.path} is empty, not a knowledge index") from None

    def _read_header(self, verify: bool, mapped: IO[bytes] | None) -> None:
        data = self._map
        if len(data) < len(MAGIC) + 8 or data[: len(MAGIC)] != MAGIC:
            raise InvalidIndex(f"{self.path} is not a knowledge index (build one with `anvil index`)")
        size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
        end = len(MAGIC) + 8 + size
        try:
            header = json.loads(bytes(data[len(MAGIC) + 8 : end]))
            if header["format"] != FORMAT:
                raise InvalidIndex(
                    f"{self.path} is a knowledge index of format {header['format']}; this Anvil serves "
                    f"format {FORMAT}: rebuild it with this version's `anvil index`"
                )
            self.version: str = _typed(header, "version", str)
            self.content: dict[str, Any] = _typed(header, "content", dict)
            self.built: dict[str, Any] = _typed(header, "built", dict)
            sections = {
                str(name): Section(
                    _typed(s, "offset", int), _typed(s, "length", int), _typed(s, "dtype", str), _shape(s)
                )
                for name, s in _typed(header, "sections", dict).items()
            }
        except InvalidIndex:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise InvalidIndex(f"{self.path} has a damaged header ({error})") from None
        start = _aligned(end)
        for name, section in sections.items():
            count = int(np.prod(section.shape)) if section.shape else 1
            if (
                section.dtype not in _DTYPES
                or section.offset < 0
                or count * np.dtype(section.dtype).itemsize != section.length
                or start + section.offset + section.length > len(data)
            ):
                raise InvalidIndex(f"{self.path} is truncated or damaged (section {name!r})")
        self._start = start
        self._sections = sections
        if verify and mapped is not None:
            self._verify(mapped)

    def _verify(self, source: IO[bytes]) -> None:
        # Read through a file handle, not the mapping: hashing through the mapping would make
        # every page of the index resident in this process.
        digest = hashlib.sha256()
        digest.update(json.dumps(self.content, sort_keys=True, separators=(",", ":")).encode())
        for name in sorted(self._sections):
            section = self._sections[name]
            digest.update(name.encode() + b"\0" + section.dtype.encode() + b"\0")
            source.seek(self._start + section.offset)
            left = section.length
            while left:
                chunk = source.read(min(left, _HASH_CHUNK))
                if not chunk:
                    raise InvalidIndex(f"{self.path} is truncated (section {name!r})")
                digest.update(chunk)
                left -= len(chunk)
        if digest.hexdigest()[:32] != self.version:
            raise InvalidIndex(f"{self.path} does not match its version {self.version}: it is damaged")

    def names(self) -> frozenset[str]:
        return frozenset(self._sections)

    def array(self, name: str) -> npt.NDArray[Any]:
        """Section `name` as a read-only array over the mapped file; `InvalidIndex` if missing."""
        section = self._sections.get(name)
        if section is None:
            raise InvalidIndex(f"{self.path} has no section {name!r}: rebuild it with `anvil index`")
        dtype = np.dtype(section.dtype).newbyteorder("<")
        count = section.length // dtype.itemsize
        array = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._start + section.offset)
        return array.reshape(section.shape)

    def close(self) -> None:
        # While arrays still refer to the mapping it stays; it goes when the last of them does.
        with contextlib.suppress(BufferError):
            self._map.close()
        if self._file is not None:
            self._file.close()  # the mapping, if still there, keeps the copy's pages


def _typed(header: Any, key: str, kind: type[Any]) -> Any:
    """`header[key]`, which must be a `kind` (JSON's true is no number here)."""
    value = header[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{key} is {value!r:.40}, not {kind.__name__}")
    return value


def _shape(section: Any) -> tuple[int, ...]:
    shape = _typed(section, "shape", list)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise TypeError(f"shape is {shape!r:.40}, not a list of sizes")
    return tuple(shape)


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN
