"""RFC 9457 problem documents: the one error body shape of every HTTP answer Anvil writes itself."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

PROBLEM_TYPE_BASE = "https://anvil.dev/problems/"

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    421: "Misdirected Request",
    422: "Unprocessable Content",
    503: "Service Unavailable",
}


def problem_response(
    status: int, detail: str, *, kind: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """A `application/problem+json` response; `detail` must be safe to show (no secrets)."""
    body = {
        "type": PROBLEM_TYPE_BASE + (kind or str(status)),
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    return Response(
        json.dumps(body),
        status_code=status,
        media_type="application/problem+json",
        headers=dict(headers or {}),
    )
