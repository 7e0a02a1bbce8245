"""Deployments gone wrong, with ``monitor run`` as a subprocess.

- No broker at start-up: the daemon waits (retrying with backoff, logged once), serves
  ``/healthz`` 200 and ``/readyz`` 503, uses little CPU, and stops cleanly on SIGTERM.
- A second daemon on the same data directory is refused with one clear message, exit 2.
- Exposure: with a token secret (from the environment) and payloads carrying a marker, neither
  appears in the logs or in ``/metrics``, including for rejected records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import WorkloadSpec, generate
from tests.integration import test_daemon_kafka as kafka_tests
from tests.integration.test_daemon_kafka import Run, _predict, _produce
from tests.integration.test_faults_outage import _cpu_seconds, _readyz

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

deploy = kafka_tests.deploy

SECRET = "s3cr3t-token-key-DO-NOT-LEAK"
MARKER = "PAYLOAD-MARKER-7f3a"


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def test_create_topics_without_a_broker_retries_soon_and_stops_at_once(tmp_path: Path) -> None:
    """``--create-topics`` with no broker: the admin client waited kafka-python's 30 s to
    bootstrap, so the first ``topics_retry`` line came 30 s after the start and a SIGTERM in
    that wait took 26 s; it gives up after the daemon's 5 s now."""
    config = tmp_path / "monitor.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: ['127.0.0.1:{free_port()}']}}\n"
        f"metrics: {{port: {free_port()}}}\nstorage: {{data_dir: '{tmp_path / 'data'}'}}\n"
    )
    log_path = tmp_path / "run.log"
    cmd = [sys.executable, "-m", "monitor", "run", "--config", str(config), "--create-topics"]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(cmd, stderr=log_file, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20  # 30 s and more before
        while '"topics_retry"' not in log_path.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_unreachable_broker_waits_not_ready_and_a_second_daemon_is_refused(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = tmp_path / "monitor.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: ['127.0.0.1:{free_port()}'], poll_timeout_ms: 200}}\n"
        f"metrics: {{port: {port}}}\nstorage: {{data_dir: '{tmp_path / 'data'}'}}\n"
    )
    log_path = tmp_path / "first.log"
    cmd = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
    with log_path.open("wb") as log_file:
        first = subprocess.Popen(cmd, stderr=log_file, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while _status(port, "/healthz") != 200:
            assert time.monotonic() < deadline and first.poll() is None, log_path.read_text()
            time.sleep(0.2)
        time.sleep(3.0)
        cpu0, t0 = _cpu_seconds(first.pid), time.monotonic()
        readyz = []
        for _ in range(8):
            readyz.append(_readyz(port))
            time.sleep(0.5)
        cpu_share = (_cpu_seconds(first.pid) - cpu0) / (time.monotonic() - t0)
        assert first.poll() is None, log_path.read_text()  # it waits, it does not exit
        assert set(readyz) == {503}
        assert cpu_share < 0.15, cpu_share

        second = subprocess.run(
            [*cmd, "--metrics-port", str(free_port())], check=False, capture_output=True, timeout=60
        )
        err = second.stderr.decode()
        assert second.returncode == 2, err
        assert err.count("monitor run: error:") == 1 and "in use by another monitor" in err, err
    finally:
        t_stop = time.monotonic()
        first.send_signal(signal.SIGTERM)
        code = first.wait(30)
        took = time.monotonic() - t_stop
    assert code == 0, log_path.read_text()
    assert took < 10.0, took  # a connection attempt gives up within 5 s
    events = [json.loads(x).get("event") for x in log_path.read_text().splitlines()]
    assert events.count("broker_down") == 1, events
    print(f"no broker: /readyz {sorted(set(readyz))}, CPU {cpu_share:.1%} of a core")


def test_no_secret_or_payload_in_logs_or_metrics(
    broker: EmbeddedBroker,
    deploy: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = deploy(name="exposed")
    text = run.config_path.read_text().replace(
        "labels:\n", "labels:\n  token_secret: {env: MONITOR_TEST_TOKEN_SECRET}\n"
    )
    run.config_path.write_text(text)
    monkeypatch.setenv("MONITOR_TEST_TOKEN_SECRET", SECRET)
    run.config = load_config(run.config_path)
    topics = run.config.kafka.topics
    w = generate(WorkloadSpec(n=1500, hours=3.0, seed=31))
    records = [{**r, "payload": {"note": MARKER, "secret_echo": MARKER}} for r in w.records()]
    bad = [
        {"id": "bad-1", "score": 1.5, "payload": MARKER},
        {"id": MARKER, "score": "x", "payload": MARKER},
        {"id": "bad-3", "score": 0.5, "ts": "never", "payload": {"k": MARKER}},
    ]
    _produce(broker, topics.scored, [json.dumps(r).encode() for r in [*records, *bad]])
    expected, _ = _predict(run.config, w, tmp_path)
    wrong_token = [
        json.dumps(
            {"request_id": json.loads(v)["request_id"], "label": 1, "token": MARKER}
        ).encode()
        for v in expected[:5]
    ]
    truth = dict(w.truth_rows())
    labels = [
        json.dumps(
            {"request_id": q["request_id"], "label": truth[q["id"]], "token": q["token"]}
        ).encode()
        for q in map(json.loads, expected)
    ]
    _produce(broker, topics.labels, [*labels, *wrong_token])
    run.start()
    run.wait_offsets({(topics.scored, 0): len(records) + len(bad)})
    run.wait_offsets({(topics.labels, 0): len(expected) + len(wrong_token)})
    time.sleep(1.2)  # a snapshot after the last batch
    with urllib.request.urlopen(
        f"http://127.0.0.1:{run.config.metrics.port}/metrics", timeout=5
    ) as resp:
        metrics = bytes(resp.read()).decode()
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    logs = run.log_path.read_text()
    for leak in (SECRET, MARKER):
        assert leak not in logs
        assert leak not in metrics
    assert 'monitor_invalid_records_total{input="labels",reason="bad_token"} 5.0' in metrics
    assert os.environ["MONITOR_TEST_TOKEN_SECRET"] == SECRET
    served = [json.loads(x) for x in logs.splitlines() if "metrics_http_started" in x]
    assert served and served[0]["address"] == "127.0.0.1"
