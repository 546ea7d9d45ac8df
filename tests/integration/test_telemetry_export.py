"""A real `anvil serve` exporting its telemetry: over OTLP/HTTP to a local receiver that decodes
the protobuf, and to a local Application Insights ingestion endpoint named in the connection
string. One `ask` is one trace; metrics and logs arrive; no token or question text is exported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.cosmos import run_cosmos_server
from support.jsonrpc import envelope
from support.telemetry_receivers import (
    AZURE_EXPORTER_QUIET_ENV,
    AzureIngestion,
    OtlpReceiver,
    running_azure_ingestion,
    running_otlp_receiver,
)

QUESTION = "Which cobalt-heron rule applies here?"
FAST_EXPORT = {
    "OTEL_METRIC_EXPORT_INTERVAL": "200",
    "OTEL_BSP_SCHEDULE_DELAY": "50",
    "OTEL_BLRP_SCHEDULE_DELAY": "50",
}


def ask(server: AnvilServer, token: str, arguments: dict[str, Any]) -> httpx.Response:
    call = envelope("tools/call", {"name": "ask", "arguments": arguments})
    headers = {**call.headers, "Authorization": f"Bearer {token}"}
    return httpx.post(server.mcp_url, json=call.body, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    with running_otlp_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def ingestion() -> Iterator[AzureIngestion]:
    with running_azure_ingestion() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def exporting(
    tmp_path_factory: pytest.TempPathFactory, otlp: OtlpReceiver, ingestion: AzureIngestion
) -> Iterator[AnvilServer]:
    """One server exporting to both at once, as each exporter is set up on its own."""
    env = {
        "ANVIL_ANSWER_ENGINE": "echo",
        "ANVIL_LOG_LEVEL": "info",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "APPLICATIONINSIGHTS_CONNECTION_STRING": ingestion.connection_string,
        # The exporter's own reports to Microsoft stay off in tests (no network here).
        **AZURE_EXPORTER_QUIET_ENV,
        **FAST_EXPORT,
    }
    with run_anvil(tmp_path_factory.mktemp("exporting"), env) as server:
        yield server


def test_one_ask_is_one_trace_with_request_sign_in_store_and_engine_spans(
    exporting: AnvilServer, otlp: OtlpReceiver
) -> None:
    token = exporting.token("alice")
    response = ask(exporting, token, {"question": QUESTION, "conversationId": "otlp-1"})
    assert response.json()["result"]["isError"] is False

    def complete(receiver: OtlpReceiver) -> bool:
        names = {span.name for span in receiver.spans()}
        return {"POST /mcp", "sign_in", "create conversations", "answer echo"} <= names

    assert otlp.wait_for(complete, timeout=20), sorted({s.name for s in otlp.spans()})
    (server,) = [span for span in otlp.spans() if span.name == "POST /mcp"]
    trace = [span for span in otlp.spans() if span.trace_id == server.trace_id]
    names = {span.name for span in trace}
    assert {"sign_in", "get conversations", "create conversations", "answer echo"} <= names
    assert server.parent_span_id == ""
    assert server.resource["service.name"] == "anvil"
    assert server.attributes["http.route"] == "/mcp"
    assert server.attributes["http.response.status_code"] == 200
    # The MCP SDK's own span for the request joins the same trace.
    assert any(span.scope.startswith("mcp") for span in trace), sorted((s.scope, s.name) for s in trace)


def test_metrics_and_logs_arrive_and_the_logs_carry_the_trace(
    exporting: AnvilServer, otlp: OtlpReceiver
) -> None:
    token = exporting.token("bob")
    ask(exporting, token, {"question": QUESTION, "conversationId": "otlp-2"})

    # A refused ask logs a line (at INFO, inside its request's span) that is exported with the trace.
    refused = ask(exporting, token, {"question": QUESTION, "conversationId": "otlp-2", "instructions": "x"})
    assert refused.json()["result"]["isError"] is True

    def exported(receiver: OtlpReceiver) -> bool:
        metric_names = {metric.name for metric in receiver.metrics()}
        return {"anvil.asks", "anvil.turns", "http.server.request.duration"} <= metric_names and any(
            "refused" in str(log.body) for log in receiver.logs()
        )

    assert otlp.wait_for(exported, timeout=20), sorted({m.name for m in otlp.metrics()})
    (line,) = [log for log in otlp.logs() if "refused" in str(log.body) and "conflict" in str(log.body)]
    assert otlp.wait_for(
        lambda r: line.trace_id in {span.trace_id for span in r.spans() if span.name == "POST /mcp"},
        timeout=20,
    ), "the refusal's log line does not carry its request's trace"
    # Access log lines stay on stdout: the server span already says what they say.
    assert not [log for log in otlp.logs() if log.attributes.get("http.route")]
    outcomes = {
        point.attributes.get("anvil.ask.outcome")
        for metric in otlp.metrics("anvil.asks")
        for point in metric.points
    }
    assert "created" in outcomes


def test_no_token_and_no_question_text_is_exported(exporting: AnvilServer, otlp: OtlpReceiver) -> None:
    token = exporting.token("carol")
    answer = ask(exporting, token, {"question": QUESTION, "conversationId": "otlp-secret-3"}).json()
    text = answer["result"]["structuredContent"]["answer"]
    assert otlp.wait_for(
        lambda r: any(s.name == "answer echo" for s in r.spans()) and bool(r.logs()), timeout=20
    )
    otlp.wait_for(lambda r: False, timeout=0.5)  # let the batch with this ask's spans go out
    everything = b"".join(body for _, body in otlp.raw_bodies())
    for secret in (token, QUESTION, "cobalt-heron", text, "otlp-secret-3"):
        assert secret.encode() not in everything, secret


def test_application_insights_receives_requests_dependencies_and_logs(
    exporting: AnvilServer, ingestion: AzureIngestion
) -> None:
    def asks(receiver: AzureIngestion) -> int:
        requests = receiver.envelopes("Microsoft.ApplicationInsights.Request")
        return sum(e["data"]["baseData"]["name"] == "POST /mcp" for e in requests)

    # The server has exported the other tests' asks too: this one's request is the one more.
    before = asks(ingestion)
    token = exporting.token("dave")
    assert ask(exporting, token, {"question": QUESTION, "conversationId": "ai-1"}).status_code == 200

    def arrived(receiver: AzureIngestion) -> bool:
        kinds = {envelope["name"] for envelope in receiver.envelopes()}
        return asks(receiver) > before and "Microsoft.ApplicationInsights.RemoteDependency" in kinds

    assert ingestion.wait_for(arrived, timeout=30), sorted({e["name"] for e in ingestion.envelopes()})
    everything = b"".join(body for _, body in ingestion.raw_bodies())
    assert token.encode() not in everything and QUESTION.encode() not in everything
    assert all(path.startswith(("/v2.1/track", "/QuickPulseService.svc")) for path in ingestion.paths())


def test_cosmos_db_requests_are_traced_under_the_store_spans(tmp_path: Path, otlp: OtlpReceiver) -> None:
    with run_cosmos_server() as cosmos:
        env = cosmos.env(ANVIL_ANSWER_ENGINE="echo", OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url, **FAST_EXPORT)
        with run_anvil(tmp_path / "cosmos", env) as server:
            token = server.token("erin")
            assert ask(server, token, {"question": QUESTION, "conversationId": "cosmos-1"}).status_code == 200

            def charged(receiver: OtlpReceiver) -> bool:
                return any(
                    "azure.cosmosdb.operation.request_charge" in span.attributes
                    for span in receiver.spans("create conversations")
                )

            assert otlp.wait_for(charged, timeout=20), sorted({s.name for s in otlp.spans()})
            create = next(
                span
                for span in otlp.spans("create conversations")
                if "azure.cosmosdb.operation.request_charge" in span.attributes
            )
            assert create.attributes["db.system.name"] == "azure.cosmosdb"

            def under_store(receiver: OtlpReceiver) -> bool:
                return any(span.parent_span_id == create.span_id for span in receiver.spans())

            assert otlp.wait_for(under_store, timeout=20), (
                "the Azure SDK traced no request under the store span"
            )
