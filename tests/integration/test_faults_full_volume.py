"""A full data volume: the daemon and the Label Studio bridge ride it out, not ready, and resume
when there is room.

The data directory is a small tmpfs of its own (mounting one needs root, as CI runs; a
laptop without it skips). Half the stream is read, the volume is filled to the last byte with a
file beside the store, and the other half is produced: SQLite's transactions fail with
"database or disk is full". The daemon used to exit 2 there and take its exported estimates and
alert states with it. It must stay up, answer 503 on ``/readyz``, keep the estimates of the
first half on ``/metrics``, log the state once; and once the file is removed, be ready again and
end as the engine's undisturbed run: the same requests (each process writes a step's requests
once, however often the step is retried) and estimates. The bridge used to stop for good at its
first refused write, with the tasks of that import in Label Studio and not in its state file.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sqlite3
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_server import LabelStudioServer
from monitor.bridges.ls_state import BridgeState
from monitor.config.load import load_config
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import Broker, missing_component
from tests.integration.ls_helpers import (
    FAST_GROUP,
    annotate,
    http_status,
    ls_config,
    metric,
    produce,
    project_tasks,
    read_labels,
    request,
    wait_for,
)
from tests.integration.test_daemon_kafka import (
    Run,
    _answer_and_stop,
    _predict,
    _produce,
    _scored,
    _scrape,
    _yaml,
)
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_kafka_real import _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VOLUME = "16m"
FAIL_S = 30.0  # the second half's first commit fails within this
READY_S = 25.0  # after the room is made: backoff capped at 10 s


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of ``VOLUME`` bytes mounted for this test, unmounted after it."""
    path = tmp_path / "volume"
    path.mkdir()
    if os.geteuid() != 0:
        missing_component("a tmpfs to fill: mounting one needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={VOLUME},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing_component(f"a tmpfs to fill: mount failed: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path) -> int:
    """Write ``path`` until the volume refuses a byte more (ENOSPC); the bytes written."""
    chunk = b"\0" * 65536
    written = 0
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]


def test_a_full_data_volume_is_ridden_out_and_loses_nothing(
    broker: Broker, make_topics: Callable[..., TopicsConfig], volume: Path, tmp_path: Path
) -> None:
    topics = make_topics()
    path = tmp_path / "full.yaml"
    path.write_text(
        _yaml(broker, topics, volume / "data", f"g-{topics.scored}", max_poll_records=50)
    )
    run = Run(path, load_config(path), tmp_path / "full.log")
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=8000, hours=8.0, seed=23))
    expected, predicted = _predict(run.config, w, tmp_path)
    scored = _scored(w)
    half = len(scored) // 2
    _produce(broker, topics.scored, scored[:half])
    run.start()
    run.wait_offsets({(topics.scored, 0): half})
    filler = volume / "filler"
    filled = _fill(filler)
    _produce(broker, topics.scored, scored[half:])

    _wait_for(
        "the store to refuse a write", lambda: bool(run.events("store_unavailable")), run, FAIL_S
    )
    (failed,) = run.events("store_unavailable")
    time.sleep(3.0)  # retried meanwhile; it does not exit
    metrics = _scrape(run, "monitor_ready 0.0")
    status = _readyz(port)
    stored_while_full = run.offsets()[(topics.scored, 0)]
    stop_code, _ = run.stop()  # SIGTERM on the full volume, then started again on it
    run.start()
    _wait_for(
        "the restarted daemon to refuse a write",
        lambda: len(run.events("store_unavailable")) == 2,
        run,
        FAIL_S,
    )
    restarted = (_scrape(run, "monitor_ready 0.0"), _readyz(port))

    filler.unlink()
    ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, READY_S)
    requests = _answer_and_stop(run, broker, w, expected)
    print(
        f"filled {filled} bytes at offset {half}/{len(w)}; stored {stored_while_full} while full; "
        f"error {failed['error']!r}; ready {ready_after:.1f} s after the room was made; "
        f"{len(requests)} requests written for {len(expected)}"
    )

    assert "database or disk is full" in str(failed["error"]), failed
    assert str(volume / "data") in str(failed["error"]), failed
    assert status == 503 and stop_code == 0
    assert restarted[1] == 503
    assert re.search(r'monitor_window_records\{[^}]*window="24h"[^}]*\} [1-9]', restarted[0])
    # the first half's estimates are still exported (no label yet: the label-free ones)
    assert re.search(r'monitor_window_records\{[^}]*window="24h"[^}]*\} [1-9]', metrics), metrics
    assert half <= stored_while_full < len(w)
    assert len(run.events("store_available")) == 1
    assert not run.events("crashed") and not run.events("broker_down")
    # nothing lost: every request, estimates as uninterrupted; a process writes a request once
    # however often its step is retried (the restart on the full volume writes its step's again:
    # 306 for 300, 324 when each retry wrote them)
    assert set(requests) == set(expected)
    assert max(Counter(requests).values()) <= 2
    assert run.snapshot_repr() == predicted


def test_the_label_studio_bridge_rides_out_a_full_volume(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    volume: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bridge's state file on a volume filled while it runs: 300 requests arrive, the import
    of the first batch the consumer reads creates its tasks in Label Studio and the state file
    refuses to record them, and an auditor answers meanwhile. The bridge must stay up
    (``/healthz`` 200, ``/readyz`` 503), commit nothing past what it recorded, and once there is
    room adopt those tasks instead of importing them again, import the rest, publish the answer
    once and commit everything. Restarted while the volume is still full, the bridge used to
    exit at start-up (its first poll must record the tasks it adopts); it must come up not
    ready and go on once there is room."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], poll_interval_s=1.0)
    config = Config(kafka=KafkaConfig(bootstrap_servers=(broker.bootstrap,), topics=topics))
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    title = ls.title("default")
    first, second = [request(i) for i in range(5)], [request(i) for i in range(5, 305)]
    ids = [r["request_id"] for r in first + second]
    state = volume / "bridge.sqlite"
    bridge = LabelStudioBridge(config, ls, state, labelstudio.token, consumer_config=FAST_GROUP)

    def events(name: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "event", None) == name]

    def committed() -> int | None:
        probe = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=ls.group_id, enable_auto_commit=False
        )
        try:
            offset: int | None = probe.committed(TopicPartition(topics.requests, 0))
            return offset
        finally:
            probe.close(autocommit=False)

    bridge.start()
    try:
        produce(broker.bootstrap, topics.requests, first)
        wait_for("5 tasks", lambda: len(project_tasks(client, title)) == 5)
        wait_for("ready", lambda: http_status(bridge.port, "/readyz") == 200)
        assert bridge.settle()  # the tasks' marks written: the next write is the next import's
        filler = volume / "filler"
        filled = _fill(filler)
        produce(broker.bootstrap, topics.requests, second)
        wait_for("the state file to refuse a write", lambda: bool(events("store_unavailable")), 30)
        task = next(
            t
            for t in project_tasks(client, title)
            if t["meta"]["request_id"] == first[0]["request_id"]
        )
        annotate(client, task["id"], 1)
        time.sleep(5.0)  # retried meanwhile; the answer waits for the tasks to be recorded
        status = (http_status(bridge.port, "/readyz"), http_status(bridge.port, "/healthz"))
        ready_gauge = metric(bridge, "labelstudio_bridge_ready")
        tasks_while_full = len(project_tasks(client, title))
        committed_while_full = committed()
        known_while_full = len(bridge.state.known(ids))
        bridge.stop()  # and started again on the full volume
        bridge = LabelStudioBridge(config, ls, state, labelstudio.token, consumer_config=FAST_GROUP)
        bridge.start()
        restarted = (http_status(bridge.port, "/readyz"), http_status(bridge.port, "/healthz"))

        filler.unlink()
        freed = time.monotonic()
        wait_for("/readyz 200", lambda: http_status(bridge.port, "/readyz") == 200, 30)
        ready_s = time.monotonic() - freed
        wait_for("everything committed", lambda: committed() == len(ids), 30)
        assert read_labels(broker.bootstrap, topics.labels, 1, timeout_s=30), "no label"
        assert bridge.settle()  # then no second one
        labels = read_labels(broker.bootstrap, topics.labels, 2, timeout_s=3)
        known = len(bridge.state.known(ids))
        alive = bridge.alive
    finally:
        bridge.stop()
    tasks = project_tasks(client, title)
    print(
        f"filled {filled} bytes; {tasks_while_full} tasks in Label Studio and {known_while_full} "
        f"recorded while full; ready {ready_s:.1f} s after the room was made"
    )

    failed = [str(getattr(r, "error", "")) for r in events("store_unavailable")]
    assert len(failed) == 2, failed  # the first bridge's, and the restarted one's start-up
    assert all("database or disk is full" in f and str(state) in f for f in failed)
    assert status == restarted == (503, 200) and ready_gauge == 0
    assert alive and bridge.error is None
    # a batch of the second requests imported, not recorded; the rest held back
    assert len(first) < tasks_while_full and known_while_full == len(first)
    assert committed_while_full == len(first)
    assert Counter(t["meta"]["request_id"] for t in tasks) == Counter(ids)  # one task each
    assert known == len(ids)
    adopted = metric(bridge, "labelstudio_bridge_tasks_adopted_total", model="default")
    assert adopted == tasks_while_full - len(first)
    assert [(x["request_id"], x["label"]) for x in labels] == [(first[0]["request_id"], 1)]
    assert len(events("store_available")) == 1 and not events("bridge_failed")


def test_a_bridge_state_file_of_an_earlier_release_opens_on_a_full_volume(volume: Path) -> None:
    """The bridge's id (``meta.bridge``) is a table this release adds; made with the schema, it
    was a write at the first start after an upgrade, and a volume full then stopped the bridge
    with "database or disk is full" instead of bringing it up not ready. Opened now without an
    id for that run, it is made at the next start with room."""
    path = volume / "state.sqlite"
    BridgeState(path).close()
    earlier = sqlite3.connect(path, isolation_level=None)
    earlier.execute("DROP TABLE bridge")  # the file as the last release left it
    filler = volume / "filler"
    _fill(filler)  # while it is open: its WAL files stay, as when a running bridge fills it
    earlier.close()
    full = BridgeState(path)
    assert full.instance is None
    full.close()
    filler.unlink()
    made = BridgeState(path)
    assert made.instance is not None
    made.close()
    again = BridgeState(path)
    assert again.instance == made.instance
    again.close()
