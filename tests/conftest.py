"""Shared fixtures: seeded randomness, the real brokers, Prometheus, Label Studio.

Tests that need a real component skip with a reason when it is missing on a laptop, but
under CI (``CI=true``) or with ``MONITOR_REQUIRE_REAL=1`` a missing component is a failure.

Brokers: a test that uses the ``broker`` fixture runs once per broker its ``brokers`` marker
names, ``tansu`` (the Tansu binary, in memory, starts in ~0.1 s) and/or ``kafka`` (Apache Kafka
from Maven Central, ``monitor.sim.kafka_broker``, one per session); unmarked tests run on Tansu.
``sasl_kafka`` is another Apache Kafka, one per module that uses it, with a SASL_SSL listener
and an SSL listener that requires a client certificate.
``MONITOR_TEST_BROKERS=kafka`` (comma-separated kinds) runs every broker test on those kinds
instead. ``MONITOR_TEST_KAFKA_BOOTSTRAP=host:port`` runs the ``kafka`` cases against an existing
cluster instead of starting one; the tests use 2 s consumer sessions, so that cluster needs
``group.min.session.timeout.ms`` <= 2000 (see ``TEST_SETTINGS`` in monitor/sim/kafka_broker.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

import numpy as np
import pytest
from hypothesis import settings

from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.schema import TopicsConfig
from monitor.errors import MonitorError
from monitor.io.kafka_io import ensure_topics
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.kafka_broker import KafkaBroker, KafkaCluster, SaslUser

UNDER_CI = os.environ.get("CI", "").lower() == "true"
REQUIRE_REAL = UNDER_CI or os.environ.get("MONITOR_REQUIRE_REAL", "") in {"1", "true"}

# Property tests: under CI every run tries the same examples (a red build reproduces from the
# commit alone, and a commit cannot fail on an example no earlier run drew); elsewhere every run
# explores new ones, and ``.hypothesis/`` replays any failure it found.
settings.register_profile("ci", derandomize=True)
if UNDER_CI:
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A test that runs the command line (``monitor.logs.setup_logging``) leaves the root logger
    writing to that test's captured stderr, closed after it: a later test's log event printed
    "--- Logging error ---" and a traceback. Each test ends with the handlers it began with."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def missing_component(reason: str) -> NoReturn:
    """Skip on a laptop, fail under CI: a real component the test needs is not there."""
    if REQUIRE_REAL:
        pytest.fail(f"required component missing under CI: {reason}")
    pytest.skip(reason)


class _Startable(Protocol):
    def start(self) -> object: ...


_Component = TypeVar("_Component", bound=_Startable)


def started(make: Callable[[], _Component], what: str) -> _Component:
    """``make()`` once its ``start()`` returned; one that cannot be made or started is missing."""
    try:
        component = make()
        component.start()
    except MonitorError as exc:
        missing_component(f"{what}: {exc}")
    return component


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: every random test is reproducible."""
    return np.random.default_rng(20101206)


BROKER_KINDS = ("tansu", "kafka")
KAFKA_BOOTSTRAP_ENV = "MONITOR_TEST_KAFKA_BOOTSTRAP"
BROKERS_ENV = "MONITOR_TEST_BROKERS"


class Broker(Protocol):
    """What tests use of a broker: where clients connect, and its process if it runs here."""

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients."""
        ...

    @property
    def pid(self) -> int | None:
        """The broker process's id, None for a cluster this session did not start."""
        ...


@dataclass(frozen=True)
class ExternalKafka:
    """A Kafka cluster the session did not start (``MONITOR_TEST_KAFKA_BOOTSTRAP``)."""

    bootstrap: str
    pid: int | None = None


def broker_kinds(marker: pytest.Mark | None) -> tuple[str, ...]:
    """The brokers a test runs on: ``MONITOR_TEST_BROKERS``, else its marker, else Tansu."""
    forced = os.environ.get(BROKERS_ENV, "").strip()
    kinds = tuple(forced.split(",")) if forced else (marker.args if marker else ("tansu",))
    unknown = set(kinds) - set(BROKER_KINDS)
    if unknown:
        msg = f"unknown broker kind(s) {sorted(unknown)}; use {', '.join(BROKER_KINDS)}"
        raise pytest.UsageError(msg)
    return kinds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that uses ``broker`` once per broker kind (see the module docstring)."""
    if "broker" in metafunc.fixturenames:
        kinds = broker_kinds(metafunc.definition.get_closest_marker("brokers"))
        metafunc.parametrize("broker", kinds, indirect=True, scope="function")


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One Tansu broker on 127.0.0.1 for the whole session (tests use unique topic names)."""
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    embedded = started(lambda: EmbeddedBroker(log_path=log_path), "Kafka-protocol broker")
    yield embedded
    embedded.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Apache Kafka for the whole session: started here, or ``MONITOR_TEST_KAFKA_BOOTSTRAP``."""
    external = os.environ.get(KAFKA_BOOTSTRAP_ENV, "").strip()
    if external:
        yield ExternalKafka(external)
        return
    home = tmp_path_factory.mktemp("kafka")
    real = started(
        lambda: KafkaBroker(log_path=home / "kafka.log", data_dir=home / "data"),
        "Apache Kafka broker",
    )
    yield real
    real.stop()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-node Apache Kafka cluster for one test module (tests kill and restart its nodes).

    Always started here (``MONITOR_TEST_KAFKA_BOOTSTRAP`` names nothing this session may kill);
    ~10 s to start, ~1 GiB while it runs, stopped after the module.
    """
    home = tmp_path_factory.mktemp("kafka-cluster")
    cluster = started(lambda: KafkaCluster(data_dir=home), "Apache Kafka cluster")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka with SASL_SSL and mutual-TLS listeners (``KafkaBroker(sasl=SaslUser())``).

    One per module. Always started here (also with ``MONITOR_TEST_KAFKA_BOOTSTRAP``): its user,
    password, CA and client certificate are made for it.
    """
    home = tmp_path_factory.mktemp("kafka-sasl")
    secured = started(
        lambda: KafkaBroker(log_path=home / "kafka.log", data_dir=home / "data", sasl=SaslUser()),
        "Apache Kafka broker with a SASL_SSL listener",
    )
    yield secured
    secured.close()


@pytest.fixture
def own_kafka(kafka_broker: Broker) -> KafkaBroker:
    """The session's Apache Kafka when this session runs it (tests that stop and restart it)."""
    if not isinstance(kafka_broker, KafkaBroker):
        pytest.skip(f"{KAFKA_BOOTSTRAP_ENV} names a cluster this session cannot restart")
    return kafka_broker


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Broker:
    """The session broker of the kind this test case runs on (``tansu`` or ``kafka``)."""
    kind = getattr(request, "param", "tansu")
    found: Broker = request.getfixturevalue(f"{kind}_broker")
    return found


@pytest.fixture
def client_library() -> str:
    """The Kafka client of daemons a test deploys (tests parametrize it to run both)."""
    return "kafka-python"


@pytest.fixture
def make_topics(broker: Broker) -> Callable[..., TopicsConfig]:
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


@pytest.fixture(scope="session")
def labelstudio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudioServer]:
    """One real Label Studio on 127.0.0.1 for the session (its own venv).

    Starts in ~10-20 s from the migrated template; the first start on a machine makes the
    template (~90-110 s, ``monitor.bridges.ls_server``).

    Tests make their own projects (one per model and test: titles carry a unique tag). With
    ``MONITOR_TEST_LABELSTUDIO_PORT`` set, the tests use a server already running there that
    ``monitor.bridges.ls_server`` started (same login and token), and leave it running.
    """
    attach = os.environ.get("MONITOR_TEST_LABELSTUDIO_PORT")
    if attach:
        server = LabelStudioServer(tmp_path_factory.mktemp("labelstudio"), int(attach))
        if not server.healthy():
            pytest.fail(f"no healthy Label Studio on 127.0.0.1:{attach}")
        yield server
        return
    home = tmp_path_factory.mktemp("labelstudio")
    server = started(lambda: LabelStudioServer(home), "Label Studio")
    yield server
    server.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep tests that share heavy things together.

    Session fixtures are per worker, so every worker that ran an Apache Kafka test would start
    its own broker (~10 s, ~1 GiB): all ``kafka`` cases share one group, the three-node cluster's
    too (never beside another broker's tests on the 2-core machine). Tests of the other real
    components (Tansu, Prometheus, Label Studio) share another, so one worker makes Label
    Studio's template; each slow simulation module is its own group so the two workers split them.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_kafka = (callspec is not None and callspec.params.get("broker") == "kafka") or bool(
            {"kafka_broker", "own_kafka", "kafka_cluster", "sasl_kafka"}
            & set(getattr(item, "fixturenames", ()))
        )
        if on_kafka:
            group = "kafka"
        elif item.get_closest_marker("integration"):
            group = "real"
        elif item.get_closest_marker("slow"):
            group = Path(str(item.fspath)).stem
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
