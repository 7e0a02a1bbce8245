"""SIGKILL at failpoints, for real, while the calibration map changes mid-stream.

``monitor run`` with ``recalibrate: true`` against the broker, a simulated audit team answering
its requests as they come, and the scored stream arriving in chunks: the map is refitted from
the labels while the stream is still being decided. The process SIGKILLs itself at failpoints
(all five stages). Labels arrive at times no rerun reproduces, so there is no uninterrupted run
to compare with; instead (as tests/unit/test_faults_crash_recalibration.py does in process):
every request id on the topic has one byte string, the topic holds exactly the requests the
store holds, the stored controls used several map versions, and a sampler given only the
stored controls, deciding the whole scored topic again, makes exactly the requests on the topic.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.core.records import decode_scored
from monitor.core.sampler import SamplerService
from monitor.io.store import Store
from monitor.runtime.failpoint import Failpoint
from monitor.sim.auditors import AuditPolicy, SimulatedAuditTeam
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import WorkloadSpec, generate
from monitor.testing.fakes import FakeLog, FakeSource
from tests.integration import test_daemon_kafka as kafka_tests
from tests.integration.test_daemon_kafka import Run, _produce, _read_all, _scored

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

deploy = kafka_tests.deploy

SCHEDULE = [
    ("decode", 3),
    ("store", 2),
    ("flush", 2),
    ("commit", 3),
    ("produce", 2),
    ("store", 4),
    ("decode", 5),
    ("commit", 2),
    ("flush", 4),
    ("produce", 3),
]  # a kill waits for the stream: each is hit while the chunks arrive
CHUNKS = 6


def test_sigkill_while_the_map_changes_keeps_requests_a_function_of_stored_controls(
    broker: EmbeddedBroker,
    deploy: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = generate(WorkloadSpec(n=3000, hours=6.0, seed=7))
    run = deploy(name="recal", recalibrate=True, keep_scores=False)
    text = run.config_path.read_text()
    text = text.replace("poll_timeout_ms: 200", "poll_timeout_ms: 200\n  max_poll_records: 50")
    run.config_path.write_text(text)
    run.config = load_config(run.config_path)
    assert run.config.model("default").recalibrate
    topics = run.config.kafka.topics
    scored = _scored(w)
    team = SimulatedAuditTeam(
        dict(w.truth_rows()),
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=AuditPolicy(delay_s=0.0, seed=3),
    ).start()
    size = len(scored) // CHUNKS
    done = threading.Event()

    def feed() -> None:
        """A chunk, then wait until the daemon decided it and took the labels it brought."""
        for c in range(CHUNKS):
            before = team.stats.answered
            _produce(broker, topics.scored, scored[c * size : (c + 1) * size])
            deadline = time.monotonic() + 40.0
            while time.monotonic() < deadline and not done.is_set():
                off = run.offsets()
                answered = team.stats.answered
                if (
                    off.get((topics.scored, 0), 0) >= (c + 1) * size
                    and answered > before
                    and off.get((topics.labels, 0), 0) >= answered
                ):
                    break
                time.sleep(0.2)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    kills: list[str] = []
    try:
        for stage, n in SCHEDULE:
            monkeypatch.setenv(Failpoint.ENV, f"{stage}:{n}")
            run.start()
            assert run.proc is not None
            try:
                code = run.proc.wait(60)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()
                continue
            assert code == -signal.SIGKILL, run.log_tail()
            kills.append(stage)
        monkeypatch.delenv(Failpoint.ENV)
        run.start()
        feeder.join(240)
        run.wait_offsets({(topics.scored, 0): len(scored)}, 90)
        time.sleep(3.0)  # the last labels come back and refit the map
        code, _ = run.stop()
        assert code == 0, run.log_tail()
    finally:
        done.set()
        team.stop()

    assert len(kills) >= 7 and len(set(kills)) >= 4, kills
    by_id: dict[str, set[bytes]] = {}
    for value in _read_all(run.config, topics.requests):
        by_id.setdefault(json.loads(value)["request_id"], set()).add(value)
    assert by_id and all(len(v) == 1 for v in by_id.values())  # replays repeat the bytes
    store = Store(run.config.data_dir)
    try:
        state = store.load()
    finally:
        store.close()
    assert {s.request.request_id for s in state.requests} == set(by_id)
    versions = {c.calibration.version for c in state.controls.values()}
    assert len(versions) >= 3, versions  # the map changed while the stream was decided

    sampler = SamplerService(run.config, controls=state.controls)
    log = FakeLog()
    log.create(topics.scored)
    for value in _read_all(run.config, topics.scored):
        log.append(topics.scored, value)
    source = FakeSource(log, [topics.scored], lambda: {})
    again: dict[str, bytes] = {}
    while raw := source.poll(10_000, 0.0):
        batch, bad = decode_scored(raw, run.config)
        assert not bad
        again.update({r.request_id: r.to_json() for r in sampler.process(batch).requests})
    assert again == {rid: next(iter(v)) for rid, v in by_id.items()}
