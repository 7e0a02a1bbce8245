"""The daemon on Apache Kafka over SASL_SSL and mutual TLS, with both client libraries.

The broker (``sasl_kafka``: ``KafkaBroker(sasl=SaslUser())``) serves SASL PLAIN and
SCRAM-SHA-512 over TLS, and plain TLS that requires a client certificate, its own certificate and
the client's signed by a CA made at its first start. Over SASL_SSL the daemon's ``kafka.client``
names the mechanism, the user and password as ``{env: ...}``, and the CA file; over SSL the CA
file, the client's certificate and its key (unencrypted, or encrypted with ``ssl_password`` as
``{env: ...}``). The daemon connects to that one listener only. The tests write scored records
and labels on the broker's PLAINTEXT listener; topics are created, and requests read, through the
daemon's configuration, over the secured listener.

- end to end, per client library (and mechanism): every scored record consumed, exactly the
  requests and estimates of the engine's in-process run, labels consumed, ``/readyz`` 200;
- a wrong password, a CA that did not sign the broker's certificate, a client certificate of
  another CA, and no client certificate: the daemon keeps running, not ready, and its one
  ``broker_down`` line names the cause and the settings to check;
- a CA file that is not there, and a client key its password does not decrypt: exit 2 at
  once, naming the key (and the file);
- neither password is in any of the daemon's output.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.config.schema import Config, TopicsConfig
from monitor.io.kafka_io import create_topics
from monitor.sim.kafka_broker import KafkaBroker, encrypt_key, make_tls_files
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
KEY_PASSWORD_ENV = "MONITOR_TEST_KAFKA_KEY_PASSWORD"
WRONG_PASSWORD = "not-the-password-7f3a"
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class Listener:
    """The broker's secured listener, where the daemon's configuration points."""

    bootstrap: str
    pid: int | None = None


@dataclass
class Secured:
    """Daemons of a test against the secured broker; ``env`` names its user and password."""

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
        return self._write(path, library, self.broker.sasl_bootstrap, client)

    def mtls_config_file(
        self, path: Path, library: str, tls_dir: Path | None, *, key_password: bool = False
    ) -> Path:
        """A daemon configuration over SSL with ``client.crt`` and ``client.key`` of ``tls_dir``.

        ``tls_dir`` None: no client certificate at all (the broker requires one).
        ``key_password``: the key's password is ``ssl_password``, read from the environment.
        """
        client = {"security_protocol": "SSL", "ssl_cafile": str(self.broker.ca_file)}
        if tls_dir is not None:
            client["ssl_certfile"] = str(tls_dir / "client.crt")
            client["ssl_keyfile"] = str(tls_dir / "client.key")
        if key_password:
            client["ssl_password"] = f"{{env: {KEY_PASSWORD_ENV}}}"
        return self._write(path, library, self.broker.ssl_bootstrap, client)

    def encrypted_client_key(self, tls_dir: Path) -> Path:
        """``tls_dir`` with the broker's client certificate and its key encrypted (AES-256).

        The password is the environment's ``KEY_PASSWORD_ENV``.
        """
        tls_dir.mkdir()
        shutil.copy(self.broker.client_cert_file, tls_dir / "client.crt")
        encrypt_key(self.broker.client_key_file, tls_dir / "client.key", self.env[KEY_PASSWORD_ENV])
        assert "ENCRYPTED" in (tls_dir / "client.key").read_text()
        return tls_dir

    @staticmethod
    def _write(path: Path, library: str, bootstrap: str, client: Mapping[str, str]) -> Path:
        topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
        group = f"g-{uuid.uuid4().hex[:8]}"
        data_dir = path.with_suffix(".data")
        path.write_text(_yaml(Listener(bootstrap), topics, data_dir, group, library, client=client))
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
        """No password (the user's, the client key's, the wrong one) shows in its output."""
        text = proc.log_path.read_text(errors="replace")
        assert self.env[PASSWORD_ENV] not in text
        assert self.env[KEY_PASSWORD_ENV] not in text
        assert WRONG_PASSWORD not in text


def secured_on(broker: KafkaBroker, procs: list[Proc], monkeypatch: pytest.MonkeyPatch) -> Secured:
    """``broker`` (started with ``sasl``), its SASL user and password, a client key password."""
    assert broker.sasl is not None
    env = {
        USER_ENV: broker.sasl.username,
        PASSWORD_ENV: broker.sasl.password,
        KEY_PASSWORD_ENV: secrets.token_urlsafe(18),
    }
    return Secured(broker, env, procs, monkeypatch)


@pytest.fixture
def secured(sasl_kafka: KafkaBroker, procs: list[Proc], monkeypatch: pytest.MonkeyPatch) -> Secured:
    """The module's secured broker (``secured_on``)."""
    return secured_on(sasl_kafka, procs, monkeypatch)


def _estimated(proc: Proc) -> bool:
    """Whether /metrics shows a number for F over the 24 h window."""
    text = _scrape(proc, "monitor_f_measure{")
    return re.search(r'monitor_f_measure\{[^}]*window="24h"[^}]*\} 0\.\d+', text) is not None


def _down(proc: Proc) -> bool:
    return bool(proc.events("broker_down"))


def _end_to_end(secured: Secured, path: Path, tmp_path: Path) -> None:
    """The daemon configured by ``path`` runs a workload as the engine does in process."""
    config = secured.load(path)
    create_topics(config)  # what --create-topics does: kafka-python's admin client, secured
    topics = config.kafka.topics
    w = generate(WorkloadSpec(n=2000, hours=2.0, seed=41))
    expected, predicted = _predict(config, w, tmp_path)
    _produce(secured.broker, topics.scored, _scored(w))
    run = secured.start(path)
    run.wait_offsets({(topics.scored, 0): len(w)})
    requests = _read_all(config, topics.requests)  # a kafka-python consumer, secured
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


def _refused(secured: Secured, procs: list[Proc]) -> list[str]:
    """The ``broker_down`` error of each daemon, which must not be ready.

    Each keeps running until a SIGTERM stops it at once, logs ``broker_down`` once (per state
    change), none of kafka-python's lines and each distinct librdkafka line once.
    """
    for proc in procs:
        _wait_for("broker_down", functools.partial(_down, proc), proc, 30)
        assert _readyz(proc.config.metrics.port) == 503
    errors = [str(proc.events("broker_down")[0]["error"]) for proc in procs]
    for proc in procs:
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
    return errors


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
    _end_to_end(secured, path, tmp_path)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("encrypted", [False, True], ids=["key", "encrypted-key"])
def test_the_daemon_runs_end_to_end_with_a_client_certificate(
    library: str, encrypted: bool, secured: Secured, tmp_path: Path
) -> None:
    tls_dir = secured.broker.tls_dir
    if encrypted:
        tls_dir = secured.encrypted_client_key(tmp_path / "tls")
    path = secured.mtls_config_file(tmp_path / "run.yaml", library, tls_dir, key_password=encrypted)
    _end_to_end(secured, path, tmp_path)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_wrong_password_or_an_untrusted_certificate_is_not_ready_and_says_which(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    make_tls_files(tmp_path / "other")  # another CA, which did not sign the broker's certificate
    password = secured.config_file(tmp_path / "password.yaml", library)
    wrong_password = secured.start(password, **{PASSWORD_ENV: WRONG_PASSWORD})
    other_ca = secured.config_file(tmp_path / "ca.yaml", library, cafile=tmp_path / "other/ca.pem")
    untrusted = secured.start(other_ca)
    password_error, ca_error = _refused(secured, [wrong_password, untrusted])
    # the error names the listener, the cause, and the settings to check
    assert secured.broker.sasl_bootstrap in password_error
    assert "sasl_plain_username and sasl_plain_password" in password_error, password_error
    assert secured.broker.sasl_bootstrap in ca_error
    assert "certificate verify failed" in ca_error, ca_error
    assert "kafka.client.ssl_cafile must be the CA certificate" in ca_error, ca_error


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_client_certificate_the_broker_refuses_is_not_ready_and_says_which(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    make_tls_files(tmp_path / "other")  # a client certificate of a CA the broker does not trust
    other = secured.mtls_config_file(tmp_path / "other.yaml", library, tmp_path / "other")
    none = secured.mtls_config_file(tmp_path / "none.yaml", library, None)
    other_error, none_error = _refused(secured, [secured.start(other), secured.start(none)])
    # the broker's TLS alert, and this client's certificate named as the cause (not the CA file)
    for error in (other_error, none_error):
        assert secured.broker.ssl_bootstrap in error
        assert "alert" in error, error
        assert "did not accept this client's certificate" in error, error
        assert "ssl_cafile" not in error, error
    assert "check kafka.client.ssl_certfile and ssl_keyfile" in other_error, other_error
    assert "set kafka.client.ssl_certfile and ssl_keyfile" in none_error, none_error


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_missing_ca_file_stops_the_start_with_a_config_error(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dir" / "ca.pem"
    path = secured.config_file(tmp_path / "run.yaml", library, cafile=missing)
    assert _config_error(secured, path) == (
        f"kafka.client.ssl_cafile: cannot read {str(missing)!r}: No such file or directory; "
        "it must be the CA certificate (PEM) that signed the brokers' certificates"
    )


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_wrong_key_password_stops_the_start_with_a_config_error(
    library: str, secured: Secured, tmp_path: Path
) -> None:
    """kafka-python retried "PEM lib" as a broker outage forever; librdkafka refused to start
    with "ssl.key.location failed: ... PEM lib". Neither named ssl_password."""
    tls_dir = secured.encrypted_client_key(tmp_path / "tls")
    path = secured.mtls_config_file(tmp_path / "run.yaml", library, tls_dir, key_password=True)
    assert _config_error(secured, path, **{KEY_PASSWORD_ENV: WRONG_PASSWORD}) == (
        f"kafka.client.ssl_keyfile: {str(tls_dir / 'client.key')!r} holds no PEM private key "
        "that kafka.client.ssl_password decrypts"
    )


def _config_error(secured: Secured, path: Path, **env: str) -> str:
    """The last line of ``monitor run --config path``: exit 2 at once, no password shown."""
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, **secured.env, **env},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    passwords = {secured.env[PASSWORD_ENV], secured.env[KEY_PASSWORD_ENV], *env.values()}
    for password in passwords:
        assert password not in done.stdout + done.stderr
    return done.stderr.splitlines()[-1].strip()
