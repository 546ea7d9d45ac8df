"""The tracer, the metrics and the privacy rules every part of Anvil records through.

A `Telemetry` always exists. Without an exporter (`app.telemetry.setup`) its tracer and meter
are the OpenTelemetry API's no-op ones, so the code that records is the same either way and
nothing of the SDK is imported.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.metrics import Counter, Histogram, Meter, NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider, Tracer

import app

SCOPE_NAME = "anvil"
#: Histogram bounds for durations in seconds (OpenTelemetry's advice for HTTP server durations).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@dataclass
class Instruments:
    """The metrics Anvil records, named and united per OpenTelemetry's conventions."""

    requests: Histogram
    asks: Counter
    turns: Counter
    conflicts: Counter
    condensed: Counter
    store_duration: Histogram
    store_charge: Histogram
    engine_duration: Histogram
    engine_tokens: Histogram
    sign_in_failures: Counter
    index_refusals: Counter
    store_failures: Counter

    @classmethod
    def on(cls, meter: Meter) -> Instruments:
        def seconds(name: str, description: str) -> Histogram:
            return meter.create_histogram(
                name, unit="s", description=description, explicit_bucket_boundaries_advisory=DURATION_BUCKETS
            )

        return cls(
            requests=seconds("http.server.request.duration", "Duration of HTTP server requests."),
            asks=meter.create_counter(
                "anvil.asks", unit="{ask}", description="Asks answered or refused, by outcome."
            ),
            turns=meter.create_counter("anvil.turns", unit="{turn}", description="Turns written to a store."),
            conflicts=meter.create_counter(
                "anvil.conversation.conflicts",
                unit="{conflict}",
                description="Conditional writes that lost to another writer and were retried.",
            ),
            condensed=meter.create_counter(
                "anvil.conversation.condensed",
                unit="{ask}",
                description="Asks whose conversation had older turns dropped or left out of context.",
            ),
            store_duration=seconds(
                "db.client.operation.duration", "Duration of conversation store operations."
            ),
            store_charge=meter.create_histogram(
                "azure.cosmosdb.client.operation.request_charge",
                unit="{request_unit}",
                description="Request units Cosmos DB charged for a store operation.",
            ),
            engine_duration=seconds("gen_ai.client.operation.duration", "Duration of answer engine calls."),
            engine_tokens=meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Tokens a language model used."
            ),
            sign_in_failures=meter.create_counter(
                "anvil.sign_in.failures",
                unit="{request}",
                description="Requests refused at sign-in, by reason.",
            ),
            index_refusals=meter.create_counter(
                "anvil.index.refusals",
                unit="{index}",
                description="New knowledge index files not swapped in because they did not open or validate.",
            ),
            store_failures=meter.create_counter(
                "anvil.store.failures",
                unit="{operation}",
                description="Conversation store operations that failed other than by being busy, by cause.",
            ),
        )


class Telemetry:
    """The tracer, the instruments and the privacy rules of one running Anvil.

    Ids reach telemetry only as `pseudonym`s; questions, answers and instructions only when
    `capture_content` is on.
    """

    def __init__(
        self,
        tracer: Tracer,
        meter: Meter,
        *,
        pseudonym_key: bytes,
        capture_content: bool = False,
        shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.tracer = tracer
        self.instruments = Instruments.on(meter)
        self.capture_content = capture_content
        self._key = pseudonym_key
        self._shutdown = shutdown

    @classmethod
    def off(cls, *, pseudonym_key: bytes | None = None, capture_content: bool = False) -> Telemetry:
        """Telemetry that records nothing: the API's no-op tracer and meter, and no global
        provider set, so a provider configured by other code (`opentelemetry-instrument`) is
        left alone."""
        return cls(
            NoOpTracerProvider().get_tracer(SCOPE_NAME, app.__version__),
            NoOpMeterProvider().get_meter(SCOPE_NAME, app.__version__),
            pseudonym_key=secrets.token_bytes(32) if pseudonym_key is None else pseudonym_key,
            capture_content=capture_content,
        )

    def pseudonym(self, value: str) -> str:
        """A stable keyed hash of `value` (a user's oid, a conversation id): never the value."""
        return hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()[:16]

    def shutdown(self) -> None:
        """Flush every exporter and stop the providers (spans and metrics still buffered are sent)."""
        if self._shutdown is not None:
            shutdown, self._shutdown = self._shutdown, None
            shutdown()
