"""A real Alertmanager (v2 API) receives the alerts the monitor pushes, firing and resolved."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.core.alerts import AlertStatus
from monitor.io.alertmanager import AlertmanagerPusher

pytestmark = pytest.mark.integration

AM_CONFIG = """\
route:
  receiver: "null"
  group_by: ["alertname", "model"]
receivers:
  - name: "null"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture
def alertmanager(alertmanager_bin: Path, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "am.yml"
    config.write_text(AM_CONFIG)
    port = _free_port()
    log = (tmp_path / "am.log").open("wb")
    proc = subprocess.Popen(
        [
            str(alertmanager_bin),
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"alertmanager did not start: {(tmp_path / 'am.log').read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ours(url: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = _get(f"{url}/api/v2/alerts")
    return [a for a in alerts if a["labels"].get("source") == "activeaudit-monitor"]


def _wait_for(url: str, predicate: Any, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        alerts = _ours(url)
        if predicate(alerts) or time.monotonic() > deadline:
            return alerts
        time.sleep(0.2)


def test_firing_then_resolved_alert_reaches_alertmanager(alertmanager: str) -> None:
    errors: list[int] = []
    pusher = AlertmanagerPusher(alertmanager, on_error=errors.append, retries=2, backoff_s=0.1)
    firing = AlertStatus(
        "f_below_floor", "fraud", "eu", "24h", True, 0.61, 0.65, 1.7e9,
        "F_0.5 0.55 on 24h (300 labels): upper bound 0.610 vs floor 0.650",
    )  # fmt: skip
    quiet = AlertStatus("f_dropped", "fraud", "eu", "24h", False, 0.8, 0.7)
    try:
        pusher.push([firing, quiet])
        alerts = _wait_for(alertmanager, lambda a: len(a) > 0)
        assert len(alerts) == 1, alerts
        alert = alerts[0]
        assert alert["labels"] == {
            "alertname": "MonitorFMeasureBelowFloor",  # as the rule names it: one group
            "alert": "f_below_floor",
            "severity": "critical",
            "model": "fraud",
            "segment": "eu",
            "window": "24h",
            "source": "activeaudit-monitor",
        }
        assert alert["annotations"]["runbook_url"].endswith("#alert-monitorfmeasurebelowfloor")
        assert alert["annotations"]["bound"] == "0.610"
        assert alert["annotations"]["threshold"] == "0.650"
        assert "upper bound" in alert["annotations"]["description"]
        assert alert["status"]["state"] == "active"

        pusher.push([AlertStatus("f_below_floor", "fraud", "eu", "24h", False, 0.7, 0.65), quiet])
        alerts = _wait_for(alertmanager, lambda a: len(a) == 0)
        assert alerts == []
    finally:
        pusher.close()
    assert errors == []
    assert pusher.delivered == 2
