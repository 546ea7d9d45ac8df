"""A JSON-RPC batch sent to `POST /mcp` (even with `MCP-Protocol-Version: 2025-03-26`, whose
specification has servers accept batches), and JSON that is not one message such as `{}`, got
400 with a 2 KB pydantic validation dump. Fixed in 0.4.2: one short -32600 with `"id": null`, and
nothing is run (`app.mcp_server.spec_fixes`, entry 4)."""

from __future__ import annotations

import json

import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import MODERN, VERSIONS, ask, assert_refused, fresh, headers, post, stored_turns


@pytest.mark.parametrize("version", VERSIONS)
def test_a_batch_is_one_clean_32600_and_runs_nothing(dev_server: AnvilServer, version: str | None) -> None:
    conversation = fresh()
    one = json.loads(ask(conversation, version, '"one"'))
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    for batch in ([one], [one, {**one, "id": "two"}, notification], [notification], []):
        response = post(dev_server, json.dumps(batch).encode(), headers(dev_server, version))
        assert_refused(response, -32600, "batches are not supported", "one JSON-RPC request per POST")
    assert stored_turns(dev_server, conversation) is None


NOT_MESSAGES = {
    "an empty object": (b"{}", "one JSON-RPC request or notification object"),
    "a string": (b'"x"', "one JSON-RPC request or notification object"),
    "a number": (b"1", "one JSON-RPC request or notification object"),
    "null": (b"null", "one JSON-RPC request or notification object"),
    "only the version": (b'{"jsonrpc":"2.0"}', "one JSON-RPC request or notification object"),
    "an id and no method": (b'{"jsonrpc":"2.0","id":1}', "one JSON-RPC request or notification object"),
    "a response with a fractional id": (
        b'{"jsonrpc":"2.0","id":1.5,"result":{}}',
        "one JSON-RPC request or notification object",
    ),
    "no jsonrpc member": (b'{"id":1,"method":"tools/list"}', "jsonrpc"),
    "jsonrpc 1.0": (b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', "jsonrpc"),
    "a method that is a number": (b'{"jsonrpc":"2.0","id":1,"method":5}', "method must be a string"),
    "params that are a list": (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}', "params"),
    "a notification with params that are a string": (
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":"x"}',
        "params",
    ),
}


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-11-25", MODERN])
@pytest.mark.parametrize("case", sorted(NOT_MESSAGES))
def test_json_that_is_not_a_message_is_32600(dev_server: AnvilServer, version: str | None, case: str) -> None:
    body, words = NOT_MESSAGES[case]
    response = post(dev_server, body, headers(dev_server, version, method="tools/list"))
    assert_refused(response, -32600, words)
