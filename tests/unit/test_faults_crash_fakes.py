"""Crash anywhere, in process: a failpoint "kills" the engine between any two effects of a step.

The kill is an exception raised by ``Failpoint`` at its stage (the real daemon
SIGKILLs itself instead, see tests/integration/test_faults_crash.py); the harness then drops
everything in memory, closes the store (an open transaction rolls back) and restarts from the
store over the same in-memory log. Labels are delayed: half are answered only after a third
of the kills. The final requests, labels and estimates must equal an uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from monitor.config.schema import Config
from monitor.runtime.failpoint import Failpoint
from monitor.sim.workload import Workload
from monitor.testing.fakes import FakeLog
from tests.unit import test_daemon_loop as loop_tests
from tests.unit.test_daemon_loop import (
    TOPICS,
    Harness,
    _answer,
    _config,
    _fill,
    _run_clean,
    _windows,
)

shared_workload = loop_tests.workload  # the loop tests' stream (4,000 records, 8 h) as a fixture

KILLS_PER_STAGE = 6  # x 5 stages = 30 kill points


class _Killed(Exception):
    pass


def _kill() -> None:
    raise _Killed


def _labels_by_request(h: Harness) -> dict[str, int | None]:
    return {s.request.request_id: s.label for s in h.store.load().requests}


def _requests_by_id(log: FakeLog) -> dict[str, set[bytes]]:
    out: dict[str, set[bytes]] = {}
    for key, value in log.records(TOPICS.requests):
        assert key is not None
        out.setdefault(key.decode(), set()).add(value)
    return out


def _small_polls(data_dir: Path) -> Config:
    cfg = _config(data_dir)
    return dataclasses.replace(cfg, kafka=dataclasses.replace(cfg.kafka, max_poll_records=97))


def test_thirty_kill_points_lose_and_duplicate_nothing(
    tmp_path: Path,
    shared_workload: Workload,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = shared_workload
    clean_log, clean = _run_clean(tmp_path, workload)  # 500 per poll
    monkeypatch.setattr(loop_tests, "_config", _small_polls)  # other batch boundaries
    stages = [s for s in Failpoint.STAGES for _ in range(KILLS_PER_STAGE)]
    order = rng.permutation(len(stages))
    schedule = [(stages[i], int(rng.integers(1, 6))) for i in order]

    log = FakeLog()
    _fill(log, workload)
    answered = 0
    kills: list[tuple[str, int]] = []
    h = Harness(log, tmp_path / "killed")
    for k, (stage, n) in enumerate(schedule):
        if k == len(schedule) // 3:
            answered = _answer(log, workload, answered)  # the delayed labels arrive
        fp = Failpoint(stage, n, action=_kill)
        h.engine.failpoint = fp
        h.store.before_commit = lambda fp=fp: fp.hit("store")
        try:
            for _ in range(10_000):
                if h.engine.step(h.source, h.sink) == 0:
                    answered = _answer(log, workload, answered)  # labels for new requests
                    if h.engine.step(h.source, h.sink) == 0:
                        break
        except _Killed:
            kills.append((stage, fp.count))
        h.close()  # the process is gone: memory lost, open transaction rolled back
        h = Harness(log, tmp_path / "killed")
    h.drain()
    answered = _answer(log, workload, answered)
    h.drain()

    assert len(kills) >= 25, kills  # a few may land after the stream is done
    assert {s for s, _ in kills} == set(Failpoint.STAGES)
    got = _requests_by_id(log)
    want = _requests_by_id(clean_log)
    assert got.keys() == want.keys()  # no request lost, none invented
    assert all(len(v) == 1 for v in got.values())  # replays repeat the same bytes
    assert got == want
    assert _labels_by_request(h) == _labels_by_request(clean)  # no label lost or doubled
    assert _windows(h) == _windows(clean)
    assert h.value("monitor_labels_received_total", model="default") is not None
    print(f"kill points: {len(kills)} {kills}")
    h.close()
    clean.close()


@pytest.mark.parametrize("spec", ["decode", "store:0", "nowhere:2", "commit:x"])
def test_failpoint_spec_is_checked(spec: str) -> None:
    from monitor.errors import ConfigError

    if spec == "decode":
        fp = Failpoint.from_env({"MONITOR_FAILPOINT": spec})
        assert fp is not None and (fp.stage, fp.n) == ("decode", 1)
        return
    with pytest.raises(ConfigError, match="MONITOR_FAILPOINT"):
        Failpoint.from_env({"MONITOR_FAILPOINT": spec})


def test_unset_failpoint_is_none() -> None:
    assert Failpoint.from_env({}) is None


def test_killed_labels_are_counted_once(tmp_path: Path, shared_workload: Workload) -> None:
    """A kill after the flush but before the transaction replays labels without doubling."""
    workload = shared_workload
    log = FakeLog()
    _fill(log, workload)
    h = Harness(log, tmp_path / "a")
    h.drain()
    n_req = _answer(log, workload)
    fp = Failpoint("flush", 1, action=_kill)
    h.engine.failpoint = fp
    with pytest.raises(_Killed):
        h.drain()
    h.close()
    h = Harness(log, tmp_path / "a")
    h.drain()
    labels = _labels_by_request(h)
    assert sum(v is not None for v in labels.values()) == n_req
    dead = [json.loads(v)["reason"] for _, v in log.records(TOPICS.deadletter)]
    assert "duplicate_label" not in dead
    h.close()
