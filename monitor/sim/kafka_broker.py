"""Real Apache Kafka on 127.0.0.1 for tests, benchmarks and developers: one KRaft node or three.

The broker's jars come from Maven Central (``scripts/kafka/pom.xml``: ``kafka_2.13`` and its
runtime dependencies), copied once per version into ``~/.cache/activeaudit-monitor/kafka-VERSION``
(``$XDG_CACHE_HOME`` if set); a later run needs no network. ``start`` formats the log directory the
first time (the storage tool, a random cluster id), runs ``kafka.Kafka`` with a small heap and waits
until the broker answers an ApiVersions request; ``start`` again after ``stop`` or ``kill`` reuses
the same log directory and ports, so topics, records and committed offsets survive a restart.
``KafkaCluster`` runs three such processes as one KRaft cluster (every node a broker and a voting
controller, one cluster id, internal topics replicated three times, ``min.insync.replicas=2``),
so that a test can kill the leader of a partition and watch the clients follow the new one.

``KafkaBroker(sasl=SaslUser())`` adds a SASL_SSL listener (``sasl_bootstrap``) beside the
PLAINTEXT one: SASL PLAIN and SCRAM-SHA-512 for that one user, over TLS with a certificate for
127.0.0.1 signed by a CA made at the first start (``ca_file``, the client's ``ssl_cafile``).
It adds an SSL listener too (``ssl_bootstrap``) that requires a client certificate signed by
that CA (mutual TLS): ``client_cert_file`` and ``client_key_file`` are one, made with it.
The PLAINTEXT listener stays for the readiness check, the broker's own traffic and test tools.

The interface mirrors ``monitor.embedded_broker.EmbeddedBroker`` (Tansu) so tests take either::

    python -m monitor.sim.kafka_broker            # runs until Ctrl-C, prints its bootstrap
    python -m monitor.sim.kafka_broker --fetch    # only fetch the jars (scripts/bootstrap.sh)
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from monitor.errors import MonitorError
from monitor.free_ports import free_port

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).resolve().parents[2] / "scripts" / "kafka" / "pom.xml"

# Broker settings a production single-node deployment needs too: deploy/compose.yaml sets the same
# values (tests/unit/test_kafka_settings.py compares them).
DEPLOY_SETTINGS: Mapping[str, str] = {
    # one node: the internal topics cannot have more replicas than that
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # a group's first member does not wait 3 s for others before its assignment
    "group.initial.rebalance.delay.ms": "0",
    # the daemon's topics are created explicitly with their partitions and configs
    "auto.create.topics.enable": "false",
}

# Settings of the TEST broker only; never ship these.
TEST_SETTINGS: Mapping[str, str] = {
    # the tests' consumers use 2 s sessions (fast group joins and failure detection); Kafka's
    # default floor is 6 s and rejects such a JoinGroup with INVALID_SESSION_TIMEOUT
    "group.min.session.timeout.ms": "1000",
    # fewer __consumer_offsets partitions (default 50) to create and load at each (re)start
    "offsets.topic.num.partitions": "4",
    # the cleaner's dedupe buffer (default 128 MiB) would dominate the small heap
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    # the cleaner looks for dirty logs every second (default 15 s): compaction tests finish fast
    "log.cleaner.backoff.ms": "1000",
    "num.partitions": "1",
    # after a SIGKILL the restarted broker cannot register until its old registration's session
    # expires (default 9 s); in-process heartbeats between broker and controller keep 3 s easily
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}


def cluster_settings(size: int) -> dict[str, str]:
    """Broker settings of a ``size``-node cluster: every topic, internal ones too, on every node.

    An acknowledged write (``acks=all``) is on at least two nodes (one when ``size`` is 1), so
    one node may die without losing it, and the others keep accepting writes.
    """
    replicas, min_isr = str(size), str(max(1, size - 1))
    return {
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
    }


DEFAULT_HEAP_MB = 256
JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
"""


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
TLS_DAYS = 365  # validity of the certificates made at the first start with ``sasl``


def _secured_listener(port: int | None, name: str) -> str:
    """The ``host:port`` of a secured listener, which only a broker made with ``sasl`` has."""
    if port is None:
        msg = f"this Kafka broker has no {name} listener: create it with sasl=SaslUser()"
        raise MonitorError(msg)
    return f"127.0.0.1:{port}"


@dataclass(frozen=True)
class SaslUser:
    """The one client user of a broker's SASL_SSL listener (every one of ``SASL_MECHANISMS``).

    The password is random unless given and never shown in ``repr``; a given one must keep to
    letters, digits, '-' and '_' (it is written into the broker's settings unescaped).
    """

    username: str = "monitor"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18), repr=False)


def make_tls_files(directory: Path) -> None:
    """Make a new CA certificate, and a broker's and a client's key and certificate it signs.

    ``ca.pem`` is the CA's certificate (the clients' ``ssl_cafile``, the broker's trust store
    for client certificates); ``broker.pem`` is Kafka's PEM key store: the broker's key, then
    its certificate for 127.0.0.1; ``client.crt`` and ``client.key`` are a client's certificate
    and unencrypted key (``ssl_certfile``, ``ssl_keyfile``). Made with the ``openssl`` command
    line (OpenSSL 3); the CA's key is not kept, so no other certificate can be signed later.
    """
    openssl = _openssl()
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = str(directory / "ca.pem"), str(directory / "ca.key")
    key, cert = directory / "broker.key", directory / "broker.crt"
    new = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(TLS_DAYS)]
    # signed by the CA, and not a CA itself
    signed = [*new, "-CA", ca, "-CAkey", ca_key, "-addext", "basicConstraints=CA:FALSE"]
    broker = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    client = ["-subj", "/CN=activeaudit-monitor test client"]
    client += ["-keyout", str(directory / "client.key"), "-out", str(directory / "client.crt")]
    for args in (
        [*new, "-keyout", ca_key, "-out", ca, "-subj", "/CN=activeaudit-monitor test CA"],
        [*signed, "-keyout", str(key), "-out", str(cert), *broker],
        [*signed, *client],
    ):
        done = subprocess.run([openssl, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            msg = f"making the test broker's certificates in {directory} failed:\n{done.stderr}"
            raise MonitorError(msg)
    (directory / "broker.pem").write_text(key.read_text() + cert.read_text())
    for made in (Path(ca_key), key, cert):
        made.unlink()


def encrypt_key(key: Path, out: Path, password: str) -> None:
    """Write ``key`` (PEM) to ``out`` encrypted with ``password`` (AES-256, PKCS#8).

    A client's ``ssl_keyfile`` that needs ``ssl_password``. The password reaches ``openssl``
    through its environment, not its command line.
    """
    cmd = [_openssl(), "pkey", "-in", str(key), "-out", str(out), "-aes256"]
    cmd += ["-passout", "env:KEY_PASSWORD"]
    env = {**os.environ, "KEY_PASSWORD": password}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        msg = f"encrypting {key} failed:\n{done.stderr}"
        raise MonitorError(msg)


def _openssl() -> str:
    found = shutil.which("openssl")
    if found is None:
        msg = "'openssl' is missing (it makes the test broker's certificates): apt-get install it"
        raise MonitorError(msg)
    return found


def cache_root() -> Path:
    """Where fetched jars live: ``$XDG_CACHE_HOME/activeaudit-monitor`` or ``~/.cache/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "activeaudit-monitor"


def kafka_jars(version: str = KAFKA_VERSION, root: Path | None = None) -> Path:
    """The directory of Kafka ``version``'s runtime jars, fetched with Maven on first use.

    The jars are copied into a temporary sibling directory that is renamed into place only when
    Maven succeeded, so an existing directory is always complete (and two concurrent first runs
    cannot leave a half-filled one).
    """
    dest = (root or cache_root()) / f"kafka-{version}"
    if dest.is_dir():
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = "Maven ('mvn') is missing (Kafka's jars are on Maven Central): apt-get install maven"
        raise MonitorError(msg)
    if not POM.is_file():
        msg = f"{POM} is missing: run from a checkout of activeaudit-monitor"
        raise MonitorError(msg)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{dest.name}.partial-", dir=dest.parent))
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={partial}",
        f"-Dkafka.version={version}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (partial / f"kafka_2.13-{version}.jar").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        tail = (done.stdout + done.stderr)[-2000:]
        msg = f"fetching Apache Kafka {version} with Maven failed ({' '.join(cmd)}):\n{tail}"
        raise MonitorError(msg)
    try:
        partial.rename(dest)
    except OSError:  # another process put a complete copy there first
        shutil.rmtree(partial, ignore_errors=True)
    return dest


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found is None or not Path(found).is_file():
        msg = "Java is not installed: apt-get install openjdk-17-jre-headless"
        raise MonitorError(msg)
    return found


def answers_api_versions(port: int, timeout_s: float = 1.0) -> bool:
    """Whether a Kafka broker on 127.0.0.1:``port`` answers ApiVersions (v0) without error.

    A Kafka broker accepts connections before it serves requests; this is the request every
    client sends first, so a broker that answers it serves clients.
    """
    client_id = b"readiness"
    correlation = 7
    header = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack(">i", len(header)) + header)
            head = _recv_exact(sock, 10)  # size, correlation id, error code
    except OSError:
        return False
    _, got_correlation, error = struct.unpack(">iih", head)
    return bool(got_correlation == correlation and error == 0)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            msg = "connection closed"
            raise OSError(msg)
        buf += chunk
    return buf


def _cluster_id() -> str:
    """A random Kafka cluster id: a UUID in URL-safe base64 without padding, as Kafka writes.

    Like Kafka's ``Uuid.randomUuid`` it never starts with "-", which a command line would take
    for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaBroker:
    """One Apache Kafka process (broker and KRaft controller) on 127.0.0.1; a context manager.

    ``data_dir`` holds ``server.properties`` and the log directory ``logs/``; without one a
    temporary directory is used and removed on exit. ``settings`` override ``DEPLOY_SETTINGS``
    and ``TEST_SETTINGS``. Alone it is node 1 of its own cluster (a random cluster id, itself the
    only voter); ``KafkaCluster`` sets ``node_id``, ``cluster_id`` and ``quorum_voters`` of its
    nodes. With ``sasl`` the broker also serves that user on a SASL_SSL listener, and clients
    with a certificate of its CA on an SSL listener (see the module docstring).
    """

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        advertised_port: int | None = None,
        *,
        data_dir: Path | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        settings: Mapping[str, str] | None = None,
        version: str = KAFKA_VERSION,
        node_id: int = 1,
        cluster_id: str | None = None,
        sasl: SaslUser | None = None,
    ) -> None:
        self.port = port or free_port()
        self.controller_port = free_port()
        self.node_id = node_id
        self.cluster_id = cluster_id  # formats the log directory with it (None: a random one)
        # the KRaft controllers, ``id@host:port`` comma-separated: this node alone by default
        self.quorum_voters = f"{node_id}@127.0.0.1:{self.controller_port}"
        # the port clients are told to use (e.g. a proxy in front of the broker in tests)
        self.advertised_port = advertised_port or self.port
        self.log_path = log_path
        self._owned_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="kafka-"))
        self.heap_mb = heap_mb
        self.settings = {**DEPLOY_SETTINGS, **TEST_SETTINGS, **(settings or {})}
        self.version = version
        self.sasl = sasl
        self.sasl_port = free_port() if sasl else None
        self.ssl_port = free_port() if sasl else None
        self.start_seconds: list[float] = []  # wall time of each start until the broker answered
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to (the advertised one)."""
        return f"127.0.0.1:{self.advertised_port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The ``host:port`` of the SASL_SSL listener (a broker started with ``sasl``)."""
        return _secured_listener(self.sasl_port, "SASL_SSL")

    @property
    def ssl_bootstrap(self) -> str:
        """The ``host:port`` of the SSL listener that requires a client certificate (``sasl``)."""
        return _secured_listener(self.ssl_port, "SSL")

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that signed the broker's and the client's certificates."""
        return self.tls_dir / "ca.pem"

    @property
    def client_cert_file(self) -> Path:
        """A client certificate (PEM) the SSL listener accepts: signed by ``ca_file``."""
        return self.tls_dir / "client.crt"

    @property
    def client_key_file(self) -> Path:
        """The unencrypted private key (PEM) of ``client_cert_file``."""
        return self.tls_dir / "client.key"

    @property
    def tls_dir(self) -> Path:
        """Where the TLS listeners' certificates are made at the first start."""
        return self.data_dir / "tls"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks read its CPU time)."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_dir(self) -> Path:
        """Kafka's ``log.dirs``: topic partitions, committed offsets, the KRaft metadata log."""
        return self.data_dir / "logs"

    def server_properties(self) -> dict[str, str]:
        """The broker's whole configuration (``server.properties``)."""
        listeners = f"PLAINTEXT://127.0.0.1:{self.port}"
        listeners += f",CONTROLLER://127.0.0.1:{self.controller_port}"
        advertised = f"PLAINTEXT://127.0.0.1:{self.advertised_port}"
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        secured: dict[str, str] = {}
        if self.sasl is not None:
            tls = f",SASL_SSL://{self.sasl_bootstrap},SSL://{self.ssl_bootstrap}"
            listeners += tls
            advertised += tls
            protocols += ",SASL_SSL:SASL_SSL,SSL:SSL"
            secured = self._sasl_settings(self.sasl)
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            "log.dirs": str(self.log_dir),
            **secured,
            **self.settings,
        }

    def _sasl_settings(self, sasl: SaslUser) -> dict[str, str]:
        """The SASL_SSL listener's mechanisms and PLAIN user; the SSL listener's trust store.

        Both TLS listeners serve the PEM key store; only the SSL one asks for, and checks, a
        client certificate (against the CA's certificate in PEM).
        """
        login = "org.apache.kafka.common.security"
        user = f'user_{sasl.username}="{sasl.password}"'
        return {
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"{login}.plain.PlainLoginModule required {user};"
            ),
            # every enabled mechanism needs a login module (SCRAM's users are in the metadata)
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                f"{login}.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls_dir / "broker.pem"),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.location": str(self.ca_file),
        }

    def _write_config(self) -> tuple[Path, Path]:
        props = self.data_dir / "server.properties"
        log4j = self._log4j()
        props.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        return props, log4j

    def _log4j(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(LOG4J2)
        return log4j

    def _java(self, jars: Path, log4j: Path) -> list[str]:
        return [
            java_binary(),
            "-Xms64m",
            f"-Xmx{self.heap_mb}m",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            str(jars / "*"),
        ]

    def _format(self, java: list[str], props: Path) -> None:
        """Format the KRaft log directory once (skipped when it holds ``meta.properties``).

        With ``sasl`` its user's SCRAM credentials go into the metadata log here.
        """
        if (self.log_dir / "meta.properties").is_file():
            return
        cid = self.cluster_id or _cluster_id()
        cmd = [*java, "kafka.tools.StorageTool", "format", "-t", cid, "-c", str(props)]
        if self.sasl is not None:
            user = f"name={self.sasl.username},password={self.sasl.password}"
            cmd += ["--add-scram", f"SCRAM-SHA-512=[{user}]"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = done.stdout[-1500:] + done.stderr[-1500:]
            msg = f"formatting the Kafka log directory {self.log_dir} failed:\n{tail}"
            raise MonitorError(msg)

    def start(self, timeout_s: float = 120.0) -> KafkaBroker:
        """Start the broker (formatting its log directory the first time); wait until it answers."""
        if self._proc is not None:
            msg = f"the Kafka broker on {self.bootstrap} is already running (pid {self._proc.pid})"
            raise MonitorError(msg)
        t0 = time.monotonic()
        jars = kafka_jars(self.version)
        if self.sasl is not None and not (self.tls_dir / "broker.pem").is_file():
            make_tls_files(self.tls_dir)
        props, log4j = self._write_config()
        java = self._java(jars, log4j)
        self._format(java, props)
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [*java, "kafka.Kafka", str(props)], stdout=out, stderr=subprocess.STDOUT
            )
        finally:
            if self.log_path:
                out.close()  # type: ignore[union-attr]
        try:
            self._wait_ready(t0 + timeout_s)
        except MonitorError:
            self.kill()
            raise
        self.start_seconds.append(time.monotonic() - t0)
        return self

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        while not answers_api_versions(self.port):
            code = self._proc.poll()
            if code is not None:
                msg = f"the Kafka broker exited with code {code} while starting{self._log_hint()}"
                raise MonitorError(msg)
            if time.monotonic() > deadline:
                where = f"127.0.0.1:{self.port}"
                msg = f"the Kafka broker on {where} did not answer in time{self._log_hint()}"
                raise MonitorError(msg)
            time.sleep(0.1)

    def _log_hint(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return " (pass log_path to see its log)"
        tail = self.log_path.read_text(errors="replace")[-2000:]
        return f"; last lines of {self.log_path}:\n{tail}"

    def log_batches(self, topic: str, partition: int) -> list[dict[str, str]]:
        """Every record batch in a partition's log segments, as Kafka's DumpLogSegments prints it.

        One dict per batch with the tool's fields (``baseOffset``, ``lastOffset``,
        ``producerId``, ``producerEpoch``, ``baseSequence``, ``lastSequence``, ``isControl``, ...):
        what the broker itself stored, e.g. whether a producer was idempotent.
        """
        seg_dir = self.log_dir / f"{topic}-{partition}"
        segments = sorted(str(p) for p in seg_dir.glob("*.log"))
        if not segments:
            return []
        cmd = [*self._java(kafka_jars(self.version), self._log4j()), "kafka.tools.DumpLogSegments"]
        done = subprocess.run(
            [*cmd, "--files", ",".join(segments)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            msg = f"DumpLogSegments failed on {seg_dir}:\n{done.stderr[-1500:]}"
            raise MonitorError(msg)
        batches = []
        for line in done.stdout.splitlines():
            if line.startswith("baseOffset:"):
                words = line.split()
                batches.append(
                    {k.rstrip(":"): v for k, v in zip(words[::2], words[1::2], strict=False)}
                )
        return batches

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the broker: SIGTERM (a controlled shutdown), SIGKILL after ``timeout_s``."""
        self._signal(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """Kill the broker at once (SIGKILL): its next start recovers the log directory."""
        self._signal(signal.SIGKILL, 30.0)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP), as a hung host: connections open, nothing answers."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused broker go on (SIGCONT)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals, timeout_s: float) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(sig)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def close(self) -> None:
        """Stop the broker and remove its data directory if it was a temporary one."""
        self.stop()
        if self._owned_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class KafkaCluster:
    """``size`` Apache Kafka processes on 127.0.0.1 forming one KRaft cluster.

    Every node is a broker and a voting controller (``controller.quorum.voters`` lists all of
    them), formatted with one shared cluster id, with ``cluster_settings(size)`` on top of the
    single node's settings (``settings`` override both). Node ``i`` (``node(i)``, 1-based) keeps
    its data in ``data_dir/node-i`` and its log in ``data_dir/node-i.log``. ``start`` starts the
    nodes together, since a KRaft node serves clients only once a majority of the voters runs; a
    node killed alone (``node(i).kill()``) comes back with its own ``start``.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        data_dir: Path,
        heap_mb: int = DEFAULT_HEAP_MB,
        settings: Mapping[str, str] | None = None,
        version: str = KAFKA_VERSION,
    ) -> None:
        self.data_dir = data_dir
        cluster_id = _cluster_id()
        merged = {**cluster_settings(size), **(settings or {})}
        self.brokers = [
            KafkaBroker(
                log_path=self.data_dir / f"node-{i}.log",
                data_dir=self.data_dir / f"node-{i}",
                heap_mb=heap_mb,
                settings=merged,
                version=version,
                node_id=i,
                cluster_id=cluster_id,
            )
            for i in range(1, size + 1)
        ]
        voters = ",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in self.brokers)
        for broker in self.brokers:
            broker.quorum_voters = voters

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated (clients take any that answers)."""
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def pid(self) -> None:
        """No single process: each node's is ``node(i).pid``."""
        return None

    def node(self, node_id: int) -> KafkaBroker:
        """The node with Kafka's ``node.id`` ``node_id`` (as metadata names a leader)."""
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        msg = f"no node {node_id} in this cluster (nodes 1..{len(self.brokers)})"
        raise MonitorError(msg)

    def start(self, timeout_s: float = 180.0) -> KafkaCluster:
        """Start every node that is not running, together; wait until each answers."""
        stopped = [b for b in self.brokers if not b.running]
        if not stopped:
            return self
        try:
            with ThreadPoolExecutor(len(stopped)) as pool:
                list(pool.map(lambda b: b.start(timeout_s), stopped))
        except MonitorError:
            for broker in stopped:
                broker.kill()
            raise
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the nodes one by one (SIGTERM, a controlled shutdown), the last one with SIGKILL.

        A node's controlled shutdown waits for the controllers' quorum, which the last node
        alone no longer has: it would wait ``timeout_s`` in vain (it recovers its log directory
        at its next start like a node that crashed).
        """
        running = [b for b in self.brokers if b.running]
        for broker in running[:-1]:
            broker.stop(timeout_s)
        for broker in running[-1:]:
            broker.kill()


def main(argv: list[str] | None = None) -> int:
    """Run a broker in the foreground until Ctrl-C/SIGTERM (``--fetch``: only fetch the jars)."""
    parser = argparse.ArgumentParser(prog="python -m monitor.sim.kafka_broker", description=__doc__)
    parser.add_argument("--version", default=KAFKA_VERSION, help="Apache Kafka version")
    parser.add_argument("--fetch", action="store_true", help="fetch the jars, then exit")
    parser.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
    parser.add_argument("--data-dir", type=Path, help="keeps topics across runs (default: tmp)")
    parser.add_argument("--heap-mb", type=int, default=DEFAULT_HEAP_MB)
    parser.add_argument("--log", type=Path, help="broker log file (default: <data-dir>/kafka.log)")
    args = parser.parse_args(argv)
    if args.fetch:
        print(kafka_jars(args.version))
        return 0
    broker = KafkaBroker(
        args.port or None, data_dir=args.data_dir, heap_mb=args.heap_mb, version=args.version
    )
    broker.log_path = args.log or broker.data_dir / "kafka.log"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with broker:
        print(
            f"Apache Kafka {args.version} on {broker.bootstrap} (pid {broker.pid}, "
            f"started in {broker.start_seconds[-1]:.1f} s; log {broker.log_path}); Ctrl-C stops it",
            flush=True,
        )
        try:
            while broker.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
