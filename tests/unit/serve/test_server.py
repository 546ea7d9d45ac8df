"""`anvil serve`'s uvicorn server: the settings' limits, the drain on a stop signal, the settled heap."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from app.serve.server import GC_THRESHOLDS, STOP_GRACE_SECONDS, server_for, settle_heap
from app.settings import Settings
from app.settings.serve import HttpLimits, ServeSettings


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        (gc.enable if enabled else gc.disable)()


def test_the_server_is_bound_and_limited_as_the_settings_say() -> None:
    settings = Settings(
        port=9123, max_concurrent_requests=17, drain_seconds=4, keep_alive_seconds=3, log_level="warning"
    )
    config = server_for(FastAPI(), bind=settings, limits=settings, log_level=settings.log_level).config
    assert (config.host, config.port) == ("127.0.0.1", 9123)
    assert (config.limit_concurrency, config.timeout_graceful_shutdown, config.timeout_keep_alive) == (
        17,
        4,
        3,
    )
    assert (config.lifespan, config.log_config, config.access_log) == ("on", None, False)
    assert (config.server_header, config.proxy_headers) == (False, False)
    assert not isinstance(config.http, str)  # the front door, not one of uvicorn's own protocols


def test_readiness_fails_from_the_first_stop_signal_on() -> None:
    api = FastAPI()
    server = server_for(api, bind=ServeSettings(), limits=HttpLimits(), log_level="warning")
    assert not getattr(api.state, "draining", False)
    server.handle_exit(signal.SIGTERM, None)
    assert api.state.draining is True
    assert server.should_exit


def test_a_server_of_its_own_process_sets_when_the_process_ends_at_the_latest() -> None:
    before = set(threading.enumerate())
    server = server_for(
        FastAPI(),
        bind=ServeSettings(),
        limits=HttpLimits(drain_seconds=7),
        log_level="warning",
        own_process=True,
    )
    server.handle_exit(signal.SIGTERM, None)
    server.handle_exit(signal.SIGTERM, None)  # a second signal sets no second end
    (deadline,) = [thread for thread in threading.enumerate() if thread not in before]
    try:
        assert isinstance(deadline, threading.Timer) and deadline.daemon
        assert deadline.interval == 7 + STOP_GRACE_SECONDS
    finally:
        deadline.cancel()  # this process is the test run's, not the server's


def test_a_server_in_a_shared_process_never_ends_it() -> None:
    before = set(threading.enumerate())
    server_for(FastAPI(), bind=ServeSettings(), limits=HttpLimits(), log_level="warning").handle_exit(
        signal.SIGTERM, None
    )
    assert set(threading.enumerate()) <= before


@pytest.mark.usefixtures("restored_gc")
def test_settling_the_heap_freezes_it_and_turns_tuned_collection_on() -> None:
    gc.disable()
    gc.unfreeze()
    settle_heap()
    assert gc.isenabled()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_freeze_count() > 0
