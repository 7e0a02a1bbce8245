"""Processed batches are logged one line each at DEBUG and summed at INFO once a minute."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from monitor.runtime.batch_log import BatchLog
from monitor.sim.workload import WorkloadSpec, generate
from monitor.testing.fakes import FakeLog
from tests.unit.test_daemon_loop import Harness, _fill


class _Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _summaries(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        {k: getattr(r, k) for k in ("batches", "records", "requests", "slowest_s", "offsets")}
        for r in caplog.records
        if r.levelno == logging.INFO
    ]


def test_the_batches_of_a_minute_are_one_info_line_with_their_sums(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="monitor.runtime.batch_log")
    clock = _Clock()
    log = BatchLog(every_s=60.0, clock=clock)
    log.note(0.5, {("scored", 0): 10}, records=1, requests=0)  # the first at once
    for i in range(1, 600):  # ten batches a second for the rest of the minute
        clock.now = i / 10
        log.note(0.01 * (i == 300), {("scored", i % 2): 10 + i}, records=1, requests=i % 2)
    log.tick()
    assert len(_summaries(caplog)) == 1  # nothing more within the minute
    clock.now = 60.0
    log.tick()  # due: logged between batches too
    clock.now = 61.0
    log.note(0.2, {("scored", 0): 700}, records=3, requests=1)
    clock.now = 200.0
    log.flush()  # at shutdown
    log.flush()  # nothing pending: no line
    assert _summaries(caplog) == [
        {"batches": 1, "records": 1, "requests": 0, "slowest_s": 0.5,
         "offsets": {"scored/0": 10}},
        {"batches": 599, "records": 599, "requests": 300, "slowest_s": 0.01,
         "offsets": {"scored/0": 608, "scored/1": 609}},
        {"batches": 1, "records": 3, "requests": 1, "slowest_s": 0.2,
         "offsets": {"scored/0": 700}},
    ]  # fmt: skip
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 601
    assert {r.event for r in debug} == {"batch_processed"}  # type: ignore[attr-defined]
    first = debug[0]
    assert (first.records, first.offsets) == (1, {"scored/0": 10})  # type: ignore[attr-defined]


def test_the_engine_logs_its_batches_at_info_only_as_summaries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Draining 2,000 scored records in polls of 500: one summary at once, the rest at shutdown."""
    caplog.set_level(logging.DEBUG)
    log = FakeLog()
    _fill(log, generate(WorkloadSpec(n=2000, hours=4.0, seed=3)))
    h = Harness(log, tmp_path)
    h.drain()
    h.engine.shutdown(h.source, h.sink)
    offsets = h.store.offsets()
    h.close()
    batches = [r for r in caplog.records if getattr(r, "event", "") == "batch_processed"]
    summaries = [r for r in caplog.records if getattr(r, "event", "") == "batches_processed"]
    assert len(batches) >= 4 and {r.levelno for r in batches} == {logging.DEBUG}
    assert [r.levelno for r in summaries] == [logging.INFO, logging.INFO]
    first, rest = summaries
    assert (first.batches, first.scored) == (1, 500)  # type: ignore[attr-defined]
    assert rest.batches == len(batches) - 1  # type: ignore[attr-defined]
    assert rest.scored == 1500  # type: ignore[attr-defined]
    for name in ("records", "requests", "labels", "rejected"):
        assert sum(getattr(r, name) for r in summaries) == sum(getattr(r, name) for r in batches)
    assert rest.offsets == {f"{t}/{p}": o for (t, p), o in sorted(offsets.items())}  # type: ignore[attr-defined]
