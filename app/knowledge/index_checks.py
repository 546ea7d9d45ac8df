"""What an index file must hold to be served: every field the server reads, checked once, when the
file is opened.

The version (a hash of the sections and of `content`) tells a file damaged after it was written
from the one written; it says nothing of a file written wrong (by another program, a later
version, a hand edit), and nothing of `built`, which lies outside it. So `check_index` reads each
field the server will read, the way it will read it: `built.at` (the age `/readyz` gives),
`content`'s lexical rules, embedder and calibration, and every section's type, shape and range
(the page URLs among them). An index that fails is refused with `InvalidIndex` naming the field,
at start-up or when a refresh finds it, instead of failing later on every readiness probe or
question. The checks read each section once, as the hash does.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from app.knowledge.artifact import InvalidIndex

#: How `anvil index` writes the time it built an index (UTC).
BUILT_AT = "%Y-%m-%dT%H:%M:%SZ"
#: Length of a vector's key (`vectors.KEY_BYTES`).
_KEY_BYTES = 16

Get = Callable[[str], npt.NDArray[Any]]


def built_time(built: Mapping[str, Any]) -> float | None:
    """When an index was built (seconds since the epoch), from its `built.at`; None when it does
    not say. `InvalidIndex` when it says something that is not such a time (a 13th month)."""
    at = built.get("at")
    if at is None:
        return None
    try:
        if not isinstance(at, str):
            raise ValueError(at)
        return float(calendar.timegm(time.strptime(at, BUILT_AT)))
    except (ValueError, OverflowError):
        raise InvalidIndex(
            f"built.at is {at!r}, not a time as `anvil index` writes it ({BUILT_AT})"
        ) from None


def check_index(get: Get, names: frozenset[str], content: Mapping[str, Any], lexical: str) -> None:
    """`InvalidIndex` naming the first field of an opened index (its sections by `get`, their
    `names`, its `content`) that the server could not read as it reads it; its lexical rules must
    be `lexical`."""
    if content.get("lexical") != lexical:
        raise InvalidIndex(f"its lexical rules are {content.get('lexical')!r:.80}, this Anvil's {lexical!r}")
    strings = _strings(get, "terms")
    terms = len(strings)
    passages = _table(get, "passage.text")
    if _table(get, "passage.heading") != passages:
        raise InvalidIndex("passage.heading does not hold one heading a passage")
    # Each passage's anchor on its page; an index written before they were kept has none.
    if "passage.anchor.blob" in names and _table(get, "passage.anchor") != passages:
        raise InvalidIndex("passage.anchor does not hold one anchor a passage")
    documents = _strings(get, "documents")
    urls = _strings(get, "documents.url")
    if len(urls) != len(documents):
        raise InvalidIndex("documents.url does not hold one page URL a document")
    for url in urls:
        if url and not url.startswith(("http://", "https://")):
            raise InvalidIndex(f"documents.url holds {url[:80]!r}, which is not an http or https URL")
    _ids(get, "passage.document", passages, len(documents))
    files = len(_strings(get, "file.source"))
    if _table(get, "file.title") != files or _table(get, "file.text") != files:
        raise InvalidIndex("file.title and file.text do not hold one entry a file")
    for field, size in (("body", passages), ("heading", passages), ("whole", len(documents))):
        _field(get, field, terms, size, weighted=True)
    _field(get, "holders", terms, passages, weighted=False)
    keys = len(_strings(get, "exact.keys"))
    exact = _ids(get, "exact.ids", None, passages)
    _offsets(get, "exact.indptr", keys, len(exact))
    _embedder(get, names, content.get("embedder"), passages)
    _calibration(content.get("calibration"))
    _knowledge(content.get("knowledge"))


def _array(get: Get, name: str, dtype: str, dimensions: int = 1) -> npt.NDArray[Any]:
    array = get(name)
    if array.dtype.name != dtype or array.ndim != dimensions:
        raise InvalidIndex(f"section {name!r} is {array.dtype.name} in {array.ndim} dimensions, not {dtype}")
    return array


def _strings(get: Get, name: str) -> list[str]:
    try:
        text = _array(get, name, "uint8").tobytes().decode()
    except UnicodeDecodeError as error:
        raise InvalidIndex(f"section {name!r} is not UTF-8 text ({error.reason})") from None
    if text and not text.endswith("\0"):
        raise InvalidIndex(f"section {name!r} does not end its last string")
    return text.split("\0")[:-1]


def _offsets(get: Get, name: str, count: int, end: int) -> npt.NDArray[Any]:
    """`count + 1` offsets from 0 up to `end`, never going back."""
    offsets = _array(get, name, "int64")
    if len(offsets) != count + 1 or offsets[0] != 0 or offsets[-1] != end or np.any(np.diff(offsets) < 0):
        raise InvalidIndex(f"section {name!r} does not hold {count + 1} ascending offsets from 0 to {end}")
    return offsets


def _table(get: Get, prefix: str) -> int:
    """How many texts the table `prefix` holds, once its offsets are checked against its text."""
    blob = _array(get, f"{prefix}.blob", "uint8")
    count = len(_array(get, f"{prefix}.offsets", "int64")) - 1
    if count < 0:
        raise InvalidIndex(f"section {prefix + '.offsets'!r} is empty")
    _offsets(get, f"{prefix}.offsets", count, len(blob))
    return count


def _ids(get: Get, name: str, count: int | None, below: int) -> npt.NDArray[Any]:
    ids = _array(get, name, "int32")
    if (count is not None and len(ids) != count) or (len(ids) and (ids.min() < 0 or ids.max() >= below)):
        raise InvalidIndex(f"section {name!r} holds numbers outside 0 to {below - 1}")
    return ids


def _field(get: Get, prefix: str, terms: int, size: int, *, weighted: bool) -> None:
    stored = _array(get, f"{prefix}.size", "int64")
    if stored.shape != (1,) or int(stored[0]) != size:
        raise InvalidIndex(f"section {prefix + '.size'!r} does not say {size}")
    ids = _ids(get, f"{prefix}.ids", None, size)
    _offsets(get, f"{prefix}.indptr", terms, len(ids))
    if weighted:
        weights = _array(get, f"{prefix}.weights", "float64")
        if len(weights) != len(ids) or not np.all(np.isfinite(weights)):
            raise InvalidIndex(f"section {prefix + '.weights'!r} does not hold one finite weight a posting")


def _embedder(get: Get, names: frozenset[str], embedder: object, passages: int) -> None:
    if embedder is None:
        return
    if not isinstance(embedder, dict) or not isinstance(embedder.get("name"), str) or not embedder["name"]:
        raise InvalidIndex(f"content.embedder is {embedder!r}, not an embedder's name and dimensions")
    dimensions = embedder.get("dimensions")
    if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
        raise InvalidIndex(f"content.embedder.dimensions is {dimensions!r}, not a count of dimensions")
    if not {"vectors", "vectors.keys"} <= names:
        raise InvalidIndex("content.embedder names an embedder, but the index holds no vectors")
    vectors = _array(get, "vectors", "float32", 2)
    if vectors.shape != (passages, dimensions) or not np.all(np.isfinite(vectors)):
        raise InvalidIndex(f"section 'vectors' does not hold one finite vector of {dimensions} a passage")
    if _array(get, "vectors.keys", "uint8", 2).shape != (passages, _KEY_BYTES):
        raise InvalidIndex("section 'vectors.keys' does not hold one key a passage")


def _knowledge(knowledge: object) -> None:
    """What the index says of itself (`anvil index --name/--description`): absent, or text."""
    if knowledge is None:
        return
    if not isinstance(knowledge, dict) or not all(
        key in ("name", "description") and isinstance(value, str) for key, value in knowledge.items()
    ):
        raise InvalidIndex(f"content.knowledge is {knowledge!r:.80}, not a name and a description")


def _calibration(calibration: object) -> None:
    if calibration is None:
        return
    scores = calibration.get("unrelated") if isinstance(calibration, dict) else None
    if not isinstance(scores, list) or not all(
        isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score)
        for score in scores
    ):
        raise InvalidIndex(f"content.calibration is {calibration!r:.80}, not a list of unrelated scores")
