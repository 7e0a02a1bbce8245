"""Helpers of the Label Studio tests: a bridge per test, annotating through the API, a daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_config import LabelStudioConfig, Wording, parse_labelstudio, state_path
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.load import load_config
from monitor.config.schema import Config, TopicsConfig
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import Workload, WorkloadSpec, generate

FAST_GROUP = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}  # tests only (Tansu)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def ls_config(server: LabelStudioServer, tag: str, **kw: Any) -> LabelStudioConfig:
    """Bridge settings for one test: its own project titles, any free port."""
    base: dict[str, Any] = {
        "url": server.url,
        "project_title": f"Audit {tag}: {{model}}",
        "port": 0,
        "poll_interval_s": 2.0,
        "group_id": f"ls-{tag}",
        "wording": Wording(positive="Fraud", negative="Legitimate"),
    }
    base.update(kw)
    return LabelStudioConfig(**base)


def yaml_config(
    broker: EmbeddedBroker, topics: TopicsConfig, data_dir: Path, extra: str = ""
) -> str:
    """A daemon configuration (the same file the bridge reads)."""
    return f"""
kafka:
  bootstrap_servers: ["{broker.bootstrap}"]
  group_id: g-{uuid.uuid4().hex[:8]}
  topics:
    scored: {topics.scored}
    requests: {topics.requests}
    labels: {topics.labels}
    deadletter: {topics.deadletter}
    aggregates: {topics.aggregates}
  poll_timeout_ms: 200
  client:
    session_timeout_ms: 2000
    heartbeat_interval_ms: 500
metrics:
  port: {free_port()}
storage:
  data_dir: {data_dir}
labels:
  park_grace_s: 3
{extra}"""


def section(server: LabelStudioServer, tag: str, poll_s: float) -> str:
    """The ``labelstudio:`` section of a test's configuration file."""
    return f"""
labelstudio:
  url: {server.url}
  token_env: LS_TOKEN_{tag}
  project_title: "Audit {tag}: {{model}}"
  positive: Fraud
  negative: Legitimate
  poll_interval_s: {poll_s}
  port: 0
  group_id: ls-{tag}
  state_file: bridge.sqlite
"""


def bridge_from_file(path: Path, token: str) -> LabelStudioBridge:
    """A bridge set up from a configuration file, as ``monitor queue labelstudio`` does."""
    config = load_config(path)
    ls = parse_labelstudio(yaml.safe_load(path.read_text()), str(path))
    return LabelStudioBridge(
        config, ls, state_path(ls, config.data_dir), token, consumer_config=FAST_GROUP
    )


def request(i: int, *, model: str = "default", deadline: float = T0 + 86_400) -> dict[str, Any]:
    """A label request as the daemon writes it."""
    return {
        "request_id": f"{uuid.uuid4().hex[:8]}{i:024x}",
        "id": f"rec-{i}",
        "model": model,
        "segment": "eu",
        "score": 0.75,
        "pred": 1,
        "pi": 0.05,
        "ts": T0 + i,
        "bucket": 0,
        "deadline": deadline,
        "payload": {"text": f"record {i}", "amount": i},
        "token": f"tok-{i}",
    }


def produce(bootstrap: str, topic: str, values: list[dict[str, Any]]) -> None:
    """Send JSON values keyed by request_id."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for v in values:
        producer.send(topic, key=v["request_id"].encode(), value=json.dumps(v).encode())
    producer.flush(10)
    producer.close(5)


def read_labels(bootstrap: str, topic: str, want: int, timeout_s: float = 30.0) -> list[Any]:
    """Up to ``want`` decoded label records (all of partition 0 from the start)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                out.extend(json.loads(m.value) for m in messages)
    finally:
        consumer.close()
    return out


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``check`` every 0.2 s until true; AssertionError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    msg = f"timed out after {timeout_s:.0f} s waiting for {what}"
    raise AssertionError(msg)


def project_tasks(client: LabelStudioClient, title: str) -> list[dict[str, Any]]:
    """Every task of the project titled ``title`` ([] when it does not exist yet)."""
    ids = [p["id"] for p in client.projects() if p.get("title") == title]
    return [t for pid in ids for t in client.tasks(pid)]


def choice(label: int) -> list[dict[str, Any]]:
    """An annotation result choosing class ``label`` (as the interface's alias stores it)."""
    value = {"choices": [str(label)]}
    return [{"from_name": "label", "to_name": "record", "type": "choices", "value": value}]


def annotate(client: LabelStudioClient, task_id: int, label: int | None) -> int:
    """Answer a task (None: skip it); returns the annotation id."""
    body: dict[str, Any] = (
        {"result": [], "was_cancelled": True}
        if label is None
        else {"result": choice(label), "was_cancelled": False}
    )
    out = client.call("POST", f"/api/tasks/{task_id}/annotations", body)
    return int(out["id"])


def edit(client: LabelStudioClient, annotation_id: int, label: int) -> None:
    """Change an annotation's answer (what 'Update' does in the UI)."""
    client.call("PATCH", f"/api/annotations/{annotation_id}", {"result": choice(label)})


def http_status(port: int, path: str) -> int:
    """The status of ``GET http://127.0.0.1:{port}{path}``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def metric(bridge: LabelStudioBridge, name: str, **labels: str) -> float:
    """One sample of the bridge's registry (0 when absent)."""
    value = bridge.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


@dataclass
class DaemonRun:
    """``monitor run`` as a subprocess."""

    config_path: Path
    log_path: Path
    config: Config = field(init=False)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.config = load_config(self.config_path)

    def start(self) -> DaemonRun:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(self.config_path)],
                stderr=err,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        return self

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.config.metrics.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bytes(resp.read()).decode()
        except OSError:
            return ""

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample of the daemon's /metrics (None when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics_text().splitlines():
            if line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric_name, _, rest = head.partition("{")
            if metric_name != name:
                continue
            got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if got == want:
                return float(value)
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


def produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Send raw values without keys (the scored stream)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for v in values:
        producer.send(topic, v)
    producer.flush(10)
    producer.close(5)


def wait_snapshot_labels(run: DaemonRun, n_labels: int) -> None:
    """Wait until the daemon's published estimates hold ``n_labels`` labels (the 7d window's
    count). A step's counters are exported at once, its snapshot later: ``Engine.maybe_publish``
    spaces snapshots by up to nine times their cost, seconds on a loaded machine."""
    wait_for(
        f"a snapshot of {n_labels} labels",
        lambda: (
            run.sample("monitor_window_labels", model="default", segment="", window="7d")
            == n_labels
        ),
    )


@dataclass
class AuditedStream:
    """A daemon and a bridge on one Label Studio project, with the daemon's requests as tasks."""

    daemon: DaemonRun
    bridge: LabelStudioBridge
    workload: Workload
    truth: dict[str, int]
    tag: str
    client: LabelStudioClient
    tasks: list[dict[str, Any]]  # in task-id order


def stream_into_labelstudio(
    broker: EmbeddedBroker,
    topics: TopicsConfig,
    server: LabelStudioServer,
    tmp_path: Path,
    cleanup: list[Any],
    *,
    labels_per_hour: int,
    seed: int,
) -> AuditedStream:
    """Start a daemon and a bridge, stream 1,200 scored records and wait until the daemon has
    read them all and every request it made is a task of the project."""
    tag = uuid.uuid4().hex[:8]
    path = tmp_path / "monitor.yaml"
    models = (
        f"models:\n  default:\n    labels_per_hour: {labels_per_hour}\n"
        "    expected_records_per_hour: 600\n"
    )
    path.write_text(
        yaml_config(broker, topics, tmp_path / "data", models + section(server, tag, 3600))
    )
    daemon = DaemonRun(path, tmp_path / "daemon.log").start()
    cleanup.append(daemon)
    bridge = bridge_from_file(path, server.token).start()
    cleanup.append(bridge)
    w = generate(WorkloadSpec(n=1200, hours=2.0, seed=seed))
    produce_raw(broker.bootstrap, topics.scored, [json.dumps(r).encode() for r in w.records()])
    client = LabelStudioClient(server.url, server.token)
    title = f"Audit {tag}: default"
    wait_for(
        "the daemon's requests as tasks",
        lambda: (
            daemon.sample("monitor_records_total", model="default") == len(w)
            and (n := daemon.sample("monitor_audit_requests_total", model="default")) is not None
            and n > 4
            and len(project_tasks(client, title)) == n
        ),
        timeout_s=90,
    )
    tasks = sorted(project_tasks(client, title), key=lambda t: t["id"])
    return AuditedStream(daemon, bridge, w, dict(w.truth_rows()), tag, client, tasks)
