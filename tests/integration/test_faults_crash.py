"""Crash anywhere, for real: ``monitor run`` SIGKILLs itself at failpoints against the broker.

Each restart arms ``MONITOR_FAILPOINT=stage:n`` (decode, produce, flush, store, commit), so
the process dies between two effects of a step; twice the SQLite WAL is then torn (its tail
cut, as by a write interrupted mid-frame) before the restart. Labels are delayed: half are in
the labels topic before the start (they park until their request), half arrive midway. The
final requests (deduplicated by request id), labels and estimates must equal the engine's
uninterrupted run over the same stream. More kill points run in process in
tests/unit/test_faults_crash_fakes.py; here the point is the real process death, broker and disk.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.io.store import DB_NAME, Store
from monitor.runtime.failpoint import Failpoint
from monitor.sim.workload import Workload, WorkloadSpec, generate
from tests.conftest import Broker
from tests.integration import test_daemon_kafka as kafka_tests
from tests.integration.test_daemon_kafka import (
    Run,
    _labels,
    _predict,
    _produce,
    _read_all,
    _scored,
)

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka"), pytest.mark.timeout(300)]

deploy = kafka_tests.deploy  # the daemon-as-a-subprocess fixture

# (stage, n): die the n-th time a step reaches the stage; four kills per stage
SCHEDULE = [
    ("decode", 2),
    ("flush", 2),
    ("store", 3),
    ("commit", 2),
    ("produce", 1),
    ("store", 1),
    ("decode", 4),
    ("commit", 1),
    ("flush", 1),
    ("produce", 3),
    ("commit", 3),
    ("store", 2),
    ("produce", 2),
    ("decode", 1),
    ("flush", 3),
    ("commit", 1),
    ("decode", 3),
    ("store", 1),
    ("produce", 1),
    ("flush", 2),
]
TEAR_AFTER = {3, 10, 15}  # tear the WAL after these kills ("commit": the WAL holds commits)


@pytest.fixture(scope="module")
def small_workload() -> Workload:
    return generate(WorkloadSpec(n=3000, hours=6.0, seed=5))


def _tear_wal(data_dir: Path) -> int:
    wal = data_dir / f"{DB_NAME}-wal"
    size = wal.stat().st_size if wal.exists() else 0
    if size > 200:
        with wal.open("r+b") as f:
            f.truncate(size - 100)  # the last frame is cut in the middle
            f.seek(0, 2)
            f.write(b"\xff" * 37)  # and followed by garbage
        return size
    return 0


def _stored_offset(run: Run, topic: str) -> int:
    """The scored offset in the store, read by another process.

    Read-only, so that closing it does not checkpoint the WAL away. Not in this process:
    SQLite caches a database's WAL index per process, and a connection kept
    here across the tear would make the daemon trust the stale index.
    """
    code = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], uri=True); "
        "q = 'SELECT next_offset FROM offsets WHERE topic=?'; "
        "r = db.execute(q, (sys.argv[2],)).fetchone(); print(r[0] if r else 0)"
    )
    db_path = run.config.data_dir / DB_NAME
    out = subprocess.run(
        [sys.executable, "-c", code, f"file:{db_path}?mode=ro", topic],
        capture_output=True,
        check=True,
    )
    return int(out.stdout)


def test_sigkill_at_failpoints_with_torn_wal_equals_uninterrupted_run(
    broker: Broker,
    deploy: Callable[..., Run],
    small_workload: Workload,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = small_workload
    run = deploy(name="killed")
    text = run.config_path.read_text()
    run.config_path.write_text(
        text.replace("poll_timeout_ms: 200", "poll_timeout_ms: 200\n  max_poll_records: 50")
        # 500 records an hour: controls refreshed at records 100, 200, 400 of each hour
        .replace(
            "    expected_records_per_hour:",
            "    refresh_records: 100\n    expected_records_per_hour:",
        )
    )
    run.config = load_config(run.config_path)
    topics = run.config.kafka.topics
    expected, predicted = _predict(run.config, w, tmp_path)
    labels = _labels(w, expected)
    _produce(broker, topics.scored, _scored(w))
    _produce(broker, topics.labels, labels[::2])  # early half: parked until their request

    t0 = time.monotonic()
    kills: list[str] = []
    torn: list[int] = []
    rewound: list[int] = []
    missed: list[str] = []
    for i, (stage, n) in enumerate(SCHEDULE):
        if i == len(SCHEDULE) // 2:
            _produce(broker, topics.labels, labels[1::2])  # the delayed half
        monkeypatch.setenv(Failpoint.ENV, f"{stage}:{n}")
        run.start()
        assert run.proc is not None
        try:
            code = run.proc.wait(60)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.proc.wait()
            missed.append(f"{stage}:{n}")
            continue
        assert code == -signal.SIGKILL, run.log_tail()
        kills.append(f"{stage}:{n}")
        if i in TEAR_AFTER:
            before = _stored_offset(run, topics.scored)
            torn.append(_tear_wal(run.config.data_dir))
            after = _stored_offset(run, topics.scored)
            assert after <= before  # the torn transaction is gone, the older ones are intact
            rewound.append(before - after)
    monkeypatch.delenv(Failpoint.ENV)
    run.start()
    run.wait_offsets({(topics.scored, 0): len(w), (topics.labels, 0): len(labels)}, 90)
    elapsed = time.monotonic() - t0
    # every request is acknowledged before the offsets of the records that caused it are stored
    got = [json.loads(v) for v in _read_all(run.config, topics.requests)]
    n_produced = len(got)
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    print(f"kills={kills} missed={missed} torn_wal_bytes={torn} rewound={rewound}")
    print(f"{len(kills)} kills and the catch-up in {elapsed:.0f} s")
    print(f"requests produced={n_produced} distinct={len(expected)}")

    assert len(kills) >= 18, (kills, missed)
    assert any(torn), "no WAL was torn"
    # requests: every expected one, none invented; a replay repeats identical bytes
    by_id: dict[str, set[str]] = {}
    for req in got:
        by_id.setdefault(req["request_id"], set()).add(json.dumps(req, sort_keys=True))
    want = {json.loads(v)["request_id"]: json.loads(v) for v in expected}
    assert by_id.keys() == want.keys()
    assert all(vals == {json.dumps(want[r], sort_keys=True)} for r, vals in by_id.items())
    # labels: each request labelled once, with the auditor's answer
    store = Store(run.config.data_dir)
    try:
        stored = {s.request.request_id: s.label for s in store.load().requests}
    finally:
        store.close()
    truth = dict(w.truth_rows())
    assert stored == {r: truth[q["id"]] for r, q in want.items()}
    # estimates: identical to the uninterrupted run
    assert run.snapshot_repr() == predicted
    assert len(run.events("failpoint_armed")) == len(SCHEDULE)
