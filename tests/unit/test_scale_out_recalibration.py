"""Scale-out with ``recalibrate: true``: the estimator's maps reach the samplers through the
aggregates topic, and the requests stay a function of the stream and the published controls.

Over the in-memory fakes (``tests/unit/test_scale_out_fakes.py`` has the harness); the same runs
against the real broker and real processes in ``tests/integration/test_scale_out.py``. A map is
fitted from labels, whose arrival no rerun reproduces, so a run with kills is not compared with
an uninterrupted one; instead:

- every request id in the log has one byte string (a replay repeats the same request);
- every control and refresh on the aggregates topic records no map or a map the estimator
  published (as the map it decides with and as a pending one it sums q* under), several
  versions were used, and a map was pending and then taken inside a bucket;
- a sampler given only the published controls, deciding the whole scored log again from
  scratch, makes exactly the logged requests.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.config.schema import Config
from monitor.core import aggregates
from monitor.core import sampler as sampler_module
from monitor.core.records import decode_scored
from monitor.core.sampler import PartKey, SamplerService
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.runtime.failpoint import Failpoint
from monitor.runtime.ports import TopicReader
from monitor.runtime.sampler_role import SamplerEngine
from monitor.sim.workload import Workload
from monitor.stats.beta_calibration import BetaMap
from monitor.stats.budget import NO_CALIBRATION, Calibration, Control
from monitor.stats.calibration import PlattMap
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource, FakeTopicReader
from tests.unit import test_scale_out_fakes as fakes_tests
from tests.unit.test_scale_out_fakes import (
    PARTITIONS,
    TOPICS,
    PartSource,
    _answer,
    _drain,
    _estimates,
    _log,
    _reference,
    _requests,
    _sampler,
    _tear,
)

workload = fakes_tests.workload

V1 = Calibration(1, PlattMap(-1.5, 0.6), 0.2)
V2 = Calibration(2, PlattMap(0.8, 1.7), 0.12)


class _Killed(Exception):
    pass


def _kill() -> None:
    raise _Killed


def _recal(data_dir: Path, poll: int = 300) -> Config:
    cfg = fakes_tests._config(data_dir, poll)
    models = {  # a map at every refit: these tests follow map changes
        m: dataclasses.replace(c, recalibrate=True, keep_calibrated_scores=False)
        for m, c in cfg.models.items()
    }
    return dataclasses.replace(cfg, models=models)


def _publish(log: FakeLog, cal: Calibration, model: str = "default") -> None:
    """What the estimator does: the map on every aggregates partition."""
    key, value = aggregates.encode_map_key(model), aggregates.encode_map(model, cal)
    for p in range(len(log.topics[TOPICS.aggregates])):
        log.append(TOPICS.aggregates, value, key, p)


def _published_maps(log: FakeLog) -> set[Calibration]:
    out: set[Calibration] = set()
    for k, v in log.records(TOPICS.aggregates):
        if aggregates.is_map(k):
            out.add(aggregates.decode_map(k, v)[1])
    return out


def _final_controls(log: FakeLog) -> dict[PartKey, Control]:
    """The control of each bucket's last published state (tombstones aside)."""
    out: dict[PartKey, Control] = {}
    for k, v in log.records(TOPICS.aggregates):
        if aggregates.is_map(k):
            continue
        pk, state = aggregates.decode(k, v)
        if state is not None and state.control is not None:
            out[pk] = state.control
    return out


def _stages(ctl: Control) -> list[Control]:
    return [ctl, *(r.control for r in ctl.refreshes)]


def _decided_again(log: FakeLog, cfg: Config, controls: dict[PartKey, Control]) -> dict[str, bytes]:
    """The whole scored log decided from scratch by a sampler holding only ``controls``."""
    sampler = SamplerService(cfg, PARTITIONS, controls=controls)
    source = FakeSource(log, [TOPICS.scored], lambda: {})
    batch, bad = decode_scored(source.poll(10**9, 0.0), cfg)
    assert not bad
    return {r.request_id: r.to_json() for r in sampler.process(batch).requests}


def _check_published_controls(log: FakeLog, cfg: Config) -> set[int]:
    """The three checks of the module docstring; returns the map versions the controls used."""
    logged = _requests(log)
    assert logged and all(len(v) == 1 for v in logged.values())
    controls = _final_controls(log)
    maps = _published_maps(log)
    used = [s.calibration for c in controls.values() for s in _stages(c)]
    summed = [s.summed for c in controls.values() for s in _stages(c)]
    assert all(c == NO_CALIBRATION or c in maps for c in used + summed)
    again = _decided_again(log, cfg, controls)
    assert again == {rid: next(iter(v)) for rid, v in logged.items()}
    return {c.version for c in used}


def test_map_records_round_trip_and_are_not_state_keys() -> None:
    key, value = aggregates.encode_map_key("m"), aggregates.encode_map("m", V1)
    assert aggregates.is_map(key) and not aggregates.is_map(aggregates.encode_key(("m", 0, 1)))
    assert aggregates.decode_map(key, value) == ("m", V1)
    assert json.loads(key) == {"calibration": "m"}
    beta = Calibration(3, BetaMap(0.25, 1.1, -0.6), 0.3)
    assert aggregates.decode_map(key, aggregates.encode_map("m", beta)) == ("m", beta)
    # a map published before beta maps existed still reads as the Platt map it was
    old = b'{"calibration":[2,-1.5,0.6,0.2],"model":"m","v":1}'
    assert aggregates.decode_map(key, old) == ("m", Calibration(2, PlattMap(-1.5, 0.6), 0.2))


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        (b'{"calibration": 3}', b"{}", "key must be"),
        (b'{"calibration": "m", "x": 1}', b"{}", "key must be"),
        (b'{"calibration": "m"}', None, "has no value"),
        (b'{"calibration": "m"}', b"[", "Expecting value"),
        (b'{"calibration": "m"}', b'{"v": 2}', "v=1"),
        (b'{"calibration": "m"}', b'{"v": 1, "model": "n"}', "names model 'm', its value 'n'"),
        (b'{"calibration": "m"}', b'{"v": 1, "model": "m"}', "is \\[version, a, b, lam\\]"),
        (
            b'{"calibration": "m"}',
            b'{"v": 1, "model": "m", "calibration": [1, "a", 1.0, 0.1]}',
            "could not convert",
        ),
        (
            b'{"calibration": "m"}',
            b'{"v": 1, "model": "m", "calibration": [1, 0.0, 1.0, 0.0]}',
            "\\{segment: map\\} \\(a control",
        ),
        (
            b'{"calibration": "m"}',
            b'{"v": 1, "model": "m", "calibration": [0, 0.0, 1.0, 0.1]}',
            "version 0 is no map",
        ),
        (
            b'{"calibration": "m"}',
            b'{"v": 1, "model": "m", "calibration": [1, 0.0, 1.0, -1.0, 0.1]}',
            "finite slopes >= 0",
        ),
        (
            b'{"calibration": "m"}',
            b'{"v": 1, "model": "m", "calibration": [1, 0.0, 1.0, 1.0, 1.0, 0.1]}',
            "c finite, a >= 0, b >= 0",
        ),
    ],
)
def test_malformed_maps_are_refused(key: bytes, value: bytes | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        aggregates.decode_map(key, value)


def test_a_running_sampler_takes_a_published_map_at_its_next_controls(
    workload: Workload, tmp_path: Path
) -> None:
    log = _log(workload)
    cfg = _recal(tmp_path)
    a, src = _sampler(log, cfg, range(PARTITIONS))
    plain, plain_src = _sampler(copy.deepcopy(log), fakes_tests._config(tmp_path), [0])
    sink = FakeSink(log)
    for _ in range(3):
        a.step(src, sink)
    before = dict(a.sampler._controls)
    assert before and all(
        s.calibration == NO_CALIBRATION for c in before.values() for s in _stages(c)
    )
    _publish(log, V1)
    _publish(plain_src.log, V1)
    a.step(src, sink)
    plain.step(plain_src, FakeSink(plain_src.log))
    assert a.maps == {"default": V1}
    assert plain.maps == {}  # a model without recalibrate: true keeps the raw scores
    after = a.sampler._controls
    for k, ctl in after.items():
        old = before.get(k)
        # frozen after the map came: it records it, as the map it decides with or as the
        # pending one it sums q* under until enough records are summed under it
        if old is None:
            assert V1 in (ctl.calibration, ctl.accumulate)
            continue
        assert ctl.calibration == old.calibration  # what was frozen stays
        for r in ctl.refreshes[len(old.refreshes) :]:
            assert V1 in (r.control.calibration, r.control.accumulate)
    assert len(after) > len(before)
    _drain(a, src, sink)
    assert any(s.calibration == V1 for c in a.sampler._controls.values() for s in _stages(c))
    assert _check_published_controls(log, cfg) == {0, 1}


def test_a_rebuilt_sampler_takes_the_published_control_not_its_newer_map(
    workload: Workload, tmp_path: Path
) -> None:
    """Killed between a flush and its commit: the lost run published controls with map 1 beyond
    the committed offset, then map 2 came out. The new owner holds map 2, but a control it
    freezes again at the same record is the published one; without that, some requests would
    come out with other bytes."""
    log = _log(workload)
    cfg = _recal(tmp_path)
    _publish(log, V1)
    a, src = _sampler(log, cfg, range(PARTITIONS))
    sink = FakeSink(log)
    for _ in range(3):
        a.step(src, sink)  # flushed and committed
    committed = dict(log.committed)
    for _ in range(3):
        a.step(src, sink)  # flushed; the commits are lost with the process
    log.committed = committed
    _publish(log, V2)  # a map newer than the committed position
    records = [(k, v) for part in log.topics[TOPICS.aggregates] for k, v, _ in part]
    at = {p: committed.get((TOPICS.scored, p), 0) for p in range(PARTITIONS)}
    rebuilt = aggregates.as_of(records, at)
    assert rebuilt.maps == {"default": V2}
    beyond = [s.calibration for c in rebuilt.ahead.values() for s in _stages(c)]
    assert V1 in beyond and V2 not in beyond
    logged = {rid: next(iter(v)) for rid, v in _requests(log).items()}

    def replay(ahead: dict[PartKey, Control]) -> dict[str, bytes]:
        svc = aggregates.BucketStates(rebuilt.states, ahead).service(cfg, PARTITIONS)
        svc.calibration = dict(rebuilt.maps)
        source = FakeSource(log, [TOPICS.scored], lambda: {(TOPICS.scored, p): at[p] for p in at})
        batch, _ = decode_scored(source.poll(10**9, 0.0), cfg)
        return {r.request_id: r.to_json() for r in svc.process(batch).requests}

    naive = replay({})
    assert any(rid in logged and logged[rid] != body for rid, body in naive.items())
    again = replay(rebuilt.ahead)
    assert all(logged[rid] == body for rid, body in again.items() if rid in logged)

    # the same through the sampler role: a new owner rebuilds and drains
    a2, src2 = _sampler(log, cfg, range(PARTITIONS))
    assert a2.maps == {"default": V2}
    _drain(a2, src2, sink)
    assert _check_published_controls(log, cfg) == {0, 1, 2}


def test_no_request_is_out_before_the_control_that_took_its_map(
    workload: Workload, tmp_path: Path
) -> None:
    """The worst tear: a sampler that never flushed on its own dies, and every request it had
    queued reached the broker, none of its bucket states. A newer map is out when the next
    owner replays; it must still decide those records under the map the lost run took."""
    log = _log(workload)
    cfg = _recal(tmp_path, poll=150)
    _publish(log, V1)
    a, src = _sampler(log, cfg, range(PARTITIONS), flush_every_s=math.inf)
    sink = FakeSink(log)
    for _ in range(6):
        a.step(src, sink)
    assert not log.committed
    for topic, key, value, partition in sink._queue:  # SIGKILL
        if topic == TOPICS.requests:
            log.append(topic, value, key, partition)
    sink._queue.clear()
    _publish(log, V2)
    a2, src2 = _sampler(log, cfg, range(PARTITIONS))
    assert a2.maps == {"default": V2}
    _drain(a2, src2, FakeSink(log))
    assert _check_published_controls(log, cfg) == {0, 1, 2}


class _Estimator:
    """``--role estimator`` with its store, answering every request from the ground truth.

    ``recover=False``: an estimator that does not read the versions published before back
    (as before ``Engine._recover``), to show what a lost data directory did without it;
    ``reader``: the aggregates topic as it reads it (default: a ``FakeTopicReader``).
    """

    def __init__(
        self,
        log: FakeLog,
        cfg: Config,
        w: Workload,
        *,
        recover: bool = True,
        reader: TopicReader | None = None,
    ) -> None:
        self.log, self.w, self.answered = log, w, set[str]()
        self.store = Store(cfg.data_dir)
        if reader is None and recover:
            reader = FakeTopicReader(log, TOPICS.aggregates)
        self.engine = Engine(
            cfg,
            self.store,
            Exporter(cfg, CollectorRegistry()),
            role="estimator",
            aggregates=reader,
        )
        self.source = FakeSource(log, self.engine.topics, self.store.offsets)
        self.engine.set_partitions(PARTITIONS)
        self.sink = FakeSink(log)

    def tick(self) -> None:
        """Catch up with the topics, answer what was requested, catch up again (refits)."""
        _drain(self.engine, self.source, self.sink)
        _answer(self.log, self.w, self.answered)
        _drain(self.engine, self.source, self.sink)

    def close(self) -> None:
        self.store.close()


def _maps_by_partition(log: FakeLog) -> list[list[Calibration]]:
    return [
        [aggregates.decode_map(k, v)[1] for k, v, _ in part if aggregates.is_map(k)]
        for part in log.topics[TOPICS.aggregates]
    ]


def _run_until_idle(
    samplers: list[tuple[SamplerEngine, PartSource, FakeSink]], est: _Estimator
) -> None:
    for _ in range(10_000):
        moved = sum(e.step(s, k) for e, s, k in samplers)
        est.tick()
        if moved == 0 and sum(e.step(s, k) for e, s, k in samplers) == 0:
            est.tick()
            return
    msg = "did not drain"
    raise AssertionError(msg)


def test_the_estimator_publishes_its_maps_to_every_partition_and_counts_no_map_as_traffic(
    workload: Workload, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log = _log(workload)
    cfg = _recal(tmp_path)
    est = _Estimator(log, cfg, workload)
    a = _sampler(log, cfg, range(PARTITIONS))
    _run_until_idle([(*a, FakeSink(log))], est)
    per_partition = _maps_by_partition(log)
    assert len(per_partition) == PARTITIONS and all(m == per_partition[0] for m in per_partition)
    versions = [c.version for c in per_partition[0]]
    assert versions == sorted(set(versions)) and len(versions) >= 3, versions
    stored = est.engine.store.get_json("calibration")
    assert stored == {"default": per_partition[0][-1].to_list()}
    assert a[0].maps == {"default": per_partition[0][-1]}  # the sampler followed
    assert not log.records(TOPICS.deadletter)
    # a map is not traffic: the estimator counts every record once, as one process does
    _, ref = _reference(workload, tmp_path_factory)
    snap = est.engine.estimator.snapshot()
    assert [e[:4] for e in _estimates(snap)] == [e[:4] for e in ref]
    assert len(_check_published_controls(log, cfg) - {0}) >= 2

    # a malformed map is dead-lettered by the estimator and skipped by the sampler
    before = _estimates(est.engine.estimator.snapshot())
    key = aggregates.encode_map_key("default")
    log.append(TOPICS.aggregates, b'{"v": 1, "model": "default", "calibration": [9]}', key, 0)
    est.tick()
    a[0].step(a[1], FakeSink(log))
    assert a[0].maps == {"default": per_partition[0][-1]}
    assert _estimates(est.engine.estimator.snapshot()) == before
    letters = [json.loads(v) for _, v in log.records(TOPICS.deadletter)]
    assert [d["reason"] for d in letters] == ["bad_type"]
    assert letters[0]["detail"].startswith("not a calibration map: the map of model 'default'")
    est.close()


def test_a_map_stored_but_not_published_before_a_crash_is_published_at_restart(
    workload: Workload, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(workload)
    cfg = _recal(tmp_path)
    est = _Estimator(log, cfg, workload)
    a = _sampler(log, cfg, range(PARTITIONS))

    def crash(self: Engine, source: object, sink: object) -> None:
        raise _Killed

    with monkeypatch.context() as m:
        m.setattr(Engine, "_publish_maps", crash)
        with pytest.raises(_Killed):
            _run_until_idle([(*a, FakeSink(log))], est)
    stored = est.engine.store.get_json("calibration")
    assert stored and not any(_maps_by_partition(log))
    est.close()
    est = _Estimator(log, cfg, workload)  # the restart
    est.tick()
    assert [m[-1].to_list() for m in _maps_by_partition(log)] == [stored["default"]] * PARTITIONS
    est.close()


def _restless(ref: object, cur: object, lam0: float, lam_max: float) -> float:
    """A score shift rule that raises the defensive share at about two controls in three: a
    function of the stream (the current histogram's record count), like the real one."""
    n = int(np.asarray(cur).sum())
    return lam0 + (lam_max - lam0) * (n % 3) / 2


def test_a_kill_while_the_score_shift_raises_the_share_keeps_requests_a_function_of_controls(
    workload: Workload, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shift share is recorded with the published controls (and their refreshes) and a
    sampler holding only them decides the same."""
    monkeypatch.setattr(sampler_module, "shift_share", _restless)
    log, cfg, est = _run_killed(
        workload,
        tmp_path,
        kill_at=("produce", 3),
        kill_after=6,
        resume_from=4,
        poll=97,
        flush_every_s=0.0,
        torn=0.5,
    )
    _check_published_controls(log, cfg)
    stages = [s for c in _final_controls(log).values() for s in _stages(c)]
    assert any(s.shift > 0.0 for s in stages[1:]) and any(s.shift == 0.0 for s in stages)
    est.close()


def _run_killed(
    w: Workload,
    tmp: Path,
    *,
    kill_at: tuple[str, int],
    kill_after: int,
    resume_from: int,
    poll: int,
    flush_every_s: float,
    torn: float,
) -> tuple[FakeLog, Config, _Estimator]:
    """Samplers {0, 1} and {2, 3} and an estimator refitting after every step; the first sampler
    dies at ``kill_at`` (a failpoint) or after ``kill_after`` steps, its commits after step
    ``resume_from`` lost and a ``torn`` share of what it had not flushed delivered (as in
    ``test_scale_out_fakes._run_split``); the estimator refits meanwhile, so the new owner
    holds newer maps than those the lost run published."""
    log = _log(w)
    cfg = _recal(tmp / "est", poll)
    est = _Estimator(log, cfg, w)
    a, src_a = _sampler(log, cfg, [0, 1], flush_every_s)
    b, src_b = _sampler(log, cfg, [2, 3], flush_every_s)
    sink_a, sink_b = FakeSink(log), FakeSink(log)
    a.failpoint = Failpoint(*kill_at, action=_kill)
    mine = [(TOPICS.scored, 0), (TOPICS.scored, 1)]
    kept = {tp: log.committed.get(tp) for tp in mine}
    for i in range(kill_after):
        try:
            a.step(src_a, sink_a)
        except _Killed:
            break
        b.step(src_b, sink_b)
        est.tick()
        if i + 1 == resume_from:
            kept = {tp: log.committed.get(tp) for tp in mine}
    _tear(sink_a, log, torn)  # SIGKILL
    for tp, off in kept.items():
        if off is None:
            log.committed.pop(tp, None)
        else:
            log.committed[tp] = off
    est.tick()
    a2, src_a2 = _sampler(log, cfg, [0, 1], flush_every_s)
    _run_until_idle([(a2, src_a2, sink_a), (b, src_b, sink_b)], est)
    return log, cfg, est


@settings(max_examples=12, deadline=None)
@given(
    kill_after=st.integers(1, 10),
    lost_commits=st.integers(0, 4),
    kill_at=st.tuples(st.sampled_from(("decode", "produce", "flush", "commit")), st.integers(1, 8)),
    poll=st.sampled_from([97, 250]),
    flush_every_s=st.sampled_from([0.0, math.inf]),
    torn=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_any_kill_while_the_map_changes_keeps_requests_a_function_of_published_controls(
    workload: Workload,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    kill_after: int,
    lost_commits: int,
    kill_at: tuple[str, int],
    poll: int,
    flush_every_s: float,
    torn: float,
) -> None:
    log, cfg, est = _run_killed(
        workload,
        tmp_path_factory.mktemp("killed"),
        kill_at=kill_at,
        kill_after=kill_after,
        resume_from=max(0, kill_after - lost_commits),
        poll=poll,
        flush_every_s=flush_every_s,
        torn=torn,
    )
    assert len(_check_published_controls(log, cfg) - {0}) >= 2  # the map changed mid-stream
    # ... inside buckets: a refresh left a new map pending (q* summed under it), a later one took it
    chains = [_stages(c) for c in _final_controls(log).values()]
    assert any(s.pending for chain in chains for s in chain[1:])
    assert any(a.calibration != b.calibration for ch in chains for a, b in itertools.pairwise(ch))
    _, ref = _reference(workload, tmp_path_factory)
    counts = [e[:4] for e in _estimates(est.engine.estimator.snapshot())]
    assert counts == [e[:4] for e in ref]  # model, segment, window, records: each counted once
    assert not log.records(TOPICS.deadletter)
    est.close()
