"""What `GET /healthz` (alive) and `GET /readyz` (dependencies reachable) answer."""

from __future__ import annotations

import time

from starlette.responses import JSONResponse

from app.errors import StoreFailed
from app.runtime import Runtime


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
    many passages have theirs: fewer while a first start embeds them); an empty corpus is said in `warnings`
    and leaves the status as it is."""
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
    ready = all(value == "ok" for value in checks.values())
    body: dict[str, object] = {"status": "ok" if ready else "unavailable", "checks": checks}
    if rt.knowledge is not None:
        served = rt.knowledge.status()
        body["index"] = {
            "version": served.version or None,
            "passages": served.passages,
            "documents": served.documents,
            "ageSeconds": None if served.built_at is None else max(0, round(time.time() - served.built_at)),
            "embedder": served.embedder,
            "embedded": served.embedded,
            "name": served.name,
            "description": served.description,
        }
        if served.documents == 0:
            body["warnings"] = [EMPTY_CORPUS]
    return JSONResponse(body, 200 if ready else 503)
