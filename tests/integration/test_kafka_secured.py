"""The daemon on Apache Kafka over SASL_SSL, with both client libraries (``sasl_kafka``).

The broker (``KafkaBroker(sasl=SaslUser())``) serves SASL PLAIN and SCRAM-SHA-512 over TLS, its
certificate signed by a CA made at its first start. The daemon's ``kafka.client`` names the
mechanism, the user and password as ``{env: ...}``, and the CA file; it connects to the SASL_SSL
listener only. The tests write scored records and labels on the broker's PLAINTEXT listener;
topics are created, and requests read, through the daemon's configuration, over SASL_SSL.

- end to end, per client library and mechanism: every scored record consumed, exactly the
  requests and estimates of the engine's in-process run, labels consumed, ``/readyz`` 200;
- a wrong password, and a CA that did not sign the broker's certificate: the daemon keeps
  running, not ready, and its one ``broker_down`` line names the cause and the settings to check;
- a CA file that is not there: exit 2 at once, naming the key and the file;
- the password is in none of the daemon's output.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.config.schema import Config, TopicsConfig
from monitor.io.kafka_io import create_topics
from monitor.sim.kafka_broker import KafkaBroker, make_tls_files
from monitor.sim.workload import WorkloadSpec, generate
from tests.integration.test_daemon_kafka import (
    _labels,
    _predict,
    _produce,
    _read_all,
    _scored,
    _scrape,
    _yaml,
)
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_kafka_real import _wait_for
from tests.integration.test_scale_out import Proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LIBRARIES = ("kafka-python", "confluent-kafka")
USER_ENV = "MONITOR_TEST_KAFKA_USER"
PASSWORD_ENV = "MONITOR_TEST_KAFKA_PASSWORD"
WRONG_PASSWORD = "not-the-password-7f3a"
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class Listener:
    """The broker's SASL_SSL listener, where the daemon's configuration points."""

    bootstrap: str
    pid: int | None = None


@dataclass
class Secured:
    """Daemons of a test against the SASL_SSL broker; ``env`` names its user and password."""

    broker: KafkaBroker
    env: dict[str, str]
    procs: list[Proc]
    monkeypatch: pytest.MonkeyPatch

    def config_file(
        self, path: Path, library: str, *, mechanism: str = "PLAIN", cafile: Path | None = None
    ) -> Path:
        """A daemon configuration over SASL_SSL, user and password from the environment."""
        client = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": f"{{env: {USER_ENV}}}",
            "sasl_plain_password": f"{{env: {PASSWORD_ENV}}}",
            "ssl_cafile": str(cafile or self.broker.ca_file),
        }
        topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
        group = f"g-{uuid.uuid4().hex[:8]}"
        listener = Listener(self.broker.sasl_bootstrap)
        data_dir = path.with_suffix(".data")
        path.write_text(_yaml(listener, topics, data_dir, group, library, client=client))
        return path

    def load(self, path: Path) -> Config:
        """The configuration at ``path``, as the daemon reads it with ``self.env``."""
        with self.monkeypatch.context() as m:
            for name, value in self.env.items():
                m.setenv(name, value)
            return load_config(path)

    def start(self, path: Path, **env: str) -> Proc:
        """``monitor run --config path`` in ``self.env`` updated with ``env``."""
        proc = Proc(path, self.load(path), path.with_suffix(".log"))
        with self.monkeypatch.context() as m:
            for name, value in {**self.env, **env}.items():
                m.setenv(name, value)
            proc.start()
        self.procs.append(proc)
        return proc

    def secrets_kept(self, proc: Proc) -> None:
        """Neither the password nor the wrong one shows in the process's output."""
        text = proc.log_path.read_text(errors="replace")
        assert self.env[PASSWORD_ENV] not in text
        assert WRONG_PASSWORD not in text


@pytest.fixture
def secured(sasl_kafka: KafkaBroker, procs: list[Proc], monkeypatch: pytest.MonkeyPatch) -> Secured:
    """The module's SASL_SSL broker, with its user and password."""
    assert sasl_kafka.sasl is not None
    env = {USER_ENV: sasl_kafka.sasl.username, PASSWORD_ENV: sasl_kafka.sasl.password}
    return Secured(sasl_kafka, env, procs, monkeypatch)


def _estimated(proc: Proc) -> bool:
    """Whether /metrics shows a number for F over the 24 h window."""
    text = _scrape(proc, "monitor_f_measure{")
    return re.search(r'monitor_f_measure\{[^}]*window="24h"[^}]*\} 0\.\d+', text) is not None


def _down(proc: Proc) -> bool:
    return bool(proc.events("broker_down"))


@pytest.mark.parametrize(
    ("library", "mechanism"),
    [
        ("kafka-python", "PLAIN"),
        ("kafka-python", "SCRAM-SHA-512"),
        ("confluent-kafka", "PLAIN"),
        ("confluent-kafka", "SCRAM-SHA-512"),
    ],
)
def test_the_daemon_runs_end_to_end_over_sasl_ssl(
    library: str, mechanism: str, secured: Secured, tmp_path: Path
) -> None:
    path = secured.config_file(tmp_path / "run.yaml", library, mechanism=mechanism)
    config = secured.load(path)
    create_topics(config)  # what --create-topics does: kafka-python's admin client, SASL_SSL
    topics = config.kafka.topics
    w = generate(WorkloadSpec(n=2000, hours=2.0, seed=41))
    expected, predicted = _predict(config, w, tmp_path)
    _produce(secured.broker, topics.scored, _scored(w))
    run = secured.start(path)
    run.wait_offsets({(topics.scored, 0): len(w)})
    requests = _read_all(config, topics.requests)  # a kafka-python consumer over SASL_SSL
    assert requests == expected  # byte for byte, in order
    labels = _labels(w, requests)
    _produce(secured.broker, topics.labels, labels)
    run.wait_offsets({(topics.labels, 0): len(labels)})
    _scrape(run, f'monitor_labels_received_total{{model="default"}} {float(len(labels))}')
    _wait_for("an F-measure estimate on /metrics", functools.partial(_estimated, run), run, 20)
    assert _readyz(config.metrics.port) == 200
    code, _ = run.stop(signal.SIGTERM)
    assert code == 0, run.log_tail()
    assert run.snapshot_repr() == predicted
    secured.secrets_kept(run)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_wrong_password_or_an_untrusted_certificate_is_not_ready_and_says_which(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    make_tls_files(tmp_path / "other")  # another CA, which did not sign the broker's certificate
    password = secured.config_file(tmp_path / "password.yaml", library)
    wrong_password = secured.start(password, **{PASSWORD_ENV: WRONG_PASSWORD})
    other_ca = secured.config_file(tmp_path / "ca.yaml", library, cafile=tmp_path / "other/ca.pem")
    untrusted = secured.start(other_ca)
    for proc in (wrong_password, untrusted):
        _wait_for("broker_down", functools.partial(_down, proc), proc, 30)
        assert _readyz(proc.config.metrics.port) == 503
    # the error names the listener, the cause, and the settings to check
    password_error = str(wrong_password.events("broker_down")[0]["error"])
    assert secured.broker.sasl_bootstrap in password_error
    assert "sasl_plain_username and sasl_plain_password" in password_error, password_error
    ca_error = str(untrusted.events("broker_down")[0]["error"])
    assert secured.broker.sasl_bootstrap in ca_error
    assert "certificate verify failed" in ca_error, ca_error
    assert "kafka.client.ssl_cafile must be the CA certificate" in ca_error, ca_error
    for proc in (wrong_password, untrusted):
        assert proc.proc is not None and proc.proc.poll() is None, proc.log_tail()
        assert _readyz(proc.config.metrics.port) == 503
        code, took = proc.stop(signal.SIGTERM)
        assert code == 0 and took < 10, proc.log_tail()
        assert len(proc.events("broker_down")) == 1  # once per state change
        lines = [json.loads(x) for x in proc.log_path.read_text().splitlines()]
        assert not [x for x in lines if str(x["logger"]).startswith("kafka")]  # kafka-python's
        failed = [
            _NUMBERS.sub("N", str(x["msg"])) for x in lines if str(x["msg"]).startswith("FAIL")
        ]
        assert len(failed) == len(set(failed)), failed  # librdkafka's: each once (a minute)
        secured.secrets_kept(proc)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_missing_ca_file_stops_the_start_with_a_config_error(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dir" / "ca.pem"
    path = secured.config_file(tmp_path / "run.yaml", library, cafile=missing)
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, **secured.env},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].strip() == (
        f"kafka.client.ssl_cafile: cannot read {str(missing)!r}: No such file or directory; "
        "it must be the CA certificate (PEM) that signed the brokers' certificates"
    )
    assert secured.env[PASSWORD_ENV] not in done.stdout + done.stderr
