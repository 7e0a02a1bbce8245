"""Crash anywhere while the calibration map changes mid-stream (models.NAME.recalibrate).

The scored stream arrives in chunks and labels are answered after every step, so the estimator
refits the map many times while the stream is still being decided, and later buckets' controls
take new map versions. A
failpoint kills the engine at random points of random steps (all five stages); the harness
restarts from the store over the same log. A map is fitted from labels, whose arrival differs
between runs, so this run is not compared with an uninterrupted one; instead:

- every request id in the log has one byte string (a replay repeats the same request);
- the requests in the log are exactly those the store holds (none lost, none invented);
- a sampler given only the stored controls, deciding the whole scored log again from scratch,
  makes exactly the logged requests: the decisions are a function of the stream and the
  durable controls (which record the map versions they used, the pending map whose q* they
  summed, and each refresh's base).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from monitor.config.schema import Config
from monitor.core import recalibration
from monitor.core import sampler as sampler_module
from monitor.core.records import decode_scored
from monitor.core.sampler import SamplerService
from monitor.io.store import Store
from monitor.runtime.failpoint import Failpoint
from monitor.sim.workload import Workload, WorkloadSpec, generate
from monitor.stats import design
from monitor.stats.beta_calibration import BetaMap, CalibrationMap, fit_beta
from monitor.stats.calibration import fit_platt
from monitor.testing.fakes import FakeLog, FakeSource
from tests.unit import test_daemon_loop as loop_tests
from tests.unit.test_daemon_loop import TOPICS, Harness, _answer
from tests.unit.test_daemon_loop import _config as plain_config
from tests.unit.test_faults_crash_fakes import _kill, _Killed, _requests_by_id

shared_workload = loop_tests.workload

KILLS_PER_STAGE = 3  # x 5 stages
FloatArray = npt.NDArray[np.float64]


def _recalibrating(data_dir: Path) -> Config:
    cfg = plain_config(data_dir)
    models = {  # a map at every refit: these tests follow map changes
        m: dataclasses.replace(c, recalibrate=True, keep_calibrated_scores=False)
        for m, c in cfg.models.items()
    }
    kafka = dataclasses.replace(cfg.kafka, max_poll_records=97)
    return dataclasses.replace(cfg, models=models, kafka=kafka)


CHUNK = 250  # scored records appended at a time


def _step_and_answer(h: Harness, log: FakeLog, w: Workload, answered: int) -> tuple[int, int]:
    n = h.engine.step(h.source, h.sink)
    return n, _answer(log, w, answered)


def _until_idle(h: Harness, log: FakeLog, w: Workload, answered: int) -> int:
    for _ in range(10_000):
        got, answered = _step_and_answer(h, log, w, answered)
        if got == 0:
            got, answered = _step_and_answer(h, log, w, answered)
            if got == 0:
                return answered
    msg = "did not drain"
    raise AssertionError(msg)


class _Arrivals:
    """The scored records of a workload, appended to the log a chunk at a time."""

    def __init__(self, log: FakeLog, w: Workload) -> None:
        self.log = log
        self.records = [json.dumps(rec).encode() for rec in w.records()]
        self.sent = 0
        log.create(TOPICS.scored, 1)
        for topic in (TOPICS.requests, TOPICS.labels, TOPICS.deadletter):
            log.create(topic)

    def more(self) -> bool:
        chunk = self.records[self.sent : self.sent + CHUNK]
        for value in chunk:
            self.log.append(TOPICS.scored, value)
        self.sent += len(chunk)
        return bool(chunk)


def _always_beta(score: FloatArray, label: FloatArray, *, tau: float) -> CalibrationMap:
    """Every refit takes the beta fit (as where the likelihood-ratio test rejects Platt)."""
    return fit_beta(score, label, np.ones(len(score)), tau=tau)


def _every_segment(
    model_map: CalibrationMap,
    score: FloatArray,
    label: npt.NDArray[np.int8],
    segment: npt.NDArray[np.str_],
    *,
    tau: float,
    beta: bool,
) -> tuple[tuple[str, CalibrationMap], ...]:
    """Every segment with 20 labels gets its own Platt map (as where the test rejects the
    model's map for each)."""
    names = sorted({str(g) for g in segment.tolist()} - {""})
    own = [(g, segment == g) for g in names]
    return tuple(
        (g, fit_platt(score[m], label[m], np.ones(int(m.sum())), tau=tau))
        for g, m in own
        if m.sum() >= 20
    )


def _restless(ref: object, cur: object, lam0: float, lam_max: float) -> float:
    """A score shift rule that raises the defensive share at about two controls in three: a
    function of the stream (the current histogram's record count), like the real one."""
    n = int(np.asarray(cur).sum())
    return lam0 + (lam_max - lam0) * (n % 3) / 2


@pytest.mark.parametrize("family", ["chosen", "beta", "shift", "segments"])
def test_kills_while_the_map_changes_keep_requests_a_function_of_stored_controls(
    tmp_path: Path,
    shared_workload: Workload,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
    family: str,
) -> None:
    workload = shared_workload
    monkeypatch.setattr(loop_tests, "_config", _recalibrating)
    if family == "segments":  # controls record segment maps; records carry two segments
        workload = generate(WorkloadSpec(n=4000, hours=8.0, seed=3, segments=("eu", "us")))
        monkeypatch.setattr(recalibration, "segment_maps", _every_segment)
    if family == "beta":
        monkeypatch.setattr(design, "choose_map", _always_beta)
    if family == "shift":  # controls record a raised defensive share
        monkeypatch.setattr(sampler_module, "shift_share", _restless)
    stages = [s for s in Failpoint.STAGES for _ in range(KILLS_PER_STAGE)]
    schedule = [(stages[i], int(rng.integers(1, 4))) for i in rng.permutation(len(stages))]
    log = FakeLog()
    arrivals = _Arrivals(log, workload)
    answered = 0
    kills: list[str] = []
    h = Harness(log, tmp_path / "killed")
    while arrivals.more() or schedule:
        stage, n = schedule.pop() if schedule else ("commit", 10**9)
        fp = Failpoint(stage, n, action=_kill)
        h.engine.failpoint = fp
        h.store.before_commit = lambda fp=fp: fp.hit("store")
        try:
            answered = _until_idle(h, log, workload, answered)
        except _Killed:
            kills.append(stage)
        h.close()  # the process is gone: memory lost, open transaction rolled back
        h = Harness(log, tmp_path / "killed")
        answered = _until_idle(h, log, workload, answered)  # catch up before more arrives
    h.engine.failpoint = None
    h.store.before_commit = None
    for _ in range(3):
        h.drain()
        answered = _answer(log, workload, answered)
    h.drain()

    assert len(kills) >= 10 and set(kills) == set(Failpoint.STAGES), kills
    logged = _requests_by_id(log)
    assert all(len(v) == 1 for v in logged.values())  # replays repeat the same bytes
    state = h.store.load()
    assert {s.request.request_id for s in state.requests} == set(logged)
    versions = sorted({c.calibration.version for c in state.controls.values()})
    assert versions[0] == 0 and len(versions) >= 3, versions  # the map changed mid-stream
    # ... inside buckets too: a new map pending at a refresh (q* summed under it, decisions
    # under the old one), then taken at a later refresh of the same bucket
    chains = [[c, *(r.control for r in c.refreshes)] for c in state.controls.values()]
    assert any(s.pending for chain in chains for s in chain[1:])
    assert any(
        a.calibration.version != b.calibration.version
        for chain in chains
        for a, b in itertools.pairwise(chain)
    )
    if family == "shift":
        assert any(s.shift > 0.0 for chain in chains for s in chain)
    if family == "segments":
        segmented = [c.calibration.segments for c in state.controls.values()]
        assert any(len(g) == 2 for g in segmented), segmented
    if family == "beta":
        maps = [c.calibration.cal_map for c in state.controls.values() if c.calibration.version]
        assert maps and all(isinstance(m, BetaMap) for m in maps)

    # the same stream decided again from the stored controls alone: the same requests
    cfg = h.config
    sampler = SamplerService(cfg, controls=state.controls)
    source = FakeSource(log, [TOPICS.scored], lambda: {})
    again: dict[str, bytes] = {}
    while raw := source.poll(10_000, 0.0):
        batch, bad = decode_scored(raw, cfg)
        assert not bad
        for req in sampler.process(batch).requests:
            again[req.request_id] = req.to_json()
    assert again == {rid: next(iter(v)) for rid, v in logged.items()}
    h.close()


def test_a_crash_between_the_labels_commit_and_their_refit_refits_at_the_restart(
    tmp_path: Path, shared_workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The labels were durable, but the refit they were due ran only on labels accepted in the
    same step: after a crash between the two the map stayed the old one until more labels
    came, and the next hours' requests differed from an uninterrupted run's."""
    monkeypatch.setattr(loop_tests, "_config", _recalibrating)
    maps = {}
    for name in ("uninterrupted", "killed"):
        log = FakeLog()
        arrivals = _Arrivals(log, shared_workload)
        while arrivals.more():
            pass
        h = Harness(log, tmp_path / name)
        h.drain()
        _answer(log, shared_workload)
        if name == "killed":  # right after the step that takes the labels has committed
            h.engine.failpoint = Failpoint("commit", 1, action=_kill)
            with pytest.raises(_Killed):
                h.drain()
            assert not h.engine.sampler.calibration  # the refit never ran
            h.close()
            h = Harness(log, tmp_path / name)
        h.drain()
        maps[name] = h.engine.sampler.calibration
        h.close()
    assert maps["uninterrupted"]["default"].version >= 1
    assert maps["killed"] == maps["uninterrupted"]


def test_the_map_is_durable_before_a_control_records_it(
    tmp_path: Path, shared_workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_tests, "_config", _recalibrating)
    log = FakeLog()
    arrivals = _Arrivals(log, shared_workload)
    h = Harness(log, tmp_path / "a")
    answered = 0
    for _ in range(400):
        if h.engine.step(h.source, h.sink) == 0 and not arrivals.more():
            break
        answered = _answer(log, shared_workload, answered)
        stored = Store.get_json(h.store, "calibration")
        in_use = h.engine.sampler.calibration
        if in_use:
            # what the sampler uses is what the store holds, version for version, and shows
            assert stored == {m: c.to_list() for m, c in in_use.items()}
            for m, c in in_use.items():
                assert h.value("monitor_calibration_version", model=m) == c.version
                # with the score counts of the traffic the map's labels were drawn from
                seen = h.engine.estimator.score_histogram(m, 0)
                assert len(c.reference) == len(seen) and 0 < sum(c.reference) <= sum(seen)
    assert h.engine.sampler.calibration["default"].version >= 2
    h.close()


def test_unreadable_stored_maps_stop_the_start_with_a_precise_error(tmp_path: Path) -> None:
    from monitor.errors import StoreError

    log = FakeLog()
    _Arrivals(log, generate(WorkloadSpec(n=10, hours=1.0, seed=1)))
    h = Harness(log, tmp_path / "a")
    h.store.put_json("calibration", {"default": [1, 0.0, -2.0, 0.1]})
    h.close()
    with pytest.raises(StoreError, match=r"stored calibration maps .* unreadable"):
        Harness(log, tmp_path / "a")
