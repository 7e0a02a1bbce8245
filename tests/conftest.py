"""Shared fixtures: seeded randomness, the real broker, the Prometheus binaries.

Tests that need a real component skip with a reason when it is missing on a laptop, but
under CI (``CI=true``) or with ``MONITOR_REQUIRE_REAL=1`` a missing component is a failure.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.config.schema import TopicsConfig
from monitor.errors import MonitorError
from monitor.io.kafka_io import ensure_topics
from monitor.sim.embedded_broker import EmbeddedBroker

REQUIRE_REAL = os.environ.get("CI", "").lower() == "true" or os.environ.get(
    "MONITOR_REQUIRE_REAL", ""
) in {"1", "true"}


def missing_component(reason: str) -> None:
    """Skip on a laptop, fail under CI: a real component the test needs is not there."""
    if REQUIRE_REAL:
        pytest.fail(f"required component missing under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: every random test is reproducible."""
    return np.random.default_rng(20101206)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One Tansu broker on 127.0.0.1 for the whole session (tests use unique topic names)."""
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    try:
        embedded = EmbeddedBroker(log_path=log_path).start()
    except MonitorError as exc:
        missing_component(f"Kafka-protocol broker: {exc}")
        raise  # unreachable: missing_component skips or fails
    yield embedded
    embedded.stop()


@pytest.fixture
def client_library() -> str:
    """The Kafka client of daemons a test deploys (tests parametrize it to run both)."""
    return "kafka-python"


@pytest.fixture
def make_topics(broker: EmbeddedBroker) -> Callable[..., TopicsConfig]:
    """Create a fresh, uniquely named set of the daemon's topics on the session broker."""

    def _make(partitions: int = 1) -> TopicsConfig:
        topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
        ensure_topics(broker.bootstrap, topics, partitions)
        return topics

    return _make


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        missing_component(f"'{name}' is not installed (apt-get install prometheus ...)")
        raise AssertionError  # unreachable
    return Path(found)


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Path of ``promtool`` (Debian package ``prometheus``)."""
    return _binary("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """Path of the Prometheus server (Debian package ``prometheus``)."""
    return _binary("prometheus")


@pytest.fixture(scope="session")
def alertmanager_bin() -> Path:
    """Path of Alertmanager (Debian package ``prometheus-alertmanager``)."""
    return _binary("prometheus-alertmanager")
