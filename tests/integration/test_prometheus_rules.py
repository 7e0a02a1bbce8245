"""The deploy/ kit against the real tools: promtool, amtool, Prometheus and Alertmanager.

- ``promtool check rules`` / ``check config`` and ``promtool test rules`` (every alert rule has
  named firing and not-firing cases in deploy/prometheus/tests);
- Alertmanager's configuration is valid and routes critical to the pager and warning to the
  ticket receiver;
- a real Prometheus server (loopback only) loads the rules and reports them healthy.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config.schema import TopicsConfig
from monitor.errors import RejectReason
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yaml"))
TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.yaml"))
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
JOB = "activeaudit-monitor"


def run(*argv: str | Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def test_promtool_check_rules(promtool: Path) -> None:
    result = run(promtool, "check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config(promtool: Path) -> None:
    result = run(promtool, "check", "config", PROMETHEUS_DIR / "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rule_unit_tests_pass(promtool: Path) -> None:
    assert TEST_FILES
    result = run(promtool, "test", "rules", *TEST_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rule_unit_tests_detect_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    # The same tests against rules whose floor alert no longer looks at the right decision:
    # they must fail, or they would not protect anything.
    rules = tmp_path / "rules"
    tests = tmp_path / "tests"
    shutil.copytree(PROMETHEUS_DIR / "rules", rules)
    shutil.copytree(PROMETHEUS_DIR / "tests", tests)
    alerts = rules / "alerts.yaml"
    text = alerts.read_text(encoding="utf-8")
    broken = text.replace('alert="f_below_floor"} == 1', 'alert="f_dropped"} == 1')
    assert broken != text
    alerts.write_text(broken, encoding="utf-8")
    result = run(promtool, "test", "rules", tests / "quality.yaml")
    assert result.returncode != 0
    assert "MonitorFMeasureBelowFloor" in result.stdout + result.stderr


def amtool_path() -> Path | None:
    found = shutil.which("amtool")
    return Path(found) if found else None


def test_alertmanager_config_is_valid_and_routes_by_severity(
    alertmanager_bin: Path, tmp_path: Path
) -> None:
    amtool = amtool_path()
    if amtool is None:
        # no amtool: let Alertmanager itself load the file (it exits at once on a bad config)
        check_by_starting_alertmanager(alertmanager_bin, tmp_path)
        return
    result = run(amtool, "check-config", ALERTMANAGER_CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    for labels, receiver in (
        (["severity=critical", "alertname=MonitorFMeasureBelowFloor", "model=spam"], "pager"),
        (["severity=warning", "alertname=MonitorNoLabelsArriving"], "ticket"),
        (["severity=info"], "null"),
    ):
        result = run(
            amtool,
            "config",
            "routes",
            "test",
            f"--config.file={ALERTMANAGER_CONFIG}",
            f"--verify.receivers={receiver}",
            *labels,
        )
        assert result.returncode == 0, f"{labels}: {result.stdout}{result.stderr}"


def check_by_starting_alertmanager(alertmanager_bin: Path, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            str(alertmanager_bin),
            f"--config.file={ALERTMANAGER_CONFIG}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"alertmanager exited: {proc.stderr and proc.stderr.read()}"
            try:
                status = get_json(f"http://127.0.0.1:{port}/api/v2/status")
            except OSError:
                time.sleep(0.2)
                continue
            assert "route" in status["config"]["original"]
            return
        pytest.fail("alertmanager did not answer within 20 s")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def running_prometheus(
    prometheus_bin: Path, tmp_path: Path, config: dict[str, Any]
) -> Iterator[str]:
    """A Prometheus server on a free loopback port with ``config``; yields its base URL."""
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                str(prometheus_bin),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                get_json(f"{url}/-/ready")
            except json.JSONDecodeError:
                break  # "Prometheus Server is Ready." is not JSON: the server is up
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("prometheus did not become ready within 30 s")
                time.sleep(0.2)
                continue
            break
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def kit_prometheus_config(targets: list[str], scrape_interval: str = "15s") -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with absolute rule paths and loopback targets only."""
    config: dict[str, Any] = yaml.safe_load(
        (PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8")
    )
    config["rule_files"] = [str(PROMETHEUS_DIR / f) for f in config["rule_files"]]
    config.pop("alerting")
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == JOB]
    for job in jobs:
        job["static_configs"] = [{"targets": targets}]
        job["scrape_interval"] = scrape_interval
        job["scrape_timeout"] = scrape_interval
    config["scrape_configs"] = jobs if targets else []
    return config


def test_real_prometheus_loads_the_rules(prometheus_bin: Path, tmp_path: Path) -> None:
    """Prometheus (the Debian server) starts with the kit's rules and finds them all healthy."""
    with running_prometheus(prometheus_bin, tmp_path, kit_prometheus_config([])) as url:
        groups: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not groups and time.monotonic() < deadline:
            groups = get_json(f"{url}/api/v1/rules")["data"]["groups"]
            time.sleep(0.1)
    rules = [rule for group in groups for rule in group["rules"]]
    alerts = {r["name"] for r in rules if r["type"] == "alerting"}
    records = {r["name"] for r in rules if r["type"] == "recording"}
    expected_alerts = {
        rule["alert"]
        for f in RULE_FILES
        for group in yaml.safe_load(f.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert alerts == expected_alerts
    assert len(records) == 8
    # every rule parsed; rules evaluated so far are healthy
    assert all(r["health"] in {"ok", "unknown"} for r in rules), [
        (r["name"], r.get("lastError")) for r in rules if r["health"] == "err"
    ]


def test_prometheus_scrapes_the_daemon_with_the_kit_config(
    prometheus_bin: Path,
    make_topics: Callable[..., TopicsConfig],
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    """The daemon, run as the image runs it (``monitor run --config``) with the compose config
    pointed at the test broker, is scraped by the kit's job and exposes what the rules query."""
    topics = make_topics()
    config = yaml.safe_load(
        (ROOT / "deploy" / "config" / "monitor.compose.yaml").read_text(encoding="utf-8")
    )
    config["kafka"]["topics"] = {
        "scored": topics.scored,
        "requests": topics.requests,
        "labels": topics.labels,
        "deadletter": topics.deadletter,
    }
    config["kafka"]["group_id"] = f"deploy-{topics.scored}"
    config["metrics"]["listen_address"] = "127.0.0.1"  # loopback only in tests
    # tests only: the broker's group join takes half the session timeout, and a daemon stopped
    # during the join waits for it
    config["kafka"]["client"] = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
    config_file = tmp_path / "monitor.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log_path = tmp_path / "monitor.log"
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "monitor",
                "run",
                "--config",
                str(config_file),
                "--bootstrap-servers",
                broker.bootstrap,
                "--metrics-port",
                str(port),
                "--data-dir",
                str(tmp_path / "state"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        prom_config = kit_prometheus_config([f"127.0.0.1:{port}"], scrape_interval="1s")
        with running_prometheus(prometheus_bin, tmp_path, prom_config) as url:
            query = urllib.parse.quote(f'up{{job="{JOB}"}}')
            names: set[str] = set()
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                assert daemon.poll() is None, log_path.read_text(errors="replace")[-2000:]
                result = get_json(f"{url}/api/v1/query?query={query}")["data"]["result"]
                if result and result[0]["value"][1] == "1":
                    names = set(get_json(f"{url}/api/v1/label/__name__/values")["data"])
                    if "monitor_ready" in names:
                        break
                time.sleep(0.3)
            else:
                pytest.fail(f"no successful scrape of job {JOB} within 40 s")
            reasons = get_json(
                f"{url}/api/v1/query?query="
                + urllib.parse.quote(f'count(monitor_invalid_records_total{{job="{JOB}"}})')
            )["data"]["result"]
    finally:
        stopping = time.monotonic()
        daemon.terminate()
        status = daemon.wait(timeout=60)  # terminationGracePeriodSeconds of the StatefulSet
    # SIGTERM is a clean stop, well within the grace period the kit gives the pod
    assert status == 0, log_path.read_text(errors="replace")[-2000:]
    assert time.monotonic() - stopping < 60
    # the series the operational alerts stand on exist from start-up, before any traffic
    for name in (
        "monitor_ready",
        "monitor_records_total",
        "monitor_audit_requests_total",
        "monitor_labels_received_total",
        "monitor_invalid_records_total",
        "monitor_label_budget_per_hour",
        "monitor_batch_seconds_bucket",
    ):
        assert name in names, name
    assert int(reasons[0]["value"][1]) == 2 * len(RejectReason)  # of the scored and labels inputs
