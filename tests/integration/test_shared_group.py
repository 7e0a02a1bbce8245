"""Two ``--role all`` daemons in one consumer group on a real broker: each is told, not ready."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor import daemon as daemon_module
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.daemon import Daemon, kafka_connect
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.sim.embedded_broker import EmbeddedBroker
from tests.conftest import Broker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.brokers("tansu", "kafka"),
    pytest.mark.timeout(120),
]


def _config(broker: Broker, topics: TopicsConfig, group: str, data_dir: Path) -> Config:
    tansu = isinstance(broker, EmbeddedBroker)
    session = {"session_timeout_ms": 2000 if tansu else 6000, "heartbeat_interval_ms": 500}
    kafka = KafkaConfig(
        bootstrap_servers=(broker.bootstrap,), group_id=group, topics=topics, client=session
    )
    return dataclasses.replace(Config(kafka=kafka), data_dir=data_dir)


def test_a_second_daemon_in_the_group_makes_both_report_and_not_ready(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy of a deployment started with the same group id took half of the scored topic's
    partitions and both processes stayed ready, each estimating from half the traffic. Each now
    logs ``partitions_shared`` and is not ready; the one left alone is ready again."""
    monkeypatch.setattr(daemon_module, "UNASSIGNED_WARN_S", 2.0)
    monkeypatch.setattr(daemon_module, "PROBE_EVERY_S", 0.5)
    topics = make_topics(partitions=2)
    group = f"shared-{uuid.uuid4().hex[:8]}"
    runs: list[tuple[threading.Event, threading.Thread, CollectorRegistry, Store]] = []
    with caplog.at_level(logging.INFO, logger="monitor"):
        for i in range(2):
            config = _config(broker, topics, group, tmp_path / f"d{i}")
            store = Store(config.data_dir)
            registry = CollectorRegistry()
            engine = Engine(config, store, Exporter(config, registry))
            stop = threading.Event()
            loop = Daemon(engine, kafka_connect(config, engine.topics), stop)
            thread = threading.Thread(target=loop.run, name=f"daemon-{i}")
            thread.start()
            runs.append((stop, thread, registry, store))

        def shared() -> int:
            return [str(getattr(r, "event", "")) for r in caplog.records].count("partitions_shared")

        try:
            deadline = time.monotonic() + 60.0
            while shared() < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert shared() == 2
            assert [r[2].get_sample_value("monitor_ready") for r in runs] == [0.0, 0.0]
            record = next(
                r for r in caplog.records if getattr(r, "event", "") == "partitions_shared"
            )
            assert f"{topics.scored} (1 of 2 partitions)" in getattr(record, "topics", [])
            runs[1][0].set()  # the copy stops: the first is given every partition again
            runs[1][1].join(30.0)
            deadline = time.monotonic() + 60.0
            while runs[0][2].get_sample_value("monitor_ready") != 1.0:
                assert time.monotonic() < deadline, "not ready again"
                time.sleep(0.2)
            assert "partitions_whole" in [str(getattr(r, "event", "")) for r in caplog.records]
        finally:
            for stop, thread, _, store in runs:
                stop.set()
                thread.join(30.0)
                store.close()
