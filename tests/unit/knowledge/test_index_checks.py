"""Every field of an index file that the server reads is checked when the file is opened: one
written wrong (with a version that matches it, or outside the version) is refused naming the
field, at start-up and by a refresh, and never served into a failing `/readyz` or question."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from support.embedders import Counting

from app.knowledge import artifact
from app.knowledge.artifact import InvalidIndex, write_index
from app.knowledge.corpus import CorpusFile
from app.knowledge.index import PassageIndex, add_vectors
from app.knowledge.refresh import FileSource, IndexRefresher
from app.knowledge.sections import build_arrays
from app.knowledge.served import ServedIndex
from app.knowledge.tables import TextTable, string_list

Arrays = dict[str, npt.NDArray[Any]]
FILES = [
    CorpusFile(
        "tides.md", "Tides", "# Tides\n\nThe tide turns twice a day.\n\n## Neap\n\nNeap tides are weak.\n"
    ),
    CorpusFile("winds.md", "Winds", "# Winds\n\nMonsoon winds turn with the seasons.\n"),
]
URLS = {"tides.md": "https://docs.example.com/tides"}
BUILT = {"at": "2026-05-04T03:02:01Z", "from": ["docs"]}


def built() -> tuple[Arrays, dict[str, Any]]:
    arrays, content = build_arrays(FILES, urls=URLS)
    add_vectors(arrays, content, Counting())
    return arrays, content


def written(path: Path, change: Callable[[Arrays, dict[str, Any], dict[str, Any]], None]) -> Path:
    """An index of `FILES` written as `anvil index` writes it, once `change` has changed its
    sections, content or `built` (its version is then that of what is written)."""
    arrays, content = built()
    stamp = dict(BUILT)
    change(arrays, content, stamp)
    write_index(path, arrays, content, stamp)
    return path


def header_changed(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the header of the index at `path` as `change` says (sections moved to suit)."""
    data = path.read_bytes()
    size = int.from_bytes(data[8:16], "little")
    header = json.loads(data[16 : 16 + size])
    sections = data[artifact._aligned(16 + size) :]
    change(header)
    encoded = json.dumps(header).encode()
    start = artifact._aligned(16 + len(encoded))
    path.write_bytes(
        artifact.MAGIC + len(encoded).to_bytes(8, "little") + encoded.ljust(start - 16) + sections
    )


def replaced(name: str, value: npt.NDArray[Any]) -> Callable[[Arrays, dict[str, Any], dict[str, Any]], None]:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        arrays[name] = value

    return change


def altered(name: str, alter: Callable[[npt.NDArray[Any]], npt.NDArray[Any]]) -> Any:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        arrays[name] = alter(arrays[name].copy())

    return change


def tables(prefix: str, texts: list[str]) -> Any:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        arrays.update(TextTable.arrays(prefix, texts))

    return change


def in_content(key: str, value: object) -> Any:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        content[key] = value

    return change


def in_built(key: str, value: object) -> Any:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        stamp[key] = value

    return change


def dropped(*names: str) -> Any:
    def change(arrays: Arrays, content: dict[str, Any], stamp: dict[str, Any]) -> None:
        for name in names:
            del arrays[name]

    return change


def bumped(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array[-1] += 1
    return array


def nan(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.flat[0] = np.nan
    return array


# Each field the server reads of an index file (`PassageIndex.__init__`, `status`, `facts`, and
# the ranking's reads of what they hold), written wrong, and what the refusal names.
WRONG = {
    "built.at in a 13th month": (
        in_built("at", "2026-13-01T00:00:00Z"),
        "built.at is '2026-13-01T00:00:00Z'",
    ),
    "built.at a number": (in_built("at", 1767225600), "built.at is 1767225600"),
    "lexical rules of another version": (
        in_content("lexical", "bm25-other"),
        "lexical rules are 'bm25-other'",
    ),
    "lexical rules missing": (in_content("lexical", None), "lexical rules are None"),
    "embedder a string": (in_content("embedder", "local"), "content.embedder is 'local'"),
    "embedder without a name": (in_content("embedder", {"dimensions": 8}), "content.embedder is"),
    "embedder of other dimensions": (
        in_content("embedder", {"name": "test:counting", "dimensions": 9}),
        "section 'vectors' does not hold one finite vector of 9",
    ),
    "embedder dimensions not a number": (
        in_content("embedder", {"name": "test:counting", "dimensions": "8"}),
        "content.embedder.dimensions is '8'",
    ),
    "embedder without vectors": (dropped("vectors", "vectors.keys"), "holds no vectors"),
    "vectors not finite": (altered("vectors", nan), "section 'vectors' does not hold one finite"),
    "vector keys of another length": (
        replaced("vectors.keys", np.zeros((3, 8), dtype=np.uint8)),
        "section 'vectors.keys'",
    ),
    "calibration a list": (in_content("calibration", [0.1, 0.2]), "content.calibration is [0.1, 0.2]"),
    "calibration not finite": (
        in_content("calibration", {"unrelated": [0.1, float("nan")]}),
        "content.calibration",
    ),
    "calibration of words": (in_content("calibration", {"unrelated": ["high"]}), "content.calibration"),
    "knowledge not a mapping": (in_content("knowledge", "the handbook"), "content.knowledge"),
    "knowledge named by a number": (in_content("knowledge", {"name": 7}), "content.knowledge"),
    "urls not http": (
        replaced("documents.url", string_list(["javascript:alert(1)", ""])),
        "documents.url holds 'javascript:alert(1)'",
    ),
    "urls fewer than documents": (
        replaced("documents.url", string_list(["https://docs.example.com/tides"])),
        "documents.url does not hold one page URL a document",
    ),
    "terms not UTF-8": (
        replaced("terms", np.frombuffer(b"tide\0\xff\0", dtype=np.uint8)),
        "'terms' is not UTF-8",
    ),
    "strings not ended": (replaced("documents", np.frombuffer(b"tides.md", dtype=np.uint8)), "does not end"),
    "a passage of no document": (altered("passage.document", bumped), "'passage.document' holds numbers"),
    "passage texts past their table": (altered("passage.text.offsets", bumped), "'passage.text.offsets'"),
    "headings fewer than passages": (
        tables("passage.heading", ["Tides"]),
        "passage.heading does not hold one heading a passage",
    ),
    "postings past their ids": (altered("body.indptr", bumped), "'body.indptr'"),
    "postings of no passage": (altered("heading.ids", bumped), "'heading.ids' holds numbers"),
    "weights not finite": (altered("whole.weights", nan), "'whole.weights'"),
    "a field of another size": (replaced("holders.size", np.array([99], dtype=np.int64)), "'holders.size'"),
    "a field of floats": (altered("body.ids", lambda a: a.astype(np.float32)), "'body.ids' is float32"),
    "file titles fewer than files": (tables("file.title", ["Tides"]), "file.title and file.text"),
    "passage texts of one table in two": (
        replaced("passage.text.offsets", np.array([0, 5], dtype=np.int64)),
        "'passage.text.offsets' does not hold 2 ascending offsets from 0 to",
    ),
    "exact headings of no passage": (altered("exact.ids", bumped), "'exact.ids' holds numbers"),
    "exact headings past their ids": (altered("exact.indptr", bumped), "'exact.indptr'"),
}


@pytest.mark.parametrize("wrong", WRONG, ids=list(WRONG))
def test_a_field_written_wrong_is_refused_at_open_naming_it(tmp_path: Path, wrong: str) -> None:
    change, said = WRONG[wrong]
    path = written(tmp_path / "i.anvilidx", change)
    with pytest.raises(InvalidIndex) as refused:
        PassageIndex.open(path)
    message = str(refused.value)
    assert message.startswith(f"{path} cannot be served: ") and said in message, message
    assert message.endswith("rebuild it with this version's `anvil index`")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda h: h.update(version=12), "version is 12, not str"),
        (lambda h: h.update(content=[]), "content is [], not dict"),
        (lambda h: h.update(built="yesterday"), "built is 'yesterday', not dict"),
        (lambda h: h["sections"]["terms"].update(shape=["x"]), "shape is ['x']"),
        (lambda h: h["sections"]["terms"].update(offset=True), "offset is True, not int"),
    ],
    ids=["version", "content", "built", "a section's shape", "a section's offset"],
)
def test_a_header_field_of_the_wrong_type_is_refused(tmp_path: Path, change: Any, said: str) -> None:
    path = written(tmp_path / "i.anvilidx", lambda *_: None)
    header_changed(path, change)
    with pytest.raises(InvalidIndex, match=f"has a damaged header .*{re.escape(said)}"):
        PassageIndex.open(path, verify=False)


def test_an_index_as_anvil_index_writes_it_opens_and_describes_itself(tmp_path: Path) -> None:
    index = PassageIndex.open(written(tmp_path / "i.anvilidx", lambda *_: None))
    facts = ServedIndex(index, "test:counting").facts()
    assert (facts.passages, facts.documents, facts.embedded) == (3, 2, 3)
    assert facts.built_at == 1777863721.0
    assert index.url(1) == "https://docs.example.com/tides#neap"


def test_an_index_that_does_not_say_when_it_was_built_is_served_with_no_age(tmp_path: Path) -> None:
    path = written(tmp_path / "i.anvilidx", lambda arrays, content, stamp: stamp.pop("at"))
    assert ServedIndex(PassageIndex.open(path)).facts().built_at is None


def test_a_build_time_outside_the_version_is_checked_too(tmp_path: Path) -> None:
    # `built` is not hashed: a file whose version matches can still say a 13th month.
    path = written(tmp_path / "i.anvilidx", lambda *_: None)
    header_changed(path, lambda header: header["built"].update(at="2026-13-01T00:00:00Z"))
    with pytest.raises(InvalidIndex, match=r"built.at is '2026-13-01T00:00:00Z', not a time"):
        PassageIndex.open(path)


@pytest.mark.anyio
async def test_a_refresh_keeps_serving_the_old_index_when_the_new_one_is_written_wrong(
    tmp_path: Path,
) -> None:
    target = written(tmp_path / "served.anvilidx", lambda *_: None)
    source = FileSource(target, tmp_path)
    index, seen = source.open()
    served = ServedIndex(index)
    refused: list[str] = []
    refresher = IndexRefresher(source, served.index, seen, served.swap, refused.append)
    first = served.facts()

    for wrong in ("built.at in a 13th month", "calibration a list", "urls not http"):
        written(target, WRONG[wrong][0])
        assert await refresher.check() is False
        assert served.facts() == first
    assert len(refused) == 3 and all("cannot be served" in reason for reason in refused)
