"""A step blocked on the broker (a flush waiting for acknowledgements) makes the daemon not ready.

Over the in-memory fakes: the sink's 4th flush hangs for 3 s. The watchdog must flip
``monitor_ready`` to 0 and log ``broker_down`` once while it hangs, and the daemon must be
ready again (``broker_up``) after it returns, with the stream fully processed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.sim.workload import Workload
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource
from tests.unit import test_daemon_loop as loop_tests
from tests.unit.test_daemon_loop import TOPICS, _config, _fill

shared_workload = loop_tests.workload


class _HangingSink(FakeSink):
    def __init__(self, log_: FakeLog, hang_s: float, at_flush: int, fails: bool) -> None:
        super().__init__(log_)
        self.hang_s = hang_s
        self.at_flush = at_flush
        self.fails = fails
        self.flushes = 0
        self.hanging = threading.Event()

    def flush(self, timeout_s: float) -> None:
        self.flushes += 1
        if self.flushes == self.at_flush:  # once up and running
            self.hanging.set()
            time.sleep(self.hang_s)
            self.fail_flushes = int(self.fails)  # then fails, as a flush that timed out
        super().flush(timeout_s)


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "fails"])
def test_blocked_flush_is_not_ready_and_logged_once(
    tmp_path: Path, shared_workload: Workload, caplog: pytest.LogCaptureFixture, fails: bool
) -> None:
    """The watchdog's ``broker_down`` says only that a step hangs; one that then fails says why
    (``step_failed``, once), since ``broker_down`` is logged once per outage."""
    log = FakeLog()
    _fill(log, shared_workload)
    cfg = _config(tmp_path / "d")
    store = Store(cfg.data_dir)
    registry = CollectorRegistry()
    engine = Engine(cfg, store, Exporter(cfg, registry))
    stop = threading.Event()
    sink = _HangingSink(log, hang_s=3.0, at_flush=4, fails=fails)

    def connect(stored: Callable[[], Mapping[tuple[str, int], int]]) -> tuple[FakeSource, FakeSink]:
        return FakeSource(log, [TOPICS.scored, TOPICS.requests, TOPICS.labels], stored), sink

    daemon = Daemon(engine, connect, stop)
    daemon.stall_s = 1.0
    ready: list[float | None] = []

    def script() -> None:
        assert sink.hanging.wait(10)
        time.sleep(2.2)  # the watchdog looks once a second
        ready.append(registry.get_sample_value("monitor_ready"))
        time.sleep(2.5)  # the flush returned ~1.8 s ago
        ready.append(registry.get_sample_value("monitor_ready"))
        stop.set()

    driver = threading.Thread(target=script)
    driver.start()
    with caplog.at_level(logging.INFO, logger="monitor"):
        daemon.run()
    driver.join()
    events = [getattr(r, "event", "") for r in caplog.records]
    assert ready == [0.0, 1.0]
    assert events.count("broker_down") == 1 and events.count("broker_up") == 2, events
    failed = [r for r in caplog.records if getattr(r, "event", "") == "step_failed"]
    assert [getattr(r, "error", "") for r in failed] == (["fake flush failed"] if fails else [])
    assert store.offsets()[(TOPICS.scored, 0)] == len(shared_workload)
    store.close()
