"""Building a knowledge index from folders (`anvil index`), and the start-up cache of one.

Without `ANVIL_INDEX`, `anvil serve` indexes `ANVIL_CORPUS_DIR` as before, but keeps the index in
the data folder under the corpus's content hash: a restart over an unchanged folder opens it
instead of building it again, and a changed file (or another version of Anvil's lexical rules)
gives another hash, so the index is built anew and the old one removed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.knowledge.artifact import FORMAT, InvalidIndex
from app.knowledge.corpus import CorpusFile
from app.knowledge.corpus_files import read_corpus
from app.knowledge.index import LEXICAL, KnowledgeIndex, write
from app.private_files import PRIVATE_FILE, describe, private_folder

logger = logging.getLogger(__name__)

#: The file name ending of an index.
SUFFIX = ".anvilidx"


@dataclass(frozen=True)
class Built:
    """What `build` wrote: its version and counts."""

    version: str
    files: int
    passages: int
    bytes: int


def read_sources(folders: Sequence[Path]) -> list[CorpusFile]:
    """The documents of every folder. With more than one folder, each document's source starts
    with its folder's name (`docs/intro.md`), so two folders' files never share a name."""
    if len(folders) == 1:
        return read_corpus(folders[0])
    names = [folder.resolve().name or "corpus" for folder in folders]
    if len(set(names)) < len(names):
        raise ValueError(
            "two source folders have the same name "
            f"({', '.join(sorted(n for n in set(names) if names.count(n) > 1))}): "
            "their documents would be cited alike; rename one, or index them one at a time"
        )
    return [
        CorpusFile(source=f"{name}/{file.source}", title=file.title, text=file.text)
        for folder, name in zip(folders, names, strict=True)
        for file in read_corpus(folder)
    ]


def build(folders: Sequence[Path], target: Path) -> Built:
    """Index the documents of `folders` into the file `target` (written atomically)."""
    files = read_sources(folders)
    version = write(files, target, sources=[str(folder) for folder in folders])
    index = KnowledgeIndex.open(target, verify=False)
    try:
        return Built(version, len(files), index.passage_count, target.stat().st_size)
    finally:
        index.close()


def corpus_key(files: Sequence[CorpusFile]) -> str:
    """A hash of what an index of `files` holds, and of the rules it is built by."""
    digest = hashlib.sha256(f"{FORMAT}\0{LEXICAL}\0".encode())
    for file in files:
        for part in (file.source, file.title, file.text):
            encoded = part.encode()
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()[:32]


def cached_index(corpus_dir: Path, cache_dir: Path) -> KnowledgeIndex:
    """The index of `corpus_dir`, opened from `cache_dir` if built before, else built and kept
    there; built in memory only when the cache cannot be written (with a warning saying why)."""
    files = read_corpus(corpus_dir)
    path = cache_dir / f"{corpus_key(files)}{SUFFIX}"
    if path.is_file():
        try:
            return KnowledgeIndex.open(path)
        except InvalidIndex as error:
            logger.warning("corpus: the cached index cannot be served (%s); building it again", error)
    try:
        private_folder(cache_dir)
        write(files, path, sources=[str(corpus_dir)], mode=PRIVATE_FILE)
    except OSError as error:
        logger.warning(
            "corpus: the index is built at every start because %s",
            describe(error, "keep the index in", cache_dir),
        )
        return KnowledgeIndex.from_files(files)
    for other in cache_dir.glob(f"*{SUFFIX}"):
        if other != path:
            other.unlink(missing_ok=True)
    return KnowledgeIndex.open(path)
