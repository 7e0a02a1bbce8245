"""``monitor run`` as a subprocess against real brokers: Apache Kafka and Tansu.

The expected requests are predicted in-process by the same engine over in-memory fakes: the
daemon must produce exactly those bytes, and labels for them can be produced before the daemon
starts (they wait, parked, for their requests). Test-only consumer timeouts (session 2 s,
heartbeat 0.5 s) go through ``kafka.client``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry

from monitor.config.load import load_config
from monitor.config.schema import Config, TopicsConfig
from monitor.core.estimator import EstimatorService
from monitor.free_ports import free_port
from monitor.io.exporter import Exporter
from monitor.io.kafka_io import read_topic
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.sim.workload import Workload, WorkloadSpec, generate, truth_of
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource
from tests.conftest import Broker

# seconds each: on both brokers (the longer integration tests run on Apache Kafka only)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.brokers("tansu", "kafka"),
    pytest.mark.timeout(180),
]

HOURS = 10
LABELS_PER_HOUR = 40.0
BUDGET_TOLERANCE = 0.15  # total requests within +/-15% of labels_per_hour x hours


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(WorkloadSpec(n=24_000, hours=float(HOURS), seed=11))


def _yaml(
    broker: Broker,
    topics: TopicsConfig,
    data_dir: Path,
    group: str,
    library: str = "kafka-python",
    *,
    max_poll_records: int | None = None,
    labels_per_hour: float = LABELS_PER_HOUR,
    records_per_hour: float = 2400,
    refresh_records: int | None = None,
    recalibrate: bool = False,
    keep_scores: bool = True,
    extra: str = "",
    client: Mapping[str, str] | None = None,
) -> str:
    """A daemon configuration for tests (fast group joins); ``extra`` is appended YAML.

    ``client`` adds ``kafka.client`` keys, each value YAML as written (``{env: NAME}``).

    ``recalibrate`` is off unless asked for: these tests compare a run with a reference run
    whose labels arrive at other times, and a map fitted from labels makes later decisions
    depend on that timing. The map's own replay guarantees are tested with it on
    (``test_faults_crash_recalibration_kafka``, ``test_scale_out``), which follow map changes
    and so set ``keep_scores`` False (``keep_calibrated_scores: false``: a map at every refit).
    """
    mpr = "" if max_poll_records is None else f"\n  max_poll_records: {max_poll_records}"
    refresh = "" if refresh_records is None else f"\n    refresh_records: {refresh_records}"
    more = "".join(f"\n    {k}: {v}" for k, v in (client or {}).items())
    return f"""
kafka:
  bootstrap_servers: ["{broker.bootstrap}"]
  group_id: {group}
  client_library: {library}
  topics:
    scored: {topics.scored}
    requests: {topics.requests}
    labels: {topics.labels}
    deadletter: {topics.deadletter}
    aggregates: {topics.aggregates}
  poll_timeout_ms: 200{mpr}
  client:
    session_timeout_ms: 2000
    heartbeat_interval_ms: 500{more}
metrics:
  port: {free_port()}
storage:
  data_dir: {data_dir}
labels:
  park_grace_s: 3
models:
  default:
    labels_per_hour: {labels_per_hour}
    expected_records_per_hour: {records_per_hour}{refresh}
    recalibrate: {str(recalibrate).lower()}
    keep_calibrated_scores: {str(keep_scores).lower()}
{extra}"""


@dataclass
class Run:
    """One daemon deployment: its config file, data dir and group."""

    config_path: Path
    config: Config
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    args: tuple[str, ...] = ()  # more ``monitor run`` flags

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        command = ["monitor", "run", "--config", str(self.config_path), *self.args]
        with self.log_path.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *command],
                stderr=err,
                stdout=subprocess.DEVNULL,
                env=env,
            )

    def offsets(self) -> dict[tuple[str, int], int]:
        db_path = self.config.data_dir / "monitor.sqlite"
        if not db_path.exists():
            return {}
        try:
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
                rows = db.execute("SELECT topic, partition, next_offset FROM offsets").fetchall()
        except sqlite3.Error:
            return {}
        return {(t, int(p)): int(o) for t, p, o in rows}

    def wait_offsets(self, want: dict[tuple[str, int], int], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.offsets()
            if all(got.get(k, 0) >= v for k, v in want.items()):
                return
            assert self.proc is not None and self.proc.poll() is None, self.log_tail()
            time.sleep(0.1)
        msg = f"offsets {self.offsets()} never reached {want}\n{self.log_tail()}"
        raise AssertionError(msg)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> tuple[int, float]:
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout_s)
        return code, time.monotonic() - t0

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def events(self, name: str) -> list[dict[str, object]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            if f'"event": "{name}"' in line:
                out.append(json.loads(line))
        return out

    def snapshot_repr(self) -> str:
        store = Store(self.config.data_dir)
        try:
            st = store.load()
        finally:
            store.close()
        est = EstimatorService(
            self.config,
            traffic=st.segment_traffic,
            requests=st.requests,
            parked=st.parked,
            watermarks=st.watermarks,
        )
        return repr(est.snapshot().windows)


@pytest.fixture
def deploy(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    tmp_path: Path,
    client_library: str,
) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def _deploy(
        topics: TopicsConfig | None = None,
        name: str = "a",
        *,
        recalibrate: bool = False,
        keep_scores: bool = True,
    ) -> Run:
        topics = topics or make_topics()
        data_dir = tmp_path / f"data-{name}"
        path = tmp_path / f"{name}.yaml"
        group = f"g-{uuid.uuid4().hex[:8]}"
        text = _yaml(
            broker,
            topics,
            data_dir,
            group,
            client_library,
            recalibrate=recalibrate,
            keep_scores=keep_scores,
        )
        path.write_text(text)
        run = Run(path, load_config(path), tmp_path / f"{name}.log")
        runs.append(run)
        return run

    yield _deploy
    for run in runs:
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def _produce(broker: Broker, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    for v in values:
        producer.send(topic, v)
    producer.flush()
    producer.close()


def _read(broker: Broker, topic: str, n: int, timeout_s: float = 30.0) -> list[bytes]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
    )
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                out.extend(r.value for r in recs)
    finally:
        consumer.close()
    return out


def _read_all(config: Config, topic: str) -> list[bytes]:
    """Every record value of ``topic``, read to the broker's end offsets."""
    return [v for _, _, v in read_topic(config, topic, range) if v is not None]


def _scored(w: Workload) -> list[bytes]:
    return [json.dumps(r).encode() for r in w.records()]


def _predict(
    config: Config, w: Workload, tmp_path: Path, registry: CollectorRegistry | None = None
) -> tuple[list[bytes], str]:
    """The requests (in order) and final estimates the engine gives over in-memory fakes.

    ``registry`` receives the engine's metrics, the final estimates published.
    """
    topics = config.kafka.topics
    log = FakeLog()
    for t in (topics.scored, topics.requests, topics.labels, topics.deadletter):
        log.create(t)
    for v in _scored(w):
        log.append(topics.scored, v)
    store = Store(tmp_path / "predicted")
    engine = Engine(config, store, Exporter(config, registry or CollectorRegistry()))
    source = FakeSource(log, [topics.scored, topics.requests, topics.labels], store.offsets)
    sink = FakeSink(log)
    while engine.step(source, sink):
        pass
    requests = [v for _, v in log.records(topics.requests)]
    for v in _labels(w, requests):
        log.append(topics.labels, v)
    while engine.step(source, sink):
        pass
    snapshot = engine.estimator.snapshot()
    engine.metrics.publish(snapshot)
    store.close()
    return requests, repr(snapshot.windows)


def _labels(w: Workload, requests: list[bytes]) -> list[bytes]:
    truth = dict(w.truth_rows())
    out = []
    for v in requests:
        req = json.loads(v)
        out.append(
            json.dumps({"request_id": req["request_id"], "label": truth[req["id"]]}).encode()
        )
    return out


def _answer_and_stop(
    run: Run, broker: Broker, w: Workload, expected: list[bytes], timeout_s: float = 60.0
) -> list[bytes]:
    """Once the daemon has read all of ``w``: answer ``expected`` from the truth, wait until the
    labels are read, stop it (SIGTERM, exit 0); every request written, repeats included."""
    topics = run.config.kafka.topics
    run.wait_offsets({(topics.scored, 0): len(w)}, timeout_s)
    labels = _labels(w, expected)
    _produce(broker, topics.labels, labels)
    run.wait_offsets({(topics.labels, 0): len(labels)}, 60)
    requests = _read_all(run.config, topics.requests)
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    return requests


def _scrape(run: Run, *lines: str, pattern: str = "", timeout_s: float = 10.0) -> str:
    """The /metrics text once it holds every one of ``lines`` and matches ``pattern``.

    The counters of a batch are updated after its offsets are committed (and after the refit
    its labels trigger), so a test that saw the offsets still waits for the counters; the
    estimates come with the snapshot the batch publishes, later still (``pattern``).
    """
    url = f"http://127.0.0.1:{run.config.metrics.port}/metrics"
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = bytes(resp.read()).decode()
        if all(line in text for line in lines) and re.search(pattern, text):
            return text
        time.sleep(0.2)
    raise AssertionError(text[-3000:])


@pytest.mark.parametrize("client_library", ["kafka-python", "confluent-kafka"])
def test_replay_with_auditor_bad_input_budget_and_sigterm(
    broker: Broker,
    deploy: Callable[..., Run],
    workload: Workload,
    tmp_path: Path,
    promtool: Path,
) -> None:
    run = deploy(name="main")
    topics = run.config.kafka.topics
    expected, predicted = _predict(run.config, workload, tmp_path)
    bad_scored = [b'{"id": "bad-1", "score": ', b'{"id": "bad-2", "score": "high"}']
    _produce(broker, topics.scored, _scored(workload) + bad_scored)
    run.start()
    n_scored = len(workload) + len(bad_scored)
    run.wait_offsets({(topics.scored, 0): n_scored})
    # the auditor answers every request from the truth, then sends three bad labels
    requests = _read(broker, topics.requests, len(expected))
    assert requests == expected  # byte-identical to the in-process prediction, same order
    labels = _labels(workload, requests)
    first = json.loads(labels[0])
    dup = json.dumps(first).encode()
    conflict = json.dumps({**first, "label": 1 - first["label"]}).encode()
    unknown = json.dumps({"request_id": "f" * 32, "label": 1}).encode()
    _produce(broker, topics.labels, [*labels, dup, conflict, unknown])
    run.wait_offsets({(topics.labels, 0): len(labels) + 3})
    dead = [json.loads(v) for v in _read(broker, topics.deadletter, 5)]
    reasons = sorted(d["reason"] for d in dead)
    assert reasons == sorted(
        ["malformed_json", "bad_type", "duplicate_label", "conflicting_label", "unknown_request"]
    ), reasons
    assert {d["topic"] for d in dead} == {topics.scored, topics.labels}

    # the daemon's own /metrics: valid exposition, counters and estimates as expected
    f_24h = r'monitor_f_measure\{[^}]*window="24h"[^}]*\} 0\.\d+'
    text = _scrape(
        run,
        f'monitor_labels_received_total{{model="default"}} {float(len(labels))}',
        'monitor_invalid_records_total{input="labels",reason="unknown_request"} 1.0',
        pattern=f_24h,
    )
    check = subprocess.run(
        [str(promtool), "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f'monitor_records_total{{model="default"}} {float(len(workload))}' in text
    assert "_created" not in text  # no timestamp twin per counter and histogram series

    code, took = run.stop(signal.SIGTERM)
    assert code == 0 and took < 10.0, run.log_tail()
    # (f) Kafka's committed offsets == the store's == last processed offset + 1
    stored = run.offsets()
    last: dict[str, int] = {}
    for e in run.events("batches_processed"):  # the last one is logged at shutdown
        for tp, off in dict(e["offsets"]).items():  # type: ignore[call-overload]
            last[tp] = max(last.get(tp, 0), int(off))
    probe = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=run.config.kafka.group_id,
        enable_auto_commit=False,
    )
    try:
        committed = {tp: probe.committed(TopicPartition(*tp)) for tp in stored}
    finally:
        probe.close(autocommit=False)
    assert committed == stored
    assert {f"{t}/{p}": o for (t, p), o in stored.items()} == last
    assert stored[(topics.scored, 0)] == n_scored

    # (c) bad input changed no estimate: equal to the engine's run without any of it
    assert run.snapshot_repr() == predicted
    # (b) the label budget
    spent = len(requests)
    assert abs(spent - LABELS_PER_HOUR * HOURS) <= BUDGET_TOLERANCE * LABELS_PER_HOUR * HOURS
    # (a) the interval of the whole-stream window contains the true F
    store = Store(run.config.data_dir)
    st = store.load()
    store.close()
    est = EstimatorService(
        run.config, traffic=st.segment_traffic, requests=st.requests, watermarks=st.watermarks
    )
    row = next(x for x in est.snapshot().windows if x.window == "24h" and x.segment == "")
    truth = truth_of(workload.pred, workload.label, 0.5)
    assert row.records == len(workload) and row.labels == spent
    print(f"F={row.f.value:.3f} [{row.f.lower:.3f}, {row.f.upper:.3f}] true={truth.f:.3f}")
    print(f"requests={spent} budget={LABELS_PER_HOUR * HOURS:.0f}")
    assert row.f.lower <= truth.f <= row.f.upper, (row.f, truth.f)
    assert np.isfinite(row.f.value)


def test_sigkill_mid_replay_then_restart_equals_uninterrupted_run(
    broker: Broker, deploy: Callable[..., Run], workload: Workload, tmp_path: Path
) -> None:
    clean = deploy(name="clean")
    crashy = deploy(name="crashy")
    expected, predicted = _predict(clean.config, workload, tmp_path)
    labels = _labels(workload, expected)  # answered ahead: they park until their request
    for run in (clean, crashy):
        t = run.config.kafka.topics
        _produce(broker, t.scored, _scored(workload))
        _produce(broker, t.labels, labels)
    want = {
        (clean.config.kafka.topics.scored, 0): len(workload),
        (clean.config.kafka.topics.labels, 0): len(labels),
    }
    clean.start()
    crashy.start()
    t_c = crashy.config.kafka.topics
    # kill -9 once the replay is well under way, restart on the same data dir and group
    deadline = time.monotonic() + 60
    while crashy.offsets().get((t_c.scored, 0), 0) < len(workload) // 4:
        assert time.monotonic() < deadline, crashy.log_tail()
        time.sleep(0.02)
    code, _ = crashy.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    killed_at = crashy.offsets().get((t_c.scored, 0), 0)
    assert killed_at < len(workload), "the kill came too late to test anything"
    crashy.start()
    clean.wait_offsets(want)
    crashy.wait_offsets({(t_c.scored, 0): len(workload), (t_c.labels, 0): len(labels)})
    # (e) a fresh run over the same stream: byte-identical requests, in order
    got_clean = _read(broker, clean.config.kafka.topics.requests, len(expected))
    assert got_clean == expected
    # (d) the crashed-and-restarted run: same request set (replays repeat identical bytes)
    got_crashy = _read(broker, t_c.requests, len(expected), timeout_s=10)
    assert set(got_crashy) == set(expected)
    for run in (clean, crashy):
        code, _ = run.stop()
        assert code == 0, run.log_tail()
    assert clean.snapshot_repr() == crashy.snapshot_repr() == predicted
    assert re.search(r"\d", predicted)
