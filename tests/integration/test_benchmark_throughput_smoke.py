"""``benchmarks/throughput.py`` end to end on a tiny stream: every phase runs and reports.

Its own brokers (Tansu, then Apache Kafka), 20k records, one daemon variant per client, 2 s of
paced latency, memory at 20k/60k records. Checks each table's shape and that each measured path
consumed every record; the speeds themselves are measured by running the benchmark, not asserted
here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.sim.kafka_broker import KAFKA_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
N = 20_000


def test_benchmark_runs_every_phase_on_a_tiny_stream(
    tansu_broker: object, kafka_broker: object
) -> None:
    # the fixtures only prove both brokers can run here (skip locally, fail in CI)
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
            "--brokers",
            "tansu,kafka",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "warning" not in proc.stdout, proc.stdout
    tables = re.split(r"^Throughput on ", proc.stdout, flags=re.M)[1:]
    assert [t.split(",")[0] for t in tables] == ["Tansu 0.6.0", f"Apache Kafka {KAFKA_VERSION}"]
    for table in tables:
        _check_table(table)
    memory = re.findall(r"^\s+(20000|60000)\s+([\d.]+)\s+([\d.]+)", proc.stdout, re.M)
    assert [m[0] for m in memory] == ["20000", "60000"], proc.stdout
    assert all(0 < float(rss) <= float(peak) for _, rss, peak in memory), proc.stdout


def _check_table(out: str) -> None:
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
