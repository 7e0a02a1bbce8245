"""Throughput benchmark: the daemon's ingest path against the raw kafka-python ceiling.

One command, its own broker on 127.0.0.1: Tansu (``monitor.sim.embedded_broker``), and with
``--brokers tansu,kafka`` Apache Kafka too (``monitor.sim.kafka_broker``), one after the other,
each with the same records and phases::

    .venv/bin/python -m benchmarks.throughput                    # 2M records, ~6 min
    .venv/bin/python -m benchmarks.throughput --quick            # 200k records, < 1 min
    .venv/bin/python -m benchmarks.throughput --brokers tansu,kafka   # beside Apache Kafka
    .venv/bin/python -m benchmarks.throughput --memory           # only the 1M/5M memory phase

Phases, all in one run and on the same scored topic of ``--records`` records (one partition,
about 135 bytes of JSON each: id, score, pred, ts, model, segment, a small payload; event times
spread over 24 hours so controls are recomputed at each bucket):

1. **Ceiling**: a bare kafka-python consumer (assigned partition, no group) that polls and
   decodes every value and does nothing else: ``json.loads`` with kafka-python's default
   fetch settings (THE ceiling, first row), then ``json.loads`` and ``orjson.loads`` with the
   daemon's fetch settings (``monitor.io.kafka_io.FETCH_OPTIONS``, 5000 records per poll).
2. **Daemon**: the real loop (``monitor.daemon.Daemon`` around ``Engine`` with the real
   ``KafkaSource``/``KafkaSink``, SQLite ``Store``, ``Exporter`` metrics, alert hook, JSON
   logging to a file, ``tune_gc``) in this process, once per ``--variants`` entry
   ``DECODER[:MAX_POLL_RECORDS]``: ``json`` = stdlib ``json.loads`` only (before), ``orjson``
   = the shipped decoder; ``:500`` = the former default batch (default config otherwise):
   poll, decode, validate, decide audits, produce requests, update aggregates, one store
   transaction and one offset commit per poll. Each variant has its own group, requests topic
   and store, over the same scored topic. Rate and CPU are measured from the end of the first
   poll that returned records to the end of the step that consumed the last one; CPU is
   ``time.process_time()`` of this process (every thread: heartbeat, fetches, producer).
3. **Latency**: a paced producer (a subprocess) writes ``--latency-seconds`` of records at
   ``--rate-fraction`` (0.5) of the measured ``json.loads`` ceiling rate while the daemon
   runs; each record's Kafka timestamp is its produce time (its ``ts`` field equals it), and
   the latency of an audit request is its own Kafka timestamp (its produce time) minus that.
4. **Memory** (a fresh subprocess, so nothing else is resident): the daemon's ``Engine.step``
   with the real store, metrics and alert hook over an in-memory synthetic source (records
   encoded on the fly, fresh ids, event time advancing 12.5k records per hour, so 5M records
   span 400 hours: more than the 14-day retention, which is then pruned) and a sink that
   discards. RSS (``VmRSS``) and peak RSS (``VmHWM``) after start-up, 1M and 5M records.

The broker runs on the same 2 cores, so absolute rates move between runs; compare the ratios
inside one run. Consumer timeouts are the test values (session 2 s, heartbeat 0.5 s) so the
group joins in about a second; they do not change the steady rate.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from monitor.config.load import load_config
from monitor.config.schema import Config, TopicsConfig
from monitor.core.messages import RawRecord
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.kafka_broker import KAFKA_VERSION, KafkaBroker

BASE_TS = 1_763_700_000.0  # event time of the first record (2025-11-21)
SPAN_S = 24 * 3600.0  # event times of the throughput topic cover one day
AUDIT_SHARE = 0.001  # about 0.1% of records are audited
SEGMENTS = ("web", "mobile", "store", "partner")
TEST_CLIENT = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}


# ----------------------------------------------------------------------------- records
def scored_values(start: int, n: int, ts: np.ndarray[Any, Any]) -> list[bytes]:
    """Records ``start..start+n-1`` (~130 bytes of JSON each); each a function of its index only.

    Scores are ``u ** 1.5`` of a multiplicative hash ``u`` of the index (about 1 in 6 predicted
    positive), so the stream is the same however it is cut into batches. They are written as
    ``json.dumps`` writes floats (shortest round-trip form), so small ones carry runs of 19+
    digits (0.00012345678901234567) as production traffic from Python producers does.
    """
    idx = np.arange(start, start + n, dtype=np.uint64)
    u = ((idx * np.uint64(2654435761)) % np.uint64(2**32)).astype(np.float64) / 2**32
    score = (u**1.5).tolist()
    seg = ((idx * np.uint64(40503)) % np.uint64(len(SEGMENTS))).tolist()
    return [
        (
            f'{{"id":"rec-{start + i:010d}","score":{s!r},"pred":{int(s >= 0.5)},'
            f'"ts":{t:.3f},"model":"default","segment":"{SEGMENTS[g]}",'
            f'"payload":{{"f":{(start + i) % 100_000}}}}}'
        ).encode()
        for i, (s, g, t) in enumerate(zip(score, seg, ts.tolist(), strict=True))
    ]


def bulk_producer(bootstrap: str) -> Any:
    """A kafka-python producer for filling a topic before a run: large batches, leader acks."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        enable_idempotence=False,
    )


def produce_topic(bootstrap: str, topic: str, n: int) -> float:
    """Produce ``n`` records as fast as possible (pre-serialised, large batches); seconds."""
    producer = bulk_producer(bootstrap)
    started = time.perf_counter()
    chunk = 200_000
    for lo in range(0, n, chunk):
        m = min(chunk, n - lo)
        ts = BASE_TS + SPAN_S * (np.arange(lo, lo + m, dtype=np.float64) / n)
        values = scored_values(lo, m, ts)
        ts_ms = np.rint(ts * 1000).astype(np.int64).tolist()
        send = producer.send
        for v, t in zip(values, ts_ms, strict=True):
            send(topic, value=v, partition=0, timestamp_ms=t)
    producer.flush(120)
    producer.close(10)
    return time.perf_counter() - started


def create_topics(
    bootstrap: str, tag: str, *, scored: str | None = None, partitions: int = 1
) -> TopicsConfig:
    """A fresh set of the daemon's topics named ``...-{tag}``, over ``scored`` when given."""
    from monitor.io.kafka_io import ensure_topics

    topics = TopicsConfig().tagged(tag)
    if scored is not None:
        topics = replace(topics, scored=scored)
    ensure_topics(bootstrap, topics, partitions)
    return topics


def write_daemon_config(
    bootstrap: str,
    topics: TopicsConfig,
    data_dir: Path,
    *,
    labels_per_hour: float,
    records_per_hour: float,
    max_poll_records: int | None = None,
    library: str = "kafka-python",
    poll_timeout_ms: int = 100,
    group: str | None = None,
    recalibrate: bool = False,
) -> Path:
    """``data_dir/monitor.yaml`` for a benchmark daemon (test consumer timeouts: fast joins)."""
    mpr = f"\n  max_poll_records: {max_poll_records}" if max_poll_records else ""
    text = f"""
kafka:
  bootstrap_servers: ["{bootstrap}"]
  group_id: {group or f"bench-{uuid.uuid4().hex[:8]}"}
  client_library: {library}
  topics:
    scored: {topics.scored}
    requests: {topics.requests}
    labels: {topics.labels}
    deadletter: {topics.deadletter}
    aggregates: {topics.aggregates}
  poll_timeout_ms: {poll_timeout_ms}{mpr}
  client:
    session_timeout_ms: {TEST_CLIENT["session_timeout_ms"]}
    heartbeat_interval_ms: {TEST_CLIENT["heartbeat_interval_ms"]}
metrics:
  port: {free_port()}
storage:
  data_dir: {data_dir}
models:
  default:
    labels_per_hour: {labels_per_hour:.3f}
    expected_records_per_hour: {records_per_hour:.1f}
    recalibrate: {str(recalibrate).lower()}
"""
    path = data_dir / "monitor.yaml"
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def daemon_config(
    bootstrap: str,
    topics: TopicsConfig,
    data_dir: Path,
    records_per_hour: float,
    *,
    max_poll_records: int | None = None,
    library: str = "kafka-python",
) -> Config:
    """A daemon configuration auditing about ``AUDIT_SHARE`` of ``records_per_hour``."""
    path = write_daemon_config(
        bootstrap,
        topics,
        data_dir,
        labels_per_hour=max(1.0, AUDIT_SHARE * records_per_hour),
        records_per_hour=records_per_hour,
        max_poll_records=max_poll_records,
        library=library,
    )
    return load_config(path)


# ----------------------------------------------------------------------------- results
@dataclass
class Row:
    """One measured path."""

    name: str
    records: int
    wall_s: float
    cpu_s: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def per_cpu(self) -> float:
        return self.records / self.cpu_s if self.cpu_s > 0 else float("nan")

    @property
    def cpu_per_million(self) -> float:
        return self.cpu_s / self.records * 1e6 if self.records else float("nan")


def _mark() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


# ----------------------------------------------------------------------------- ceiling
def run_ceiling(
    bootstrap: str, topic: str, n: int, *, decoder: str, fetch: Mapping[str, Any], name: str
) -> Row:
    """A bare consumer: poll and decode every value, nothing else."""
    from kafka import KafkaConsumer, TopicPartition

    loads: Callable[[bytes], Any]
    if decoder == "orjson":
        import orjson

        loads = orjson.loads
    else:
        loads = json.loads
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **fetch,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    max_records = int(fetch.get("max_poll_records", 500))
    seen = 0
    start: tuple[float, float] | None = None
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        polled = consumer.poll(timeout_ms=200, max_records=max_records)
        if start is None and polled:
            start = _mark()
        for recs in polled.values():
            for r in recs:
                loads(r.value)
            seen += len(recs)
    end = _mark()
    consumer.close()
    assert start is not None, "the ceiling consumer never received a record"
    return Row(name, seen, end[0] - start[0], end[1] - start[1])


def run_ceiling_confluent(bootstrap: str, topic: str, n: int, *, name: str) -> Row:
    """The same bare consumer with confluent-kafka (librdkafka), decoding with ``json.loads``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ceiling-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = 0
    start: tuple[float, float] | None = None
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        msgs = consumer.consume(num_messages=5000, timeout=0.2)
        if start is None and msgs:
            start = _mark()
        for m in msgs:
            json.loads(m.value())  # type: ignore[arg-type]
        seen += len(msgs)
    end = _mark()
    consumer.close()
    assert start is not None, "the ceiling consumer never received a record"
    return Row(name, seen, end[0] - start[0], end[1] - start[1])


# ----------------------------------------------------------------------------- daemon
@contextlib.contextmanager
def json_decoder(decoder: str) -> Iterator[None]:
    """Run the daemon's decoder as shipped (``orjson``) or with stdlib ``json.loads`` only."""
    from monitor.core import records

    saved = records._loads, records._parse_all
    if decoder == "json":
        vars(records).update(
            _loads=json.loads,
            _parse_all=lambda recs: records._Parsed(records._parse(r.value) for r in recs),
        )
    try:
        yield
    finally:
        vars(records).update(_loads=saved[0], _parse_all=saved[1])


class _CountingSource:
    """Wraps the daemon's source: counts scored records, stops the loop at ``target``."""

    def __init__(self, inner: Any, scored: str, run: _DaemonRun) -> None:
        self._inner = inner
        self._scored = scored
        self._run = run

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        out: list[RawRecord] = self._inner.poll(max_records, timeout_s)
        if out:
            # C-level passes: this harness's CPU is charged to the daemon
            n = list(map(itemgetter(0), out)).count(self._scored)
            self._run.on_records(n)
            if n == len(out):
                self._run.polls.append((time.time(), max(map(itemgetter(2), out))))
            elif n:
                last = max(r.offset for r in out if r.topic == self._scored)
                self._run.polls.append((time.time(), last))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _DaemonRun:
    """The real daemon loop in this process until ``target`` scored records were consumed."""

    def __init__(self, config: Config, target: int, log_path: Path) -> None:
        from monitor.daemon import Daemon, _alert_hook, kafka_connect, tune_gc
        from monitor.io.exporter import Exporter
        from monitor.io.store import Store
        from monitor.logs import setup_logging
        from monitor.runtime.engine import Engine

        setup_logging("INFO")
        self._log_file = log_path.open("a")
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(self._log_file)
        self.config = config
        self.target = target
        self.seen = 0
        self.polls: list[tuple[float, int]] = []  # (wall time, last scored offset) per poll
        self.start: tuple[float, float] | None = None
        self.end: tuple[float, float] | None = None
        self.stop = threading.Event()
        self.store = Store(config.data_dir)
        exporter = Exporter(config)
        self.engine = Engine(
            config, self.store, exporter, on_snapshot=[_alert_hook(config, self.store, exporter)]
        )
        real_connect = kafka_connect(config)
        self.sources: list[Any] = []
        self.is_assigned = False

        def connect(stored: Callable[[], Mapping[tuple[str, int], int]]) -> tuple[Any, Any]:
            source, sink = real_connect(stored)
            wrapped = _CountingSource(source, config.kafka.topics.scored, self)
            self.sources.append(wrapped)
            return wrapped, sink

        real_step = self.engine.step

        def step(source: Any, sink: Any) -> int:
            n = real_step(source, sink)
            # read here, in the loop's thread: a librdkafka consumer is not for sharing
            self.is_assigned = bool(source.assigned())
            if self.seen >= self.target and self.end is None:
                self.end = _mark()
                self.stop.set()
            return n

        self.engine.step = step  # type: ignore[method-assign]
        self.daemon = Daemon(self.engine, connect, self.stop)
        tune_gc()  # as ``monitor run`` does after start-up

    def on_records(self, n: int) -> None:
        if self.start is None and n:
            self.start = _mark()
        self.seen += n

    def assigned(self) -> bool:
        return self.is_assigned

    def run(self, timeout_s: float = 900.0) -> None:
        timer = threading.Timer(timeout_s, self.stop.set)
        timer.daemon = True
        timer.start()
        try:
            self.daemon.run()
        finally:
            timer.cancel()
            self.final_offsets = self.store.offsets()
            self.store.close()
            logging.getLogger().handlers[:] = []
            self._log_file.close()

    def row(self, name: str) -> Row:
        if self.start is None or self.end is None:
            msg = f"the daemon consumed {self.seen} of {self.target} records"
            raise RuntimeError(msg)
        return Row(name, self.seen, self.end[0] - self.start[0], self.end[1] - self.start[1])


def run_daemon(
    bootstrap: str, scored: str, n: int, variant: tuple[str, int | None, str], work: Path
) -> tuple[Row, int]:
    """The daemon over the shared scored topic (its own requests/labels topics and group)."""
    decoder, max_poll, library = variant
    tag = f"d{decoder}-{uuid.uuid4().hex[:6]}"
    topics = create_topics(bootstrap, tag, scored=scored)
    per_hour = n / (SPAN_S / 3600)
    config = daemon_config(
        bootstrap, topics, work / tag, per_hour, max_poll_records=max_poll, library=library
    )
    with json_decoder(decoder):
        run = _DaemonRun(config, n, work / f"{tag}.log")
        run.run()
    requests = count_topic(bootstrap, topics.requests)
    stored = run.final_offsets.get((scored, 0))
    if stored != n:
        print(f"warning: the daemon's stored offset is {stored}, not {n}", flush=True)
    name = f"daemon {decoder}, max_poll_records {config.kafka.max_poll_records}"
    if library != "kafka-python":
        name += f", {library}"
    return run.row(name), requests


def count_topic(bootstrap: str, topic: str) -> int:
    """Records in partition 0 of ``topic``, counted by reading them.

    Not the end offset: Tansu reports the base offset of the last batch as the end offset.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen = 0
        while True:
            polled = consumer.poll(timeout_ms=1000, max_records=5000)
            if not polled:
                return seen
            seen += sum(len(recs) for recs in polled.values())
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- latency
def pace(bootstrap: str, topic: str, rate: float, seconds: float) -> int:
    """Produce ``rate`` records per second for ``seconds``; each ``ts`` = its Kafka timestamp.

    With confluent-kafka (librdkafka): a kafka-python producer on these 2 shared cores fell
    behind at half the consumer ceiling's rate, and its backlog then counted as latency.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 2})
    total = int(rate * seconds)
    sent = 0
    t0 = time.time()
    rng = np.random.default_rng(7)
    seg = rng.integers(0, len(SEGMENTS), total).tolist()
    score = rng.beta(2.0, 5.0, total).tolist()
    while sent < total:
        now = time.time()
        due = min(total, int((now - t0) * rate) + 1)
        ts_ms = round(now * 1000)
        ts = ts_ms / 1000.0
        for i in range(sent, due):
            s = score[i]
            value = (
                f'{{"id":"lat-{i:010d}","score":{s!r},"pred":{int(s >= 0.5)},'
                f'"ts":{ts:.3f},"model":"default","segment":"{SEGMENTS[seg[i]]}",'
                f'"payload":{{"f":{i % 100_000}}}}}'
            ).encode()
            producer.produce(topic, value=value, partition=0, timestamp=ts_ms)
        sent = due
        producer.poll(0)  # serve delivery reports, keep the local queue short
        time.sleep(0.002)
    producer.flush(60)
    return sent


def run_latency(
    bootstrap: str, rate: float, seconds: float, work: Path, library: str = "kafka-python"
) -> tuple[Row, list[float], list[float], float]:
    """Daemon at a paced ``rate``: request produce time minus record produce time (ms).

    Also (second list) request produce time minus the time the daemon polled the record:
    the daemon's share, without the producer's and the broker's queueing.
    """
    from kafka import KafkaConsumer, TopicPartition

    topics = create_topics(bootstrap, f"lat-{uuid.uuid4().hex[:6]}")
    total = int(rate * seconds)
    config = daemon_config(
        bootstrap, topics, work / f"latency-{library}", rate * 3600, library=library
    )
    run = _DaemonRun(config, total, work / f"latency-{library}.log")
    produced: list[float] = []

    def producer() -> None:
        deadline = time.monotonic() + 60
        while not run.assigned() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        pacer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.throughput",
                "--pace",
                bootstrap,
                topics.scored,
                str(rate),
                str(seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = pacer.communicate(timeout=seconds * 3 + 120)
        produced.append(float(out.split()[1]))

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    run.run(timeout_s=seconds * 3 + 120)  # the daemon loop in this (main) thread
    thread.join(timeout=seconds * 3 + 120)
    produced_s = produced[0] if produced else float("nan")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    tp = TopicPartition(topics.requests, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    lat: list[float] = []
    inside: list[float] = []
    last_offsets = [off for _, off in run.polls]
    while True:
        polled = consumer.poll(timeout_ms=1000)
        if not polled:
            break
        for recs in polled.values():
            for r in recs:
                req = json.loads(r.value)
                lat.append(r.timestamp - round(req["ts"] * 1000))
                # record "lat-i" is at offset i of the fresh topic: when did the daemon poll it?
                j = bisect.bisect_left(last_offsets, int(req["id"][4:]))
                if j < len(run.polls):
                    inside.append(r.timestamp - run.polls[j][0] * 1000)
    consumer.close()
    return run.row("daemon at paced rate"), lat, inside, total / produced_s


# ----------------------------------------------------------------------------- memory
class SyntheticSource:
    """An endless in-memory scored topic: fresh ids, event time advancing ``per_hour``/hour."""

    def __init__(self, topic: str, per_hour: float) -> None:
        self.topic = topic
        self.per_hour = per_hour
        self.next = 0
        self.rng = np.random.default_rng(3)

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        lo = self.next
        ts = BASE_TS + 3600.0 * np.arange(lo, lo + max_records, dtype=np.float64) / self.per_hour
        values = scored_values(lo, max_records, ts)
        self.next += max_records
        ms = np.rint(ts * 1000).astype(np.int64).tolist()
        t = self.topic
        return [
            RawRecord(t, 0, lo + i, m, None, v)
            for i, (m, v) in enumerate(zip(ms, values, strict=True))
        ]

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        pass

    def seek(self, offsets: Mapping[tuple[str, int], int]) -> None:
        pass

    def committed(self) -> dict[tuple[str, int], int]:
        return {}

    def lag(self) -> dict[tuple[str, int], int]:
        return {(self.topic, 0): 0}

    def skipped(self) -> dict[tuple[str, int], int]:
        return {}

    def assigned(self) -> bool:
        return True

    def caught_up(self, topics: Any) -> bool:
        return True

    def assignment(self) -> list[tuple[str, int]]:
        return [(self.topic, 0)]

    def partitions_for(self, topic: str) -> int:
        return 1

    def probe(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class NullSink:
    """Discards what the daemon produces (counts it)."""

    def __init__(self) -> None:
        self.produced = 0

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        *,
        fallback: bytes | None = None,
    ) -> None:
        self.produced += 1

    def fallbacks(self) -> int:
        return 0

    def flush(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB: ``VmRSS`` and ``VmHWM``.

    Not ``ru_maxrss``: Linux carries it across ``exec``, so a child would report the peak of
    the (larger) parent it was forked from.
    """
    found: dict[str, float] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(rest.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def memory_child(checkpoints: list[int], per_hour: float) -> list[dict[str, float]]:
    """Run ``Engine.step`` over the synthetic source; RSS at start-up and each checkpoint."""
    from monitor.daemon import _alert_hook, tune_gc
    from monitor.io.exporter import Exporter
    from monitor.io.store import Store
    from monitor.runtime.engine import Engine

    out: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        topics = TopicsConfig(scored="predictions")
        config = daemon_config("127.0.0.1:9", topics, Path(tmp), records_per_hour=per_hour)
        store = Store(config.data_dir)
        exporter = Exporter(config)
        engine = Engine(config, store, exporter, on_snapshot=[_alert_hook(config, store, exporter)])
        source = SyntheticSource(topics.scored, per_hour)
        sink = NullSink()
        tune_gc()
        cur, peak = rss_mb()
        out.append({"records": 0, "rss": cur, "peak": peak, "cpu": time.process_time()})
        t0 = _mark()
        for target in checkpoints:
            while source.next < target:
                engine.step(source, sink)
            cur, peak = rss_mb()
            t = _mark()
            out.append(
                {
                    "records": source.next,
                    "rss": cur,
                    "peak": peak,
                    "cpu": t[1] - t0[1],
                    "wall": t[0] - t0[0],
                    "requests": sink.produced,
                    "db_mb": (config.data_dir / "monitor.sqlite").stat().st_size / 1e6,
                }
            )
        store.close()
    return out


def run_memory(checkpoints: list[int]) -> list[dict[str, float]]:
    """The memory phase in a fresh interpreter."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.throughput",
            "--memory-child",
            ",".join(str(c) for c in checkpoints),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        msg = f"memory phase failed:\n{proc.stderr[-3000:]}"
        raise RuntimeError(msg)
    result: list[dict[str, float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# ----------------------------------------------------------------------------- report
def print_rows(rows: list[Row], ceiling: Row) -> None:
    head = (
        f"{'path':<40} {'records':>9} {'wall s':>7} {'rec/s':>9} {'CPU s':>7} "
        f"{'CPU s/1M':>9} {'rec/CPU-s':>10} {'rate vs ceiling':>16}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.name:<40} {r.records:>9} {r.wall_s:>7.2f} {r.rate:>9.0f} {r.cpu_s:>7.2f} "
            f"{r.cpu_per_million:>9.2f} {r.per_cpu:>10.0f} {r.rate / ceiling.rate:>15.0%}"
            + (f"  {r.note}" if r.note else "")
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="200k records, short phases")
    parser.add_argument(
        "--variants",
        default="json:500,orjson:500,json,orjson,orjson@confluent-kafka",
        help="daemon runs: DECODER[:MAX_POLL_RECORDS][@LIBRARY],... (json or orjson; "
        "kafka-python or confluent-kafka; default config otherwise)",
    )
    parser.add_argument(
        "--latency-clients",
        default="kafka-python,confluent-kafka",
        help="client libraries of the latency phase",
    )
    parser.add_argument(
        "--rate-fractions",
        default="0.5,0.25",
        help="paced rates for the latency phase, as fractions of the ceiling's rate",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=15.0, help="0 skips the latency phase"
    )
    parser.add_argument(
        "--brokers",
        default="tansu",
        help="tansu, kafka or both (comma-separated); on Apache Kafka a kafka-python daemon "
        "run of 200k records has stalled mid-topic in kafka-python's fetcher "
        "(benchmarks/README.md)",
    )
    parser.add_argument("--memory", action="store_true", help="only the memory phase")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory phase")
    parser.add_argument("--memory-records", default="1000000,5000000")
    parser.add_argument("--pace", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.latency_seconds < 0:
        parser.error(f"--latency-seconds must be >= 0, got {args.latency_seconds}")
    if args.pace:
        bootstrap, topic, rate, seconds = args.pace
        started = time.perf_counter()
        sent = pace(bootstrap, topic, float(rate), float(seconds))
        print(sent, time.perf_counter() - started)
        return 0
    if args.memory_child:
        checkpoints = [int(c) for c in args.memory_child.split(",")]
        print(json.dumps(memory_child(checkpoints, per_hour=12_500.0)))
        return 0
    if args.quick:
        args.records = min(args.records, 200_000)
        args.latency_seconds = min(args.latency_seconds, 5.0)
        if args.memory_records == "1000000,5000000":
            args.memory_records = "200000,1000000"
    checkpoints = [int(c) for c in args.memory_records.split(",")]
    if not args.memory:
        for kind in args.brokers.split(","):
            if kind not in BROKERS:
                parser.error(f"--brokers: unknown broker {kind!r}; use {', '.join(BROKERS)}")
        for kind in args.brokers.split(","):
            run_kafka_phases(args, kind)
    if args.memory or not args.no_memory:
        print_memory(run_memory(checkpoints))
    return 0


BROKERS = {"tansu": "Tansu 0.6.0", "kafka": f"Apache Kafka {KAFKA_VERSION}"}


def new_broker(kind: str) -> EmbeddedBroker | KafkaBroker:
    """A broker of ``kind`` on 127.0.0.1 (a context manager that starts and stops it)."""
    return KafkaBroker() if kind == "kafka" else EmbeddedBroker()


def run_kafka_phases(args: argparse.Namespace, kind: str) -> None:
    from monitor.io import kafka_io

    fetch = getattr(kafka_io, "FETCH_OPTIONS", {"max_poll_records": 500})
    n = int(args.records)
    variants: list[tuple[str, int | None, str]] = []
    for item in args.variants.split(","):
        spec, _, library = item.partition("@")
        dec, _, mpr = spec.partition(":")
        variants.append((dec, int(mpr) if mpr else None, library or "kafka-python"))
    with tempfile.TemporaryDirectory() as tmp, new_broker(kind) as broker:
        work = Path(tmp)
        bootstrap = broker.bootstrap
        shared = create_topics(bootstrap, f"tp-{uuid.uuid4().hex[:6]}")
        produce_s = produce_topic(bootstrap, shared.scored, n)
        print(f"produced {n} records in {produce_s:.1f} s ({n / produce_s:.0f}/s)", flush=True)
        ceiling = run_ceiling(
            bootstrap,
            shared.scored,
            n,
            decoder="json",
            fetch={"max_poll_records": 500},
            name="ceiling json.loads (defaults)",
        )
        rows = [ceiling]
        for decoder in ("json", "orjson"):
            rows.append(
                run_ceiling(
                    bootstrap,
                    shared.scored,
                    n,
                    decoder=decoder,
                    fetch={**fetch, "max_poll_records": 5000},
                    name=f"ceiling {decoder} (daemon fetch)",
                )
            )
        rows.append(
            run_ceiling_confluent(
                bootstrap, shared.scored, n, name="ceiling json.loads (confluent-kafka)"
            )
        )
        for variant in variants:
            row, requests = run_daemon(bootstrap, shared.scored, n, variant, work)
            row.note = f"{requests} requests"
            rows.append(row)
        best = next(r for r in reversed(rows) if "confluent" not in r.name)
        latencies: list[str] = []
        paced_runs = itertools.product(
            args.latency_clients.split(","), (float(f) for f in args.rate_fractions.split(","))
        )
        for library, fraction in paced_runs if args.latency_seconds > 0 else ():
            rate = fraction * ceiling.rate
            paced, lat, inside, produced_rate = run_latency(
                bootstrap, rate, args.latency_seconds, work, library
            )
            paced.name = f"daemon at {fraction:.0%} of the ceiling rate, {library}"
            paced.note = f"target {rate:.0f}/s, produced {produced_rate:.0f}/s"
            rows.append(paced)
            if lat:
                arr = np.array(lat, dtype=np.float64)
                latencies.append(
                    f"{library}: record-to-request latency at {fraction:.0%} of the ceiling "
                    f"({rate:.0f} records/s for {args.latency_seconds:.0f} s): {len(arr)} "
                    f"requests, median {np.median(arr):.0f} ms, "
                    f"p99 {np.percentile(arr, 99):.0f} ms, max {arr.max():.0f} ms"
                )
                poll = np.array(inside or [np.nan], dtype=np.float64)
                latencies.append(
                    f"  of which poll-to-request (inside the daemon): median "
                    f"{np.median(poll):.0f} ms, p99 {np.percentile(poll, 99):.0f} ms, "
                    f"max {poll.max():.0f} ms"
                )
            else:
                latencies.append(f"record-to-request latency at {fraction:.0%}: no request")
    print()
    print(
        f"Throughput on {BROKERS[kind]}, {n} scored records of ~135 bytes, one partition "
        "(ceiling = first row):"
    )
    print_rows(rows, ceiling)
    print(
        f"\n{best.name} / ceiling json.loads (defaults): {best.rate / ceiling.rate:.0%}"
        f" of the rate, {best.per_cpu / ceiling.per_cpu:.0%} of the records per CPU-second"
    )
    print("\n".join(latencies))


def print_memory(points: list[dict[str, float]]) -> None:
    print()
    print(
        "Memory: Engine.step (store, metrics, alert hook) over an in-memory synthetic source "
        "(fresh ids, 12.5k records per event hour), requests discarded:"
    )
    head = (
        f"{'records':>9} {'RSS MB':>7} {'peak RSS MB':>12} {'CPU s':>7} {'rec/CPU-s':>10} "
        f"{'requests':>9} {'store MB':>9}"
    )
    print(head)
    print("-" * len(head))
    for p in points:
        per_cpu = p["records"] / p["cpu"] if p.get("records") else float("nan")
        print(
            f"{int(p['records']):>9} {p['rss']:>7.1f} {p['peak']:>12.1f} "
            f"{p.get('cpu', 0.0) if p['records'] else 0.0:>7.1f} {per_cpu:>10.0f} "
            f"{int(p.get('requests', 0)):>9} {p.get('db_mb', 0.0):>9.1f}"
        )
    if len(points) >= 3:
        growth = points[-1]["rss"] - points[1]["rss"]
        print(
            f"RSS growth {int(points[1]['records'])} -> {int(points[-1]['records'])} records: "
            f"{growth:+.1f} MB"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
