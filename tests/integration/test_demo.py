"""``monitor demo`` end to end: a short run prints the comparison table and cleans up."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.sim.demo import Metrics, parse_metrics
from monitor.sim.embedded_broker import EmbeddedBroker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(
    r"^h(24|48), (before|after) drift\s+(1h|24h|7d)\s+.*?"
    r"(\d\.\d{3}) \[(\d\.\d{3}), (\d\.\d{3})\]\s+(\d\.\d{3})\s+(yes|NO)",
    re.MULTILINE,
)


def _demo(*extra: str) -> list[str]:
    return [sys.executable, "-m", "monitor", "demo", *extra]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def _closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return True
    return False


def _started(out: str) -> tuple[int, int, int]:
    """(broker port, daemon pid, metrics port) announced by the demo."""
    broker = re.search(r"Tansu on 127\.0\.0\.1:(\d+)", out)
    daemon = re.search(r"daemon: pid (\d+).*?http://127\.0\.0\.1:(\d+)/metrics", out)
    assert broker and daemon, out
    return int(broker.group(1)), int(daemon.group(1)), int(daemon.group(2))


def test_short_demo_prints_estimates_beside_truth(broker: EmbeddedBroker) -> None:
    # the session broker fixture only proves the Tansu binary is there; the demo starts its own
    started = time.monotonic()
    proc = subprocess.run(
        _demo(
            "--records",
            "12000",
            "--duration-s",
            "20",
            "--progress-every-s",
            "2",
            "--metrics-port",
            "0",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert elapsed < 90, f"demo took {elapsed:.0f} s"
    assert "event hour" in out and "F1 24h" in out, "progress lines while it runs"
    assert "warning:" not in out, "the daemon's windows hold exactly the stream's records"
    rows = ROW.findall(out)
    assert len(rows) == 6, out  # two checkpoints x windows 1h, 24h, 7d
    for _hour, _phase, window, est, lo, hi, true_f, covered in rows:
        assert 0.0 <= float(lo) <= float(est) <= float(hi) <= 1.0
        assert 0.0 <= float(true_f) <= 1.0
        assert covered == ("yes" if float(lo) <= float(true_f) <= float(hi) else "NO")
        if window != "1h":  # ~600-1200 labels: se about 0.02-0.03, so 0.12 is > 4 se
            assert abs(float(est) - float(true_f)) < 0.12, (window, est, true_f)
    truth = {(h, w): float(t) for h, _p, w, _e, _l, _u, t, _c in rows}
    estimate = {(h, w): float(e) for h, _p, w, e, _l, _u, _t, _c in rows}
    assert truth[("24", "24h")] - truth[("48", "24h")] > 0.08, "the drift shows in the truth"
    assert estimate[("24", "24h")] - estimate[("48", "24h")] > 0.05, "and in the estimate"
    assert re.search(r"labels used: [\d,]+ for 12,000 records", out)
    assert "metrics: http://127.0.0.1:" in out
    assert "everything it started is stopped" in out and "kept in" not in out
    broker_port, daemon_pid, metrics_port = _started(out)
    assert _gone(daemon_pid) and _closed(broker_port) and _closed(metrics_port)


def test_ctrl_c_stops_everything(broker: EmbeddedBroker) -> None:
    proc = subprocess.Popen(
        _demo("--records", "20000", "--duration-s", "60", "--metrics-port", "0"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = ""
    deadline = time.monotonic() + 60
    while "event hour" not in out and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    broker_port, daemon_pid, metrics_port = _started(out)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=40)
    out += rest
    assert proc.returncode == 130, out
    assert "interrupted" in out and "kept in" not in out, "nothing left behind"
    assert _gone(daemon_pid) and _closed(broker_port) and _closed(metrics_port), out


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--records", "0"]) == 2
    assert "--records must be > 0" in capsys.readouterr().err


def test_metrics_parser() -> None:
    text = (
        "# HELP monitor_f_measure x\n# TYPE monitor_f_measure gauge\n"
        'monitor_f_measure{alpha="0.5",model="m",segment="",window="24h"} 0.75\n'
        'monitor_records_total{model="m"} 10.0\nmonitor_records_total{model="n"} 5\n'
        'monitor_x{a="q\\"uote"} NaN\n'
    )
    m = Metrics(parse_metrics(text))
    assert m.get("monitor_f_measure", window="24h", segment="") == 0.75
    assert math.isnan(m.get("monitor_f_measure", window="1h"))
    assert m.total("monitor_records_total") == 15.0
    assert m.samples[-1][1] == {"a": 'q"uote'}
