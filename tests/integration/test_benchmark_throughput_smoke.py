"""``benchmarks/throughput.py`` end to end on a tiny stream: every phase runs and reports.

Its own broker, 20k records, one daemon variant, 2 s of paced latency, memory at 20k/60k
records. Checks the table's shape and that each measured path consumed every record; the
speeds themselves are measured by running the benchmark, not asserted here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(200)]

ROOT = Path(__file__).resolve().parents[2]
N = 20_000


def test_benchmark_runs_every_phase_on_a_tiny_stream(broker: object) -> None:
    # ``broker`` only proves the Tansu binary is available (skip locally, fail in CI)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.throughput",
            "--records",
            str(N),
            "--variants",
            "orjson,orjson@confluent-kafka",
            "--latency-seconds",
            "2",
            "--rate-fractions",
            "0.5",
            "--memory-records",
            "20000,60000",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "warning" not in out, out
    rows = {
        m.group(1).strip(): int(m.group(2))
        for m in re.finditer(r"^((?:ceiling|daemon)\S*(?: \S+)*)\s{2,}(\d+)\s", out, re.M)
    }
    assert rows["ceiling json.loads (defaults)"] == N, out
    assert rows["ceiling orjson (daemon fetch)"] == N, out
    assert rows["ceiling json.loads (confluent-kafka)"] == N, out
    assert rows["daemon orjson, max_poll_records 5000"] == N, out
    assert rows["daemon orjson, max_poll_records 5000, confluent-kafka"] == N, out
    assert "daemon at 50% of the ceiling rate, kafka-python" in rows, out
    assert "daemon at 50% of the ceiling rate, confluent-kafka" in rows, out
    latency = re.search(r"(\d+) requests, median (\d+) ms, p99 (\d+) ms", out)
    assert latency is not None and int(latency.group(1)) > 0, out
    assert 0 <= int(latency.group(2)) <= int(latency.group(3)), out
    memory = re.findall(r"^\s+(20000|60000)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert [m[0] for m in memory] == ["20000", "60000"], out
    assert all(0 < float(rss) <= float(peak) for _, rss, peak in memory), out
