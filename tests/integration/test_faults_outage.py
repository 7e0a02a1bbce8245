"""Broker outage: the daemon is cut off from the broker for 30 s in the middle of a replay.

A dedicated broker (Apache Kafka; Tansu too with ``MONITOR_TEST_BROKERS``) advertises the port of
a loopback TCP proxy (``tests/proxy.py``), so every connection of every client goes through the
proxy. ``cut()`` resets the live connections and
refuses new ones. During the cut the daemon must stay up, idle (CPU time read from
``/proc/PID/stat``), report not ready on ``/readyz`` and log the state change once; after it,
be ready again and catch up: requests and estimates equal the engine's uninterrupted run.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.errors import MonitorError
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.kafka_broker import KafkaBroker
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import broker_kinds, missing_component
from tests.integration.test_daemon_kafka import (
    Run,
    _answer_and_stop,
    _predict,
    _produce,
    _scored,
    _yaml,
)
from tests.proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OUTAGE_S = 30.0
NOTICE_S = 8.0  # probe every 2 s with a 2 s timeout, plus a backoff step
MAX_CPU_SHARE = 0.15  # of one core, averaged over the outage


# Apache Kafka shows every behaviour Tansu does here; Tansu's run adds ~45 s and no coverage
OUTAGE_BROKERS = broker_kinds(pytest.mark.brokers("kafka").mark)


@pytest.fixture(scope="module", params=OUTAGE_BROKERS)
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EmbeddedBroker | KafkaBroker, TcpProxy]]:
    """A broker reachable only through a proxy: it advertises the proxy's port."""
    proxy_port = free_port()
    home = tmp_path_factory.mktemp(f"{request.param}-proxied")
    broker: EmbeddedBroker | KafkaBroker
    if request.param == "kafka":
        broker = KafkaBroker(
            log_path=home / "kafka.log", advertised_port=proxy_port, data_dir=home / "data"
        )
    else:
        broker = EmbeddedBroker(log_path=home / "tansu.log", advertised_port=proxy_port)
    try:
        broker.start()
    except MonitorError as exc:
        missing_component(f"{request.param} broker: {exc}")
    proxy = TcpProxy(broker.port, proxy_port).start()
    yield broker, proxy
    proxy.stop()
    broker.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_thirty_second_outage_mid_stream(
    proxied: tuple[EmbeddedBroker | KafkaBroker, TcpProxy], tmp_path: Path
) -> None:
    broker, proxy = proxied
    tag = uuid.uuid4().hex[:8]
    topics = TopicsConfig(f"p-{tag}", f"r-{tag}", f"l-{tag}", f"d-{tag}")
    names = (topics.scored, topics.requests, topics.labels, topics.deadletter)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(t, 1, 1) for t in names])
    admin.close()
    path = tmp_path / "outage.yaml"
    path.write_text(_yaml(broker, topics, tmp_path / "data", f"g-{tag}", max_poll_records=50))
    run = Run(path, load_config(path), tmp_path / "outage.log")
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=8000, hours=8.0, seed=21))
    expected, predicted = _predict(run.config, w, tmp_path)
    _produce(broker, topics.scored, _scored(w))
    run.start()
    assert run.proc is not None
    run.wait_offsets({(topics.scored, 0): len(w) // 5})

    proxy.cut()
    cut_at = time.monotonic()
    offset_at_cut = run.offsets().get((topics.scored, 0), 0)
    assert offset_at_cut < len(w), "the stream was done before the cut"
    time.sleep(NOTICE_S)
    cpu0, t0 = _cpu_seconds(run.proc.pid), time.monotonic()
    statuses: list[int] = []
    while time.monotonic() - cut_at < OUTAGE_S:
        statuses.append(_readyz(port))
        assert run.proc.poll() is None, run.log_tail()  # it does not exit
        time.sleep(1.0)
    cpu_share = (_cpu_seconds(run.proc.pid) - cpu0) / (time.monotonic() - t0)
    proxy.restore()
    restored_at = time.monotonic()

    deadline = restored_at + 60
    while _readyz(port) != 200:
        assert time.monotonic() < deadline, run.log_tail()
        time.sleep(0.2)
    ready_after = time.monotonic() - restored_at
    requests = _answer_and_stop(run, broker, w, expected)
    print(
        f"cut at offset {offset_at_cut}/{len(w)}; CPU during the outage {cpu_share:.1%} of a "
        f"core; /readyz {sorted(set(statuses))}; ready {ready_after:.1f} s after the restore"
    )

    assert statuses and set(statuses) == {503}
    assert ready_after < 25.0  # backoff capped at 10 s (daemon and kafka-python reconnects)
    assert cpu_share < MAX_CPU_SHARE
    down = run.events("broker_down")
    up = run.events("broker_up")
    assert len(down) == 1 and len(up) == 2, (down, up)  # once per state change
    log_lines = [json.loads(x) for x in run.log_path.read_text().splitlines() if x.startswith("{")]
    monitor_lines = [x for x in log_lines if str(x.get("logger", "")).startswith("monitor")]
    assert len(monitor_lines) < 2 * len(w) / 50 + 40  # no log line per retry
    # nothing lost: every request once (replays repeat bytes), estimates as uninterrupted
    assert set(requests) == set(expected)
    assert run.snapshot_repr() == predicted
