"""The deploy/ kit against the real tools: promtool, amtool, Prometheus and Alertmanager.

- ``promtool check rules`` / ``check config`` and ``promtool test rules`` (every alert rule has
  named firing and not-firing cases in deploy/prometheus/tests);
- Alertmanager's configuration is valid and routes critical to the pager and warning to the
  ticket receiver;
- a real Prometheus server (loopback only) loads the rules and reports them healthy.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yaml"))
TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.yaml"))
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


def run(*argv: str | Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def test_real_prometheus_loads_the_rules(prometheus_bin: Path, tmp_path: Path) -> None:
    """Prometheus (the Debian server) starts with the kit's rules and finds them all healthy."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    # loopback only: keep the rules, drop the compose host names
    config["rule_files"] = [str(PROMETHEUS_DIR / f) for f in config["rule_files"]]
    config.pop("alerting")
    config["scrape_configs"] = []
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(prometheus_bin),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        groups: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                stderr = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"prometheus exited: {stderr[-2000:]}")
            try:
                groups = get_json(f"http://127.0.0.1:{port}/api/v1/rules")["data"]["groups"]
            except OSError:
                time.sleep(0.2)
                continue
            if groups:
                break
            time.sleep(0.2)
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
    finally:
        proc.terminate()
        proc.wait(timeout=10)
