"""A request to `POST /mcp` whose `id` was `null`, `{}`, `1.5`, `true` or `1e400` got 202 with no
body and was silently not run. Fixed in 0.4.2: -32600 with `"id": null` (JSON-RPC 2.0, section
5), in both eras."""

from __future__ import annotations

import json

import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import MODERN, VERSIONS, ask, assert_refused, fresh, headers, post, stored_turns

#: Ids that are not a string or an integer, as they are written in the body.
BAD_IDS = ["null", "{}", "[]", "1.5", "1.0", "true", "false", "1e400", "-1e400", "2e3"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_with_an_invalid_id_is_32600_with_a_null_id_and_runs_nothing(
    dev_server: AnvilServer, version: str | None
) -> None:
    conversation = fresh()
    for request_id in BAD_IDS:
        response = post(dev_server, ask(conversation, version, request_id), headers(dev_server, version))
        assert_refused(response, -32600, "id must be a string or an integer")
    assert stored_turns(dev_server, conversation) is None
    # The same request with a valid id runs: turn 1 is the first turn stored.
    response = post(dev_server, ask(conversation, version, "8"), headers(dev_server, version))
    assert response.json()["result"]["structuredContent"]["turn"] == 1
    assert stored_turns(dev_server, conversation) == 1


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_after_initialize_an_invalid_id_is_still_refused(dev_server: AnvilServer, version: str) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "edges", "version": "1"},
        },
    }
    agreed = post(dev_server, json.dumps(initialize).encode(), headers(dev_server, None))
    assert agreed.status_code == 200 and agreed.json()["result"]["protocolVersion"] == version
    conversation = fresh()
    for request_id in ("null", "1.5", "true"):
        response = post(dev_server, ask(conversation, version, request_id), headers(dev_server, version))
        assert_refused(response, -32600, "id")
    assert stored_turns(dev_server, conversation) is None


@pytest.mark.parametrize("version", [None, MODERN])
def test_a_request_asking_for_progress_is_checked_too(dev_server: AnvilServer, version: str | None) -> None:
    """A request with a `progressToken` from a client that reads SSE goes to the SDK's streaming
    manager: with an invalid id it gets the same JSON error first, and is not run."""
    conversation = fresh()
    request = json.loads(ask(conversation, version))
    request["params"].setdefault("_meta", {})["progressToken"] = "p-1"
    for request_id in (None, 2.5, False):
        body = json.dumps({**request, "id": request_id}).encode()
        assert_refused(post(dev_server, body, headers(dev_server, version)), -32600, "id")
    assert stored_turns(dev_server, conversation) is None
    assert post(dev_server, json.dumps(request).encode(), headers(dev_server, version)).status_code == 200
    assert stored_turns(dev_server, conversation) == 1
