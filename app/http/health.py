"""What `GET /healthz` (alive) and `GET /readyz` (dependencies reachable) answer."""

from __future__ import annotations

import logging
import time

from starlette.responses import JSONResponse

from app.errors import StoreFailed
from app.runtime import Runtime

logger = logging.getLogger(__name__)


def liveness() -> dict[str, str]:
    return {"status": "ok"}


#: Said by `/readyz` when the corpus holds no document: the server is up, but answers nothing.
EMPTY_CORPUS = (
    "The corpus holds no document, so every question is answered that nothing was found: "
    "add documents (docs/formats.md) to ANVIL_CORPUS_DIR and restart."
)


async def readiness(rt: Runtime, *, draining: bool = False) -> JSONResponse:
    """200 when every dependency answers, else 503 naming the ones that do not; 503 at once
    while the process drains its requests before exiting. The knowledge index is named in `index`
    (its version, its passages and documents, its age, the embedder of its vectors and how
    many passages have theirs: fewer while a first start embeds them; `behindSeconds`, for how
    long a newer version has been seen and could not be fetched, else null; what the knowledge is
    called and covers); an empty corpus is said in `warnings` and leaves the status as it is."""
    if draining:
        return JSONResponse({"status": "draining", "checks": {}}, 503)
    checks: dict[str, str] = {}
    for name, probe in rt.readiness.items():
        try:
            await probe()
            checks[name] = "ok"
        except StoreFailed as error:  # a cause a word long, no detail that could hold a secret
            checks[name] = f"unavailable: {error.cause}"
        except Exception as error:  # a readiness probe reports, it never raises
            checks[name] = f"unavailable: {type(error).__name__}"
    index: dict[str, object] | None = None
    warnings: list[str] = []
    if rt.knowledge is not None:
        try:
            served = rt.knowledge.status()
            index = {
                "version": served.version or None,
                "passages": served.passages,
                "documents": served.documents,
                "ageSeconds": None
                if served.built_at is None
                else max(0, round(time.time() - served.built_at)),
                "embedder": served.embedder,
                "embedded": served.embedded,
                "behindSeconds": None if served.behind is None else round(served.behind),
                "name": served.name,
                "description": served.description,
            }
        except Exception as error:  # an index that cannot say what it is: unready, never a 500
            logger.exception("readiness: the served index cannot describe itself")
            checks["index"] = f"unavailable: {type(error).__name__}"
        else:
            if served.documents == 0:
                warnings.append(EMPTY_CORPUS)
    ready = all(value == "ok" for value in checks.values())
    body: dict[str, object] = {"status": "ok" if ready else "unavailable", "checks": checks}
    if index is not None:
        body["index"] = index
    if warnings:
        body["warnings"] = warnings
    return JSONResponse(body, 200 if ready else 503)
