"""The daemon's loop over in-memory Kafka fakes: order of effects, crash safety, bad input."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from monitor import daemon as daemon_module
from monitor.cli import main
from monitor.config.schema import Config, KafkaConfig, ModelConfig
from monitor.daemon import Daemon
from monitor.errors import BrokerUnavailable, ConfigError, StoreError
from monitor.io import kafka_io
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.io.topics import missing_topics
from monitor.runtime.engine import Engine
from monitor.runtime.ports import Loop
from monitor.runtime.sampler_role import SamplerEngine
from monitor.sim.workload import Workload, WorkloadSpec, generate
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource, FakeTopicReader

TOPICS = Config().kafka.topics


def _config(data_dir: Path) -> Config:
    model = ModelConfig(
        name="default", labels_per_hour=40.0, expected_records_per_hour=500.0, refresh_records=100
    )
    return Config(
        models={"default": model},
        data_dir=data_dir,
        label_park_grace_s=0.0,
        kafka=KafkaConfig(max_poll_records=500),  # small batches: a workload takes many steps
    )


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(WorkloadSpec(n=4000, hours=8.0, seed=3))


def _fill(log: FakeLog, w: Workload, partitions: int = 1) -> None:
    log.create(TOPICS.scored, partitions)
    for topic in (TOPICS.requests, TOPICS.labels, TOPICS.deadletter):
        log.create(topic)
    for i, rec in enumerate(w.records()):
        log.append(TOPICS.scored, json.dumps(rec).encode(), partition=i % partitions)


class Harness:
    """An engine over a fake log with a fresh store and registry (restartable)."""

    def __init__(
        self, log: FakeLog, data_dir: Path, clock: Callable[[], float] = time.time
    ) -> None:
        self.log = log
        self.config = _config(data_dir)
        self.registry = CollectorRegistry()
        self.store = Store(data_dir)
        self.engine = Engine(self.config, self.store, Exporter(self.config, self.registry), clock)
        self.source = FakeSource(
            log, [TOPICS.scored, TOPICS.requests, TOPICS.labels], self.store.offsets
        )
        self.sink = FakeSink(log)
        self.engine.set_partitions(self.source.partitions_for(TOPICS.scored))

    def drain(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if self.engine.step(self.source, self.sink) == 0:
                return
        msg = "did not drain"
        raise AssertionError(msg)

    def close(self) -> None:
        self.store.close()

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


def _answer(log: FakeLog, w: Workload, start: int = 0) -> int:
    truth = dict(w.truth_rows())
    reqs = log.records(TOPICS.requests)
    for _, value in reqs[start:]:
        req = json.loads(value)
        log.append(
            TOPICS.labels,
            json.dumps({"request_id": req["request_id"], "label": truth[req["id"]]}).encode(),
        )
    return len(reqs)


def _windows(h: Harness) -> str:
    return repr(h.engine.estimator.snapshot().windows)  # repr: NaN-safe comparison


def _run_clean(tmp_path: Path, w: Workload, partitions: int = 1) -> tuple[FakeLog, Harness]:
    log = FakeLog()
    _fill(log, w, partitions)
    h = Harness(log, tmp_path / "clean")
    h.drain()
    _answer(log, w)
    h.drain()
    return log, h


def test_stream_to_estimate_with_offsets_and_counters(tmp_path: Path, workload: Workload) -> None:
    log, h = _run_clean(tmp_path, workload)
    n_req = len(log.records(TOPICS.requests))
    assert 0.8 * 40 * 8 < n_req < 1.2 * 40 * 8  # within the budget's tolerance
    assert h.value("monitor_records_total", model="default") == 4000
    assert h.value("monitor_audit_requests_total", model="default") == n_req
    assert h.value("monitor_labels_received_total", model="default") == n_req
    # the store's offsets are the ends of the logs and Kafka got the same
    ends = {(t, 0): len(log.topics[t][0]) for t in (TOPICS.scored, TOPICS.labels, TOPICS.requests)}
    assert h.store.offsets() == ends
    assert log.committed == ends
    snap = h.engine.estimator.snapshot()
    row = next(x for x in snap.windows if x.window == "24h")
    assert row.labels == n_req and row.f.lower <= row.f.value <= row.f.upper
    h.close()


def test_records_deleted_before_they_were_read_are_logged_and_counted(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention removed records while the monitor was down: the client resumed at the log
    start without a word, 500 records were in no count and nothing said so."""
    log = FakeLog()
    _fill(log, workload)
    h = Harness(log, tmp_path / "d")
    h.engine.step(h.source, h.sink)
    h.engine.step(h.source, h.sink)
    assert h.store.offsets()[(TOPICS.scored, 0)] == 1000
    h.close()
    log.delete_records(TOPICS.scored, 0, 1500)  # while the monitor is down
    h = Harness(log, tmp_path / "d")
    with caplog.at_level(logging.WARNING, logger="monitor.runtime.skips"):
        h.drain()
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "records_skipped"]
    assert (record.topic, record.partition, record.records) == (TOPICS.scored, 0, 500)  # type: ignore[attr-defined]
    assert (record.expected_offset, record.first_offset) == (1000, 1500)  # type: ignore[attr-defined]
    skipped = h.value("monitor_records_skipped_total", topic=TOPICS.scored, partition="0")
    assert skipped == 500
    assert h.value("monitor_records_total", model="default") == 2500  # the rest, once each
    h.close()


def _crash_run(tmp_path: Path, w: Workload, fail: Callable[[Harness, int], None]) -> FakeLog:
    """Run with injected failures: ``fail(h, step)`` may raise; a crash = drop the process."""
    log = FakeLog()
    _fill(log, w)
    h = Harness(log, tmp_path / "crashy")
    answered = 0
    for step in range(100_000):
        try:
            fail(h, step)
            n = h.engine.step(h.source, h.sink)
        except (StoreError, _Crash):
            h.close()
            h = Harness(log, tmp_path / "crashy")  # restart from the store
            continue
        if n == 0:
            before = answered
            answered = _answer(log, w, answered)
            if answered == before and h.engine.step(h.source, h.sink) == 0:
                break
    _HARNESS.append(h)
    return log


class _Crash(Exception):
    pass


_HARNESS: list[Harness] = []


def test_crash_before_transaction_replays_identically(
    tmp_path: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_log, clean = _run_clean(tmp_path, workload)
    real_commit = Store.commit
    calls = {"n": 0}

    def flaky_commit(self: Store, *args: object) -> None:
        calls["n"] += 1
        if calls["n"] % 7 == 3:
            raise _Crash  # produced and flushed, but the transaction never happened
        real_commit(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "commit", flaky_commit)
    log = _crash_run(tmp_path, workload, lambda h, s: None)
    monkeypatch.setattr(Store, "commit", real_commit)
    h = _HARNESS.pop()
    # requests may be produced twice (same key, same bytes), never differently
    assert set(log.records(TOPICS.requests)) == set(clean_log.records(TOPICS.requests))
    assert _windows(h) == _windows(clean)
    assert h.value("monitor_duplicate_record_ids_total", model="default") == 0.0
    h.close()
    clean.close()


def test_a_record_id_sent_again_with_other_content_is_counted_and_logged_once(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """The first request stands; sent again unchanged (a producer's retry) it counts nothing."""
    caplog.set_level(logging.WARNING, logger="monitor.runtime.engine")
    log, h = _run_clean(tmp_path, workload)
    before = _labelled(h)
    known = {json.loads(v)["request_id"] for _, v in log.records(TOPICS.requests)}
    audited = {json.loads(v)["id"] for _, v in log.records(TOPICS.requests)}
    again = [rec for rec in workload.records() if rec["id"] in audited][:20]
    n_requests = len(log.records(TOPICS.requests))
    for rec in again:  # unchanged: the same requests again
        log.append(TOPICS.scored, json.dumps(rec).encode())
    h.drain()
    assert h.value("monitor_duplicate_record_ids_total", model="default") == 0.0
    n_requests = len(log.records(TOPICS.requests))
    for rec in again:  # re-scored: another score, the same id
        log.append(TOPICS.scored, json.dumps({**rec, "score": 1.0 - rec["score"]}).encode())
    h.drain()
    new = [json.loads(v) for _, v in log.records(TOPICS.requests)[n_requests:]]
    assert new and {r["request_id"] for r in new} <= known  # requested again, under its id
    assert h.value("monitor_duplicate_record_ids_total", model="default") == len(new)
    lines = [r for r in caplog.records if getattr(r, "event", "") == "duplicate_record_ids"]
    assert len(lines) == 1 and lines[0].model == "default"  # type: ignore[attr-defined]
    assert lines[0].count == len(new)  # type: ignore[attr-defined]
    assert _labelled(h) == before  # the labelled requests are the first ones
    h.close()


def _labelled(h: Harness) -> dict[tuple[str, str, str], int]:
    return {(x.model, x.segment, x.window): x.labels for x in h.engine.estimator.snapshot().windows}


def test_a_rebuild_days_later_refuses_the_records_stamped_ahead_that_the_live_run_did(
    tmp_path: Path, workload: Workload
) -> None:
    """Event times ahead are judged against each record's Kafka timestamp, not the clock.

    Every 20th record says it happened an hour after Kafka stamped it (a host whose clock is
    off). Read live (the clock just after the traffic) and again from the topics two days later
    (a store moved aside, or a crash's replay), the same records are refused and the same
    requests made: against the clock, the later reading accepted (and sampled) what the live
    one had refused.
    """
    end = workload.spec.end_ts
    runs: dict[str, FakeLog] = {}
    for name, clock_s in (("live", end + 60.0), ("rebuilt", end + 2 * 86_400.0)):
        log = FakeLog()
        for t in TOPICS.scored, TOPICS.requests, TOPICS.labels, TOPICS.deadletter:
            log.create(t)
        for i, rec in enumerate(workload.records()):
            written_ms = int(rec["ts"] * 1000) + 50  # the producer's clock (CreateTime)
            ahead = {**rec, "ts": rec["ts"] + 3600.0} if i % 20 == 0 else rec
            log.append(TOPICS.scored, json.dumps(ahead).encode(), ts_ms=written_ms)
        h = Harness(log, tmp_path / name, functools.partial(float, clock_s))
        h.drain()
        h.close()
        runs[name] = log
    refused = [json.loads(v) for _, v in runs["live"].records(TOPICS.deadletter)]
    assert len(refused) == len(workload.score[::20])
    assert {d["reason"] for d in refused} == {"bad_timestamp"}
    assert "more than 5 minutes after the record's Kafka timestamp" in refused[0]["detail"]
    for topic in TOPICS.requests, TOPICS.deadletter:
        assert runs["rebuilt"].records(topic) == runs["live"].records(topic)


def test_flush_failure_rolls_back_and_loses_nothing(tmp_path: Path, workload: Workload) -> None:
    clean_log, clean = _run_clean(tmp_path, workload)
    log = FakeLog()
    _fill(log, workload)
    h = Harness(log, tmp_path / "flaky")
    failures = 0
    answered = 0
    for step in range(100_000):
        if step % 3 == 1:
            h.sink.fail_flushes = 1
        try:
            n = h.engine.step(h.source, h.sink)
        except BrokerUnavailable:
            failures += 1
            h.engine.rollback(h.source)
            continue
        if n == 0:
            before, answered = answered, _answer(log, workload, answered)
            if before == answered:
                break
    assert failures >= 3
    assert set(log.records(TOPICS.requests)) == set(clean_log.records(TOPICS.requests))
    assert _windows(h) == _windows(clean)
    h.close()
    clean.close()


def test_bad_input_goes_to_deadletter_and_changes_no_estimate(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="monitor.runtime.reject_log")
    _clean_log, clean = _run_clean(tmp_path, workload)
    log = FakeLog()
    _fill(log, workload)
    log.append(TOPICS.scored, b'{"id": "x", "score": ', key=b"k1")
    log.append(TOPICS.scored, b'{"id": "y", "score": 1.5}')
    h = Harness(log, tmp_path / "bad")
    h.drain()
    _answer(log, workload)
    first = json.loads(log.records(TOPICS.requests)[0][1])
    log.append(
        TOPICS.labels, json.dumps({"request_id": first["request_id"], "label": 1 - 0}).encode()
    )
    log.append(TOPICS.labels, json.dumps({"request_id": "0" * 32, "label": 1}).encode())
    log.append(TOPICS.requests, b"not json")
    h.drain()
    h.engine.step(h.source, h.sink)  # parked unknown label expires (grace 0)
    reasons = sorted(json.loads(v)["reason"] for _, v in log.records(TOPICS.deadletter))
    dup = (
        "duplicate_label"
        if first["id"] in {r for r, y in workload.truth_rows() if y == 1}
        else "conflicting_label"
    )
    assert reasons == sorted(
        ["malformed_json", "out_of_range", dup, "unknown_request", "malformed_json"]
    )
    assert log.records(TOPICS.deadletter)[0][0] in (b"k1", None)
    for source, reason in (
        ("scored", "malformed_json"),
        ("requests", "malformed_json"),
        ("scored", "out_of_range"),
        ("labels", dup),
        ("labels", "unknown_request"),
    ):
        assert (h.value("monitor_invalid_records_total", input=source, reason=reason) or 0) >= 1
    # one log line per kind, saying where the record is and what is wrong with it
    lines = {(r.input, r.reason): r for r in caplog.records if r.event == "record_rejected"}  # type: ignore[attr-defined]
    assert sorted(lines) == sorted(
        [("scored", "malformed_json"), ("requests", "malformed_json"), ("scored", "out_of_range"),
         ("labels", dup), ("labels", "unknown_request")]
    )  # fmt: skip
    bad_score = lines[("scored", "out_of_range")]
    assert (bad_score.topic, bad_score.offset) == (TOPICS.scored, workload.spec.n + 1)  # type: ignore[attr-defined]
    assert "score" in bad_score.detail  # type: ignore[attr-defined]
    # malformed records are not counted as traffic and labels change nothing
    assert _windows(h) == _windows(clean)
    h.close()
    clean.close()


def test_a_payload_too_deep_to_encode_is_dead_lettered_not_a_crash(
    tmp_path: Path, workload: Workload
) -> None:
    """orjson reads 1,010 levels; ``json.dumps`` cannot write them within the recursion limit."""
    log = FakeLog()
    _fill(log, workload)
    ts = next(iter(workload.records()))["ts"]
    deep = b"[" * 1010 + b"1" + b"]" * 1010
    for i in range(50):  # predicted positives at 0.9: the design would audit several
        head = json.dumps({"id": f"deep{i}", "score": 0.9, "ts": ts})[:-1].encode()
        log.append(TOPICS.scored, head + b', "payload": ' + deep + b"}")
    h = Harness(log, tmp_path / "deep")
    h.drain()
    reasons = [json.loads(v)["reason"] for _, v in log.records(TOPICS.deadletter)]
    assert reasons == ["out_of_range"] * 50
    assert h.value("monitor_records_total", model="default") == 4000
    h.close()


def test_a_dead_letter_the_topic_refuses_as_too_large_is_written_minimal(
    tmp_path: Path, workload: Workload
) -> None:
    """A dead letter over the dead-letter topic's ``max.message.bytes`` failed every flush,
    reported as a broker outage, and the record blocked its partition for good. It is now
    written with only the reason, the source record's place and its sizes, and counted; the
    other dead letters stay whole and every later record is read."""
    log = FakeLog()
    _fill(log, workload)
    log.append(TOPICS.scored, b"\xff" * 70_000, key=b"k" * 600_000)
    log.append(TOPICS.scored, b"\xff\xfe{}", key=b"small")
    for i, rec in enumerate(workload.records()):
        if i < 10:
            log.append(TOPICS.scored, json.dumps({**rec, "id": f"after{i}"}).encode())
    h = Harness(log, tmp_path / "d")
    h.sink.max_bytes = 20_000  # the dead-letter topic's max.message.bytes
    h.drain()
    dead = log.records(TOPICS.deadletter)
    assert [key for key, _ in dead] == [None, b"small"]
    minimal, whole = (json.loads(value) for _, value in dead)
    assert minimal == {
        "reason": "too_large",
        "topic": TOPICS.scored,
        "partition": 0,
        "offset": workload.spec.n,
        "timestamp_ms": 0,
        "key_bytes": 600_000,
        "value_bytes": 70_000,
    }
    assert whole["detail"].startswith("not UTF-8: byte 0xff at offset 0")
    assert h.value("monitor_deadletters_minimal_total") == 1
    assert h.value("monitor_records_total", model="default") == 4010
    assert h.store.offsets()[(TOPICS.scored, 0)] == workload.spec.n + 12
    h.close()


def _engine(data_dir: Path, workload: Workload) -> tuple[FakeLog, Store, CollectorRegistry, Engine]:
    """A log holding ``workload`` and an engine over a fresh store, for a ``Daemon`` to run."""
    log = FakeLog()
    _fill(log, workload)
    cfg = _config(data_dir)
    store = Store(cfg.data_dir)
    registry = CollectorRegistry()
    return log, store, registry, Engine(cfg, store, Exporter(cfg, registry))


Connect = Callable[[Callable[[], Mapping[tuple[str, int], int]]], tuple[FakeSource, FakeSink]]


def _fake_connect(log: FakeLog, sources: list[FakeSource], *, unassigned: bool = False) -> Connect:
    """A ``Connect`` that opens a fake source over ``log`` (kept in ``sources``) and sink;
    ``unassigned``: the source starts with no partition and its broker down."""

    def connect(stored: Callable[[], Mapping[tuple[str, int], int]]) -> tuple[FakeSource, FakeSink]:
        sources.append(FakeSource(log, [TOPICS.scored, TOPICS.requests, TOPICS.labels], stored))
        sources[-1].unassigned = sources[-1].down = unassigned
        return sources[-1], FakeSink(log)

    return connect


def _run_scripted(
    engine: Loop,
    connect: Connect,
    stop: threading.Event,
    script: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Run a ``Daemon`` until ``stop`` while ``script`` (which sets it) acts on another thread."""
    driver = threading.Thread(target=script)
    driver.start()
    with caplog.at_level(logging.INFO, logger="monitor"):
        Daemon(engine, connect, stop).run()
    driver.join()


def test_daemon_retries_with_backoff_logs_once_and_stops(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    log, store, registry, engine = _engine(tmp_path / "d", workload)
    attempts = {"n": 0}
    stop = threading.Event()

    def connect(stored: Callable[[], Mapping[tuple[str, int], int]]) -> tuple[FakeSource, FakeSink]:
        attempts["n"] += 1
        if attempts["n"] <= 3:
            msg = "down"
            raise BrokerUnavailable(msg)
        src = FakeSource(log, [TOPICS.scored, TOPICS.requests, TOPICS.labels], stored)
        return src, FakeSink(log)

    published: list[int] = []
    engine.on_snapshot.append(lambda s: published.append(len(s.windows)))
    daemon = Daemon(engine, connect, stop)
    timer = threading.Timer(5.0, stop.set)
    timer.start()
    with caplog.at_level(logging.INFO, logger="monitor"):
        daemon.run()
    timer.cancel()
    events = [getattr(r, "event", "") for r in caplog.records]
    assert attempts["n"] == 4
    assert events.count("broker_down") == 1 and events.count("broker_up") == 1
    assert store.offsets()[(TOPICS.scored, 0)] == 4000
    assert published and registry.get_sample_value("monitor_ready") == 0.0
    store.close()


def test_unchanged_when_replayed_with_other_partitioning(
    tmp_path: Path, workload: Workload
) -> None:
    log1, h1 = _run_clean(tmp_path / "a", workload, partitions=1)
    log3, h3 = _run_clean(tmp_path / "b", workload, partitions=3)
    r1 = len(log1.records(TOPICS.requests))
    r3 = len(log3.records(TOPICS.requests))
    # the budget is split over partitions: about the same number of requests either way
    assert abs(r1 - r3) < 0.2 * r1
    assert np.isfinite(h3.engine.estimator.snapshot().windows[0].records)
    h1.close()
    h3.close()


def test_idle_daemon_notices_a_lost_broker_and_recovers(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    log, store, registry, engine = _engine(tmp_path / "idle", workload)
    stop = threading.Event()
    sources: list[FakeSource] = []
    ready: list[float | None] = []

    def script() -> None:
        time.sleep(1.0)
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[0].down = True
        time.sleep(2.5)
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[0].down = False
        time.sleep(3.0)
        ready.append(registry.get_sample_value("monitor_ready"))
        stop.set()

    _run_scripted(engine, _fake_connect(log, sources), stop, script, caplog)
    events = [getattr(r, "event", "") for r in caplog.records]
    assert ready == [1.0, 0.0, 1.0]
    assert events.count("broker_down") == 1 and events.count("broker_up") == 2
    store.close()


def test_a_missing_topic_is_not_ready_while_the_topics_that_exist_are_read_on(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """The probe's ``TopicsNotReady`` (the labels topic deleted) rolled back the step that had
    gone through and held each next one for a backoff doubling to 10 s: 3 s in, 1,500 of the
    4,000 scored records were read. Not ready and logged once; the scored records are read on."""
    log, store, registry, engine = _engine(tmp_path / "gone", workload)
    stop = threading.Event()
    sources: list[FakeSource] = []
    seen: list[tuple[int, float | None]] = []

    def connect(stored: Callable[[], Mapping[tuple[str, int], int]]) -> tuple[FakeSource, FakeSink]:
        src, sink = _fake_connect(log, sources)(stored)
        src.missing = TOPICS.labels
        return src, sink

    def script() -> None:
        time.sleep(3.0)
        seen.append((store.offsets().get((TOPICS.scored, 0), 0), _ready(registry)))
        sources[0].missing = None
        time.sleep(1.5)
        seen.append((store.offsets().get((TOPICS.scored, 0), 0), _ready(registry)))
        stop.set()

    _run_scripted(engine, connect, stop, script, caplog)
    events = [getattr(r, "event", "") for r in caplog.records]
    assert seen == [(len(workload), 0.0), (len(workload), 1.0)]
    assert events.count("topics_not_ready") == 1 and events.count("broker_up") == 1
    assert len(sources) == 1  # not reconnected
    store.close()


def _ready(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("monitor_ready")


def _wait_for(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_store_that_cannot_be_written_is_not_ready_and_loses_nothing(
    tmp_path: Path,
    workload: Workload,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full volume: SQLite refuses every transaction ("database or disk is full": the store
    is held to the pages it has, as a full volume would), and the reload after the failed step
    cannot store the refit it owes either (twice). The daemon exited 2 on the first refusal,
    taking its exported estimates and alert states with it. It must stay up and not ready, say
    so once, never step on a state it could not read back, and once there is room end as an
    undisturbed run: the same requests, each written once (every failed attempt wrote its
    step's again until this release), and estimates."""
    clean_log, clean = _run_clean(tmp_path, workload)
    log, store, registry, engine = _engine(tmp_path / "full", workload)
    full = threading.Event()
    full.set()
    real_commit = Store.commit

    def commit(self: Store, *args: object, **kwargs: object) -> None:
        # on the daemon's thread, which owns the connection; the SQLite error is real
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        self._db.execute(f"PRAGMA max_page_count = {pages if full.is_set() else 2**30}")
        real_commit(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "commit", commit)
    calls: list[str] = []
    real_rollback, real_step = engine.rollback, engine.step
    rollback_fails = [2]

    def rollback(source: FakeSource) -> None:
        if rollback_fails[0]:
            rollback_fails[0] -= 1
            calls.append("rollback failed")
            msg = "cannot write the state store: database or disk is full"
            raise StoreError(msg)
        real_rollback(source)
        calls.append("rolled back")

    def step(source: FakeSource, sink: FakeSink) -> int:
        calls.append("step")
        return real_step(source, sink)

    monkeypatch.setattr(engine, "rollback", rollback)
    monkeypatch.setattr(engine, "step", step)
    stop = threading.Event()
    sources: list[FakeSource] = []
    seen: list[tuple[int, float | None]] = []

    def offset(topic: str) -> int:
        return store.offsets().get((topic, 0), 0)

    def script() -> None:
        time.sleep(2.0)
        seen.append((offset(TOPICS.scored), _ready(registry)))
        full.clear()  # room again
        _wait_for(lambda: offset(TOPICS.scored) == len(workload))
        n = _answer(log, workload)
        _wait_for(lambda: offset(TOPICS.labels) == n)
        time.sleep(0.5)  # published within 0.2 s of labels
        seen.append((offset(TOPICS.scored), _ready(registry)))
        stop.set()

    _run_scripted(engine, _fake_connect(log, sources), stop, script, caplog)
    events = [getattr(r, "event", "") for r in caplog.records]
    assert seen == [(0, 0.0), (len(workload), 1.0)]
    assert events.count("store_unavailable") == 1 and events.count("store_available") == 1
    assert "broker_down" not in events
    failed = calls.index("rollback failed")
    assert calls[failed : failed + 3] == ["rollback failed", "rollback failed", "rolled back"]
    assert calls.count("rolled back") >= 1 and len(sources) == 1
    assert log.records(TOPICS.requests) == clean_log.records(TOPICS.requests)
    assert repr(engine.estimator.snapshot().windows) == _windows(clean)
    store.close()
    clean.close()


def test_unassigned_still_asks_the_broker_and_warns_once(
    tmp_path: Path,
    workload: Workload,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the group assigns nothing the probe still asks the broker (an end offset of a
    subscribed topic): a broker down meanwhile is logged down, and up once it answers, before
    any partition; one warning per unassigned spell while the broker answers."""
    monkeypatch.setattr(daemon_module, "UNASSIGNED_WARN_S", 0.5)
    log, store, registry, engine = _engine(tmp_path / "unassigned", workload)
    stop = threading.Event()
    sources: list[FakeSource] = []
    seen: list[list[str]] = []

    def events() -> list[str]:
        return [str(getattr(r, "event", "")) for r in caplog.records]

    def script() -> None:
        time.sleep(1.0)  # unassigned, broker down: attempts at 0, 0.5 and 1.5 s
        seen.append(events())
        sources[-1].down = False
        time.sleep(2.5)  # unassigned, broker up from 1.5 s: warned at 2 s
        seen.append(events())
        sources[-1].unassigned = False
        time.sleep(1.0)
        sources[-1].unassigned = True
        time.sleep(1.5)
        stop.set()

    _run_scripted(engine, _fake_connect(log, sources, unassigned=True), stop, script, caplog)
    assert seen[0].count("broker_down") == 1 and "broker_up" not in seen[0]
    assert "unassigned" not in seen[0]  # connected to nothing: the outage is what it says
    assert seen[1].count("broker_up") == 1 and seen[1].count("unassigned") == 1
    assert events().count("unassigned") == 2 and events().count("broker_down") == 1
    assert store.offsets()[(TOPICS.scored, 0)] == 4000
    assert registry.get_sample_value("monitor_ready") == 0.0
    store.close()


def test_a_second_process_in_the_group_is_reported_and_not_ready(
    tmp_path: Path,
    workload: Workload,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second ``--role all`` process started with the same group id took a partition of the
    scored topic: each estimated from part of the traffic, both ready, nothing logged. Now the
    engine that holds part of a topic for a while logs it once, with the fix, and is not ready
    until the group gives it every partition again."""
    monkeypatch.setattr(daemon_module, "UNASSIGNED_WARN_S", 0.5)
    monkeypatch.setattr(daemon_module, "PROBE_EVERY_S", 0.2)
    log, store, registry, engine = _engine(tmp_path / "shared", workload)
    log.topics[TOPICS.scored].append([])  # a second partition
    stop = threading.Event()
    sources: list[FakeSource] = []
    seen: list[list[str]] = []
    ready: list[float | None] = []

    def events() -> list[str]:
        return [str(getattr(r, "event", "")) for r in caplog.records]

    def script() -> None:
        while not sources:
            time.sleep(0.05)
        sources[-1].shared = {(TOPICS.scored, 1)}
        time.sleep(1.5)
        seen.append(events())
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[-1].shared = set()
        time.sleep(1.0)
        ready.append(registry.get_sample_value("monitor_ready"))
        stop.set()

    _run_scripted(engine, _fake_connect(log, sources), stop, script, caplog)
    assert seen[0].count("partitions_shared") == 1 and "partitions_whole" not in seen[0]
    shared = next(r for r in caplog.records if getattr(r, "event", "") == "partitions_shared")
    assert getattr(shared, "topics", None) == [f"{TOPICS.scored} (1 of 2 partitions)"]
    assert "group" in str(getattr(shared, "hint", ""))
    assert events().count("partitions_whole") == 1
    assert ready == [0.0, 1.0]
    store.close()


def test_a_restart_exports_the_stored_estimates_and_alerts_before_it_reaches_the_broker(
    tmp_path: Path, workload: Workload
) -> None:
    """Restarted while the broker is down, the daemon exported no estimate and no alert state
    (they came with the first step), so Prometheus resolved the alerts that were firing."""
    log = FakeLog()
    _fill(log, workload)
    h = Harness(log, tmp_path)
    h.drain()
    _answer(log, workload)
    h.drain()
    time.sleep(0.25)  # snapshots are published at most every 0.2 s after labels
    h.engine.shutdown(None, None)
    h.close()
    window = {"model": "default", "segment": "", "window": "24h"}
    before = h.value("monitor_f_measure", **window, alpha="0.5")
    assert before is not None
    registry = CollectorRegistry()
    with contextlib.ExitStack() as cleanup:  # no step: nothing was asked of a broker
        daemon_module._estimator_wiring(
            h.config, Exporter(h.config, registry), None, "all", cleanup
        )
        f = registry.get_sample_value("monitor_f_measure", {**window, "alpha": "0.5"})
        assert f == before
        alert = {**window, "alert": "model_untrustworthy"}
        assert registry.get_sample_value("monitor_alert_active", alert) == 0.0


def test_a_sampler_given_no_partition_is_a_ready_standby_while_the_broker_answers(
    tmp_path: Path,
    workload: Workload,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More samplers than partitions: the ones given nothing wait as standbys, ready (a rolling
    update waits for its new pods' readiness, which a full group never gave), their spell logged
    as information. A standby asks the broker too: not ready through an outage (it once stayed
    ready, and a sampler whose membership lapsed in a long outage became such a standby).
    ``--role all`` given nothing stays not ready (the test above)."""
    monkeypatch.setattr(daemon_module, "UNASSIGNED_WARN_S", 0.2)
    log = FakeLog()
    _fill(log, workload)
    cfg = _config(tmp_path)
    registry = CollectorRegistry()
    engine = SamplerEngine(cfg, Exporter(cfg, registry), FakeTopicReader(log, TOPICS.aggregates))
    stop = threading.Event()
    sources: list[FakeSource] = []
    ready: list[float | None] = []

    def script() -> None:
        time.sleep(1.0)  # down, then up from the attempt at 1.5 s
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[-1].down = False
        time.sleep(1.5)
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[-1].down = True
        time.sleep(2.0)
        ready.append(registry.get_sample_value("monitor_ready"))
        sources[-1].down = False
        time.sleep(3.0)
        ready.append(registry.get_sample_value("monitor_ready"))
        stop.set()

    _run_scripted(engine, _fake_connect(log, sources, unassigned=True), stop, script, caplog)
    assert ready == [0.0, 1.0, 0.0, 1.0]
    events = [getattr(r, "event", "") for r in caplog.records]
    assert events.count("broker_down") == 2 and events.count("broker_up") == 2
    spells = [r for r in caplog.records if getattr(r, "event", "") == "unassigned"]
    assert spells and {r.levelno for r in spells} == {logging.INFO}
    assert not log.records(TOPICS.requests)  # it decided nothing


def _written(data_dir: Path, workload: Workload) -> FakeLog:
    """A log holding ``workload`` and a data directory that has read all of it (closed)."""
    log = FakeLog()
    _fill(log, workload)
    h = Harness(log, data_dir)
    h.drain()
    h.close()
    return log


def test_a_data_directory_written_with_another_bucket_length_is_refused(
    tmp_path: Path, workload: Workload
) -> None:
    """Its buckets would be read as other hours: the 24 h window went from 4,000 records to 100
    and 0 labels without a word (7200 s: the old buckets looked like future ones)."""
    log = _written(tmp_path, workload)
    for bucket_s in (1800, 7200):
        cfg = _config(tmp_path)
        cfg = dataclasses.replace(cfg, windows=dataclasses.replace(cfg.windows, bucket_s=bucket_s))
        store = Store(tmp_path)
        with pytest.raises(StoreError, match=f"windows.bucket_s 3600, .* says {bucket_s}"):
            Engine(cfg, store, Exporter(cfg, CollectorRegistry()))
        store.close()
    h = Harness(log, tmp_path)  # the same length: as before
    assert h.engine.estimator.snapshot().windows
    h.close()


def test_a_data_directory_written_with_another_salt_is_refused(
    tmp_path: Path, workload: Workload, capsys: pytest.CaptureFixture[str]
) -> None:
    """Request ids are hashes of the salt: restarted with another, the labels of every pending
    request sent by record id were refused as unknown_request, without a word at start-up."""
    log = _written(tmp_path, workload)
    cfg = dataclasses.replace(_config(tmp_path), salt="rotated")
    store = Store(tmp_path)
    with pytest.raises(StoreError, match=r"sampling\.salt activeaudit, .* says rotated: request"):
        Engine(cfg, store, Exporter(cfg, CollectorRegistry()))
    store.close()
    h = Harness(log, tmp_path)  # the same salt: as before
    assert h.engine.estimator.snapshot().windows
    # check-config says so too (it said OK), read-only while a daemon holds the directory
    conf = tmp_path / "monitor.yaml"
    for salt, bucket_s, code in (("activeaudit", 3600, 0), ("rotated", 1800, 2)):
        conf.write_text(
            f"storage: {{data_dir: {tmp_path}}}\nsampling: {{salt: {salt}}}\n"
            f"windows: {{bucket_s: {bucket_s}, report: {{1h: 3600, 24h: 86400}}}}\n"
        )
        assert main(["check-config", "--config", str(conf)]) == code
    err = capsys.readouterr().err
    assert "written with windows.bucket_s 3600, the configuration says 1800" in err
    assert "written with sampling.salt activeaudit, the configuration says rotated" in err
    # the directory named as `run` is given it, by --data-dir (check-config had no such flag)
    conf.write_text(f"storage: {{data_dir: {tmp_path / 'fresh'}}}\nsampling: {{salt: rotated}}\n")
    assert main(["check-config", "--config", str(conf)]) == 0  # the file's directory: no store
    assert main(["check-config", "--config", str(conf), "--data-dir", str(tmp_path)]) == 2
    assert "the configuration says rotated" in capsys.readouterr().err
    h.close()


def test_a_model_removed_from_the_configuration_is_named_once_at_start(
    tmp_path: Path, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """Warned at start, not again at each rollback of a broker outage (it was, every retry)."""
    log = _written(tmp_path, workload)
    cfg = dataclasses.replace(
        _config(tmp_path), models={"other": ModelConfig(name="other")}, default_model="other"
    )
    store = Store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="monitor"):
        engine = Engine(cfg, store, Exporter(cfg, CollectorRegistry()))
        engine.rollback(FakeSource(log, [TOPICS.scored], store.offsets))
    warned = [r for r in caplog.records if getattr(r, "event", "") == "model_not_configured"]
    assert [getattr(r, "model", "") for r in warned] == ["default"]
    assert engine.estimator.snapshot().windows == ()
    store.close()


def test_labels_written_before_their_deadline_count_however_late_they_are_read(
    tmp_path: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an outage the scored records written after a label can be read before it: the
    watermark then passed the deadlines first and every on-time label expired. A label is late
    only if a scored record past its deadline was written (Kafka time) before it."""
    short = functools.partial(_short_deadline, base=_config)
    monkeypatch.setattr(sys.modules[__name__], "_config", short)
    end = max(rec["ts"] for rec in workload.records())
    later = {"id": "later", "score": 0.5, "ts": end + 3 * 3600.0, "model": "default"}

    def run(name: str, label_ms: int, read_in_order: bool) -> collections.Counter[str]:
        log = FakeLog()
        log.create(TOPICS.scored)
        for topic in (TOPICS.requests, TOPICS.labels, TOPICS.deadletter):
            log.create(topic)
        for rec in workload.records():
            log.append(TOPICS.scored, json.dumps(rec).encode(), ts_ms=1_000)
        h = Harness(log, tmp_path / name)
        h.drain()
        truth = dict(workload.truth_rows())
        for _, value in log.records(TOPICS.requests):
            req = json.loads(value)
            label = {"request_id": req["request_id"], "label": truth[req["id"]]}
            log.append(TOPICS.labels, json.dumps(label).encode(), ts_ms=label_ms)
        if read_in_order:  # the labels are read before the record written after them
            h.drain()
        log.append(TOPICS.scored, json.dumps(later).encode(), ts_ms=3_000)
        h.drain()
        written = h.engine.estimator.first_written
        h.close()
        h = Harness(log, tmp_path / name)  # the timestamps are durable with the state
        assert h.engine.estimator.first_written == written and written[-1][2] == 3_000
        h.close()
        dead = log.records(TOPICS.deadletter)
        return collections.Counter(json.loads(v)["reason"] for _, v in dead)

    in_order, caught_up = run("a", 2_000, True), run("b", 2_000, False)
    assert in_order == caught_up  # (early requests' deadlines passed within the workload)
    late = run("c", 4_000, False)  # written after the record that passed the rest's deadlines
    assert late["expired_request"] > caught_up["expired_request"] > 0


def test_labels_are_judged_alike_whatever_order_the_topics_are_read_in(
    tmp_path: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two daemons on the same written data, one reading the scored topic first and one the
    labels: the second read the labels before the record that passed their deadlines and
    accepted those written after it. A label now waits until every scored record written
    before it is read: both make the same decisions and estimates."""
    short = functools.partial(_short_deadline, base=_config)
    monkeypatch.setattr(sys.modules[__name__], "_config", short)
    end = max(rec["ts"] for rec in workload.records())
    later = {"id": "later", "score": 0.5, "ts": end + 3 * 3600.0, "model": "default"}

    def scored() -> FakeLog:
        log = FakeLog()
        log.create(TOPICS.scored, 2)
        for topic in (TOPICS.requests, TOPICS.labels, TOPICS.deadletter):
            log.create(topic)
        for i, rec in enumerate(workload.records()):
            log.append(TOPICS.scored, json.dumps(rec).encode(), partition=i % 2, ts_ms=1_000)
        return log

    first = scored()
    h = Harness(first, tmp_path / "requests")
    h.drain()
    h.close()
    truth = dict(workload.truth_rows())
    answers = [json.loads(v) for _, v in first.records(TOPICS.requests)]

    def run(name: str, order: list[str]) -> tuple[list[tuple[int, str]], str]:
        log = scored()
        log.append(TOPICS.scored, json.dumps(later).encode(), partition=0, ts_ms=3_000)
        for i, req in enumerate(answers):  # a third on time, the rest written after `later`
            label = {"request_id": req["request_id"], "label": truth[req["id"]]}
            log.append(TOPICS.labels, json.dumps(label).encode(), ts_ms=2_000 if i % 3 else 4_000)
        h = Harness(log, tmp_path / name)
        h.source = FakeSource(log, order, h.store.offsets)
        h.drain()
        windows = _windows(h)
        h.close()
        dead = [json.loads(v) for _, v in log.records(TOPICS.deadletter)]
        return sorted((d["offset"], d["reason"]) for d in dead), windows

    scored_first = run("a", [TOPICS.scored, TOPICS.requests, TOPICS.labels])
    labels_first = run("b", [TOPICS.labels, TOPICS.requests, TOPICS.scored])
    reasons = collections.Counter(r for _, r in scored_first[0])
    assert set(reasons) == {"expired_request"}
    assert len(answers) > reasons["expired_request"] > len(answers) // 3  # the late, and more
    assert labels_first == scored_first


def _short_deadline(data_dir: Path, base: Callable[[Path], Config]) -> Config:
    return dataclasses.replace(base(data_dir), label_deadline_s=2 * 3600.0)


def test_check_config_and_run_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text(f"storage: {{data_dir: {tmp_path / 'data'}}}\n")
    assert main(["check-config", "--config", str(good)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("sampling: {salt: x, budgt: 3}\n")
    assert main(["check-config", "--config", str(bad)]) == 2
    assert "sampling.budgt" in capsys.readouterr().err
    queue = tmp_path / "queue.yaml"  # the section ``monitor queue labelstudio`` reads
    queue.write_text("labelstudio: {url: 'http://127.0.0.1:8080', token_env: LS_TOKEN}\n")
    assert main(["check-config", "--config", str(queue)]) == 0
    assert "labelstudio: OK" in capsys.readouterr().out
    queue.write_text("labelstudio: {urll: 'http://127.0.0.1:8080'}\n")
    assert main(["check-config", "--config", str(queue)]) == 2
    assert "labelstudio.urll: unknown key (did you mean 'url'?)" in capsys.readouterr().err
    plain = tmp_path / "plain.yaml"  # TLS named, but the protocol is PLAINTEXT
    plain.write_text(good.read_text() + "kafka: {client: {ssl_cafile: /etc/ca.pem}}\n")
    assert main(["check-config", "--config", str(plain)]) == 0
    unused = "kafka.client sets ssl_cafile but security_protocol is PLAINTEXT"
    assert f"plain.yaml: warning: {unused}" in capsys.readouterr().err
    held = Store(tmp_path / "data")  # another daemon holds the data directory
    try:
        assert main(["run", "--config", str(good)]) == 2
        assert "in use by another monitor" in capsys.readouterr().err
        assert main(["run", "--config", str(plain)]) == 2
        assert unused in capsys.readouterr().err  # logged before the store is opened
    finally:
        held.close()
    bridge = tmp_path / "bridge.yaml"  # and by the Label Studio bridge, before it connects
    bridge.write_text(
        plain.read_text() + "labelstudio: {url: 'http://127.0.0.1:1', token_env: LS_TOKEN}\n"
    )
    monkeypatch.setenv("LS_TOKEN", "not-a-token")
    assert main(["queue", "labelstudio", "--config", str(bridge)]) == 2
    assert unused in capsys.readouterr().err


def test_a_missing_topic_tells_a_process_run_with_create_topics_what_it_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Topics a restarted broker had lost were reported to a daemon running with
    --create-topics with "restart monitor run with --create-topics", the flag it had: it
    creates them at its start only."""
    seen: list[Config] = []

    def wiring(config: Config, *args: object) -> None:
        seen.append(config)
        msg = "wired: stop before connecting"
        raise ConfigError(msg)

    monkeypatch.setattr(daemon_module, "_estimator_wiring", wiring)
    conf = tmp_path / "monitor.yaml"
    conf.write_text(f"storage: {{data_dir: {tmp_path / 'data'}}}\n")
    for flags in ((), ("--create-topics",)):
        assert main(["run", "--config", str(conf), *flags]) == 2
    plain, creating = (
        str(missing_topics(config, [TOPICS.labels], lambda topic: 1)) for config in seen
    )
    command = f"kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --create --topic {TOPICS.labels}"
    assert command in plain and command in creating
    assert "or restart monitor run with --create-topics;" in plain
    assert "restart monitor run with --create-topics" not in creating
    assert (
        "this process runs with --create-topics, which creates the topics at its start only: "
        "restart it to create them again, or create them as it would (kafka-topics.sh"
    ) in creating
    assert creating.endswith("the monitor goes on by itself once they exist")


def test_topics_not_created_yet_are_logged_once_per_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """--create-topics with the broker absent logged ``topics_retry`` on every attempt (about
    8 lines a minute); now the first failure, each change of reason, and the success."""
    errors = ["Unable to bootstrap"] * 5 + ["Topic authorization failed"] * 3 + [""]
    calls: list[str] = []

    def create_topics(config: Config) -> list[str]:
        calls.append(errors[len(calls)])
        if calls[-1]:
            raise BrokerUnavailable(calls[-1])
        return [TOPICS.labels]

    class NoWait(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            return False

    monkeypatch.setattr(kafka_io, "create_topics", create_topics)
    caplog.set_level(logging.INFO, logger="monitor.daemon")
    daemon_module._create_topics(Config(), NoWait())
    lines = [
        (r.event, getattr(r, "error", None), getattr(r, "attempts", None))  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", "").startswith("topics_")
    ]
    assert lines == [
        ("topics_retry", "Unable to bootstrap", 1),
        ("topics_retry", "Topic authorization failed", 6),
        ("topics_ready", None, 9),
    ]
    assert len(calls) == len(errors)
