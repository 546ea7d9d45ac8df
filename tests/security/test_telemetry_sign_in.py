"""Entra sign-in seen through telemetry: the sign-in span, the signing-key fetch under it, and
the failure metric; no token in anything exported."""

from __future__ import annotations

from pathlib import Path

from support.anvil_server import run_anvil
from support.entra_issuer import EntraIssuer
from support.jsonrpc import mcp_call
from support.telemetry_receivers import OtlpReceiver, running_otlp_receiver

from .calls import TENANT, bearer, entra_env, new_id


def test_sign_in_spans_key_fetches_and_failures_are_exported(issuer: EntraIssuer, tmp_path: Path) -> None:
    with running_otlp_receiver() as otlp:
        env = entra_env(
            issuer,
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
            OTEL_METRIC_EXPORT_INTERVAL="200",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        with run_anvil(tmp_path / "data", env) as server:
            token = issuer.mint_v2(oid=new_id(""), tid=TENANT)
            assert mcp_call(server, "ask", {"question": "q"}, bearer(token)).status_code == 200
            assert mcp_call(server, "ask", {"question": "q"}, bearer("not-a-token")).status_code == 401

            def complete(receiver: OtlpReceiver) -> bool:
                outcomes = {s.attributes.get("anvil.sign_in.outcome") for s in receiver.spans("sign_in")}
                failures = receiver.metrics("anvil.sign_in.failures")
                return {"signed_in", "refused"} <= outcomes and bool(failures)

            assert otlp.wait_for(complete, timeout=20), sorted({s.name for s in otlp.spans()})
        keys = [s for s in otlp.spans() if s.attributes.get("url.full", "").startswith(issuer.authority)]
        assert keys, "the signing keys were fetched in a client span"
        assert all(s.attributes["http.response.status_code"] == 200 for s in keys)
        reasons = {
            p.attributes["error.type"] for m in otlp.metrics("anvil.sign_in.failures") for p in m.points
        }
        assert reasons == {"invalid_token"}
        everything = b"".join(body for _, body in otlp.raw_bodies())
        assert token.encode() not in everything
