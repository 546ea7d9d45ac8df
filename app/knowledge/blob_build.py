"""Building an index into Blob Storage (`anvil index --to URL`): built in a scratch folder and
uploaded whole, reusing the vectors of the index it replaces.

An embedding that stops early (its endpoint down, the command cancelled) keeps its vectors so far
beside the index to be kept, as a build into a file does (`resume`): uploaded to the blob of the
same name ending `.partial`, read back by the next build to the same URL, which embeds only the
passages still missing, and deleted once the index is uploaded. A process killed outright keeps
nothing there: its vectors so far were only in its scratch folder.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from app.knowledge import resume
from app.knowledge.blob import delete_if_present, download_if_present, upload
from app.knowledge.build import Built, Source, build
from app.knowledge.sections import Progress
from app.knowledge.vectors import PassageEmbedder

logger = logging.getLogger(__name__)


def partial_url(url: str) -> str:
    """Where the vectors so far of the index to be kept at blob `url` are kept until it is."""
    head, _, name = url.rpartition("/")
    return f"{head}/{PurePosixPath(name).with_suffix(resume.SUFFIX)}"


def build_to_blob(
    sources: Sequence[Source],
    url: str,
    progress: Progress | None = None,
    *,
    embedder: PassageEmbedder | None = None,
    previous: Sequence[Path] = (),
    knowledge: Mapping[str, str] | None = None,
) -> Built:
    """`build` into the blob at `url` (see the module)."""
    with tempfile.TemporaryDirectory(prefix="anvil-index-") as scratch:
        local = Path(scratch) / "index.anvilidx"
        earlier = list(previous)
        if embedder is None:
            built = build(sources, local, progress, previous=earlier, knowledge=knowledge)
            upload(local, url)
            return built
        if download_if_present(url, Path(scratch) / "earlier.anvilidx"):
            earlier.append(Path(scratch) / "earlier.anvilidx")
        kept = resume.partial_path(local)
        download_if_present(partial_url(url), kept)
        try:
            built = build(sources, local, progress, embedder=embedder, previous=earlier, knowledge=knowledge)
        except BaseException:
            _keep(kept, partial_url(url))
            raise
        upload(local, url)
        try:
            delete_if_present(partial_url(url))
        except OSError as error:  # the index is up: what is left is only a stale file beside it
            logger.warning("index: %s is left beside the index: %s", partial_url(url), error)
        return built


def _keep(path: Path, url: str) -> None:
    """Upload the vectors so far at `path`, if any (a warning when they cannot be)."""
    if not path.is_file():
        return
    try:
        upload(path, url)
    except OSError as error:
        logger.warning(
            "index: the passages embedded so far are not kept, so the next build embeds them again: %s",
            error,
        )
