"""Late labels are judged alike whatever order a daemon reads its topics in (Apache Kafka).

Written in this order: 20,000 scored records 3 h old (the deadline is 2 h), one record of the
current hour, then labels for 60 of the old records' requests, so every one of those labels is
late. Daemon A reads them as they are written. Daemons B are started afterwards on the backlog,
each with its own hash seed (kafka-python's fetch order across partitions follows it): one that
read the labels before the later record used to accept them. Every one must reject them as
``expired_request`` and end with A's estimates.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from tests.conftest import Broker
from tests.integration.test_daemon_kafka import Run, _produce, _read_all, _yaml

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka"), pytest.mark.timeout(300)]

N_OLD = 20_000
N_LABELS = 60


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    out: list[Run] = []
    yield out
    for r in out:
        if r.proc is not None and r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


def _deploy(broker: Broker, topics: TopicsConfig, tmp_path: Path, name: str) -> Run:
    group = f"g-{uuid.uuid4().hex[:8]}"
    data_dir = tmp_path / f"data-{name}"
    text = _yaml(broker, topics, data_dir, group, labels_per_hour=1000, records_per_hour=10)
    text = text.replace("  park_grace_s: 3", "  park_grace_s: 3\n  deadline_s: 2h")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return Run(path, load_config(path), tmp_path / f"{name}.log")


def _settled(run: Run, want: dict[tuple[str, int], int], timeout_s: float = 90.0) -> None:
    """Offsets at ``want`` and no label left waiting in the store."""
    run.wait_offsets(want, timeout_s)
    db_path = run.config.data_dir / "monitor.sqlite"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
                (parked,) = db.execute("SELECT COUNT(*) FROM parked").fetchone()
        except sqlite3.Error:
            parked = -1
        if parked == 0:
            return
        time.sleep(0.2)
    msg = f"labels still waiting\n{run.log_tail()}"
    raise AssertionError(msg)


def _labelled(run: Run) -> int:
    db_path = run.config.data_dir / "monitor.sqlite"
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        (n,) = db.execute("SELECT COUNT(*) FROM requests WHERE label IS NOT NULL").fetchone()
    return int(n)


def test_daemons_reading_in_other_orders_judge_late_labels_alike(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    tmp_path: Path,
    runs: list[Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = make_topics()
    a = _deploy(broker, topics, tmp_path, "a")
    runs.append(a)
    a.start()
    now = time.time()
    old = [
        json.dumps({"id": f"old-{i}", "score": 0.2 + (i % 60) / 100, "ts": now - 3 * 3600}).encode()
        for i in range(N_OLD)
    ]
    _produce(broker, topics.scored, old)
    a.wait_offsets({(topics.scored, 0): N_OLD}, 120)
    _produce(broker, topics.scored, [json.dumps({"id": "new-0", "score": 0.5}).encode()])
    a.wait_offsets({(topics.scored, 0): N_OLD + 1})
    requests = [json.loads(v) for v in _read_all(a.config, topics.requests)]
    answered = [r for r in requests if r["id"].startswith("old-")][:N_LABELS]
    assert len(answered) == N_LABELS
    labels = [json.dumps({"request_id": r["request_id"], "label": 0}).encode() for r in answered]
    _produce(broker, topics.labels, labels)
    want = {(topics.scored, 0): N_OLD + 1, (topics.labels, 0): N_LABELS}
    _settled(a, want)
    assert _labelled(a) == 0  # every label was written after the record past its deadline
    assert a.stop()[0] == 0
    expected = a.snapshot_repr()

    backlog = []
    for seed in range(3):
        b = _deploy(broker, topics, tmp_path, f"b{seed}")
        runs.append(b)
        monkeypatch.setenv("PYTHONHASHSEED", str(seed))
        b.start()
        backlog.append(b)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    for b in backlog:
        _settled(b, want)
        assert b.stop()[0] == 0
        assert _labelled(b) == 0, b.log_tail()
        assert b.snapshot_repr() == expected
