"""Calibration map versions across estimator incarnations (issue 14, "Determinism stays").

Samplers ignore a map whose version is at or below the one they hold. An estimator that lost its
data directory used to number its maps from 1 again, and every map it fitted went unheard until
its count passed the old one. It now recovers the newest published map per model from the
aggregates topic before its first step (``Engine._recover``), stores it before any refit numbers
a map after it, and says so; a sampler that still receives an older map counts and logs it.
Over the in-memory fakes; ``tests/integration/test_map_versions_kafka.py`` runs the wiped
estimator against the real broker.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection
from pathlib import Path

import pytest

from monitor.core import aggregates, recalibration
from monitor.errors import BrokerUnavailable
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.ports import Entry
from monitor.runtime.sampler_role import SamplerEngine
from monitor.sim.workload import Workload
from monitor.stats.budget import Calibration
from monitor.stats.calibration import PlattMap
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource, FakeTopicReader
from tests.unit import test_scale_out_fakes as fakes_tests
from tests.unit.test_scale_out_fakes import PARTITIONS, TOPICS, _log, _sampler
from tests.unit.test_scale_out_recalibration import (
    V1,
    V2,
    _Estimator,
    _maps_by_partition,
    _publish,
    _recal,
    _run_until_idle,
)

workload = fakes_tests.workload

V7 = Calibration(7, PlattMap(0.4, 1.2), 0.15)
OLD_RECORD = b'{"calibration":[5,-1.5,0.6,0.2],"model":"default","v":1}'  # before beta maps


def _ignored(engine: SamplerEngine, reason: str) -> float:
    assert isinstance(engine.metrics, Exporter)
    value = engine.metrics.registry.get_sample_value(
        "monitor_calibration_maps_ignored_total", {"model": "default", "reason": reason}
    )
    return float(value or 0.0)


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_newest_maps_takes_the_highest_version_per_model_and_skips_the_rest() -> None:
    key = aggregates.encode_map_key("default")
    records = [
        (key, aggregates.encode_map("default", V2)),
        (aggregates.encode_key(("default", 0, 1)), b"{}"),  # a state: not read here
        (key, aggregates.encode_map("default", V1)),  # lower, later (an old estimator)
        (key, b'{"v": 1, "model": "default", "calibration": [9]}'),  # malformed
        (aggregates.encode_map_key("other"), OLD_RECORD.replace(b"default", b"other")),
    ]
    assert aggregates.newest_maps(records) == {
        "default": V2,
        "other": Calibration(5, PlattMap(-1.5, 0.6), 0.2),
    }


def test_recover_keeps_the_higher_version_and_a_stored_map_wins_a_tie() -> None:
    other = dataclasses.replace(V2, lam=0.3)
    assert recalibration.recover({}, {"default": V2}) == {"default": V2}
    assert recalibration.recover({"default": V7}, {"default": V2}) == {"default": V7}
    assert recalibration.recover({"default": V1}, {"default": V2, "b": V7}) == {
        "default": V2,
        "b": V7,
    }
    assert recalibration.recover({"default": other}, {"default": V2}) == {"default": other}


def test_a_wiped_estimator_continues_above_the_versions_the_samplers_hold(
    workload: Workload, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full run publishes maps up to version V and the sampler holds V. The estimator's data
    directory is then lost: without recovery its new maps are numbered from 1 and the sampler
    ignores every one (counted, logged); with it, they are numbered from V + 1 and taken."""
    caplog.set_level(logging.INFO)
    log = _log(workload)
    cfg = _recal(tmp_path / "first")
    est = _Estimator(log, cfg, workload)
    a, src = _sampler(log, cfg, range(PARTITIONS))
    sink = FakeSink(log)
    _run_until_idle([(a, src, sink)], est)
    est.close()
    held = a.maps["default"]
    assert held.version >= 3
    seen = len(_maps_by_partition(log)[0])

    # the failure this fixes: a new data directory, versions from 1 again, nothing taken
    blind_log = FakeLog(
        topics={t: [list(p) for p in parts] for t, parts in log.topics.items()},
        committed=dict(log.committed),
    )
    blind = _Estimator(blind_log, _recal(tmp_path / "blind"), workload, recover=False)
    b, b_src = _sampler(blind_log, cfg, range(PARTITIONS))
    blind.tick()
    b.step(b_src, FakeSink(blind_log))
    new = [m.version for m in _maps_by_partition(blind_log)[0][seen:]]
    assert new and min(new) == 1 and max(new) < held.version, new
    assert b.maps["default"] == held
    n = len(blind_log.topics[TOPICS.aggregates])  # each map on every aggregates partition
    assert _ignored(b, "older") == len(new) * n
    assert _events(caplog, "calibration_ignored")
    blind.close()

    # with recovery: the newest published map is stored first, then refits number after it
    caplog.clear()
    wiped = _recal(tmp_path / "wiped")
    est = _Estimator(log, wiped, workload)
    est.tick()
    a.step(src, sink)
    new = [m.version for m in _maps_by_partition(log)[0][seen:]]
    assert new and min(new) == held.version + 1, new
    assert a.maps["default"].version == max(new) > held.version
    assert _ignored(a, "older") == _ignored(a, "conflicting") == 0
    (warning,) = _events(caplog, "calibration_recovered")
    assert warning.levelno == logging.WARNING
    assert warning.published == {"default": held.version}  # type: ignore[attr-defined]
    assert warning.stored == {}  # type: ignore[attr-defined]
    stored = recalibration.decode(est.store.get_json(recalibration.STORE_KEY))
    assert stored["default"].version == max(new)
    est.close()


class _Reader(FakeTopicReader):
    """A ``FakeTopicReader`` that fails while ``down`` and counts its reads."""

    def __init__(self, log: FakeLog) -> None:
        super().__init__(log, TOPICS.aggregates)
        self.down = True
        self.reads = 0

    def read(self, select: Callable[[int], Collection[int]]) -> list[Entry]:
        self.reads += 1
        if self.down:
            msg = f"cannot read {TOPICS.aggregates}: connection refused"
            raise BrokerUnavailable(msg)
        return super().read(select)


def _estimator(
    log: FakeLog, data_dir: Path, reader: _Reader, w: Workload
) -> tuple[_Estimator, FakeSource]:
    est = _Estimator(log, _recal(data_dir), w, reader=reader)
    return est, est.source


def test_an_unreadable_topic_stops_the_estimator_with_one_clear_line_until_it_is_read(
    workload: Workload, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(workload)
    _publish(log, V7)
    reader = _Reader(log)
    est, source = _estimator(log, tmp_path, reader, workload)
    before = dict(source.pos)
    with pytest.raises(BrokerUnavailable):
        est.engine.step(source, est.sink)
    (line,) = _events(caplog, "calibration_recovery_failed")
    assert line.levelno == logging.ERROR
    assert line.topic == TOPICS.aggregates  # type: ignore[attr-defined]
    assert "connection refused" in line.error  # type: ignore[attr-defined]
    assert "retries" in line.fix  # type: ignore[attr-defined]
    assert source.pos == before  # nothing consumed, nothing fitted
    assert est.store.get_json(recalibration.STORE_KEY) is None
    est.engine.rollback(source)  # what the daemon does, then it retries
    reader.down = False
    est.engine.step(source, est.sink)
    assert recalibration.decode(est.store.get_json(recalibration.STORE_KEY)) == {"default": V7}
    assert est.engine.sampler.calibration == {"default": V7}
    est.engine.rollback(source)  # a replay reads the stored map, not the topic again
    assert est.engine.sampler.calibration == {"default": V7}
    _ = [est.engine.step(source, est.sink) for _ in range(3)]
    assert reader.reads == 2
    est.close()


def test_a_restored_backup_and_old_records_recover_and_a_newer_store_is_kept(
    workload: Workload, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    log = _log(workload)
    key = aggregates.encode_map_key("default")
    for p in range(len(log.topics[TOPICS.aggregates])):
        log.append(TOPICS.aggregates, OLD_RECORD, key, p)  # an older release's record
    old = Calibration(5, PlattMap(-1.5, 0.6), 0.2)

    def restart_with(stored: Calibration, data_dir: Path) -> _Estimator:
        """An estimator whose store holds ``stored``, after its first step."""
        store = Store(data_dir)
        store.put_json(recalibration.STORE_KEY, recalibration.encode({"default": stored}))
        store.close()
        reader = _Reader(log)
        reader.down = False
        est, source = _estimator(log, data_dir, reader, workload)
        est.engine.step(source, est.sink)
        return est

    est = restart_with(V2, tmp_path / "backup")
    assert est.engine.sampler.calibration == {"default": old}
    assert _events(caplog, "calibration_recovered")[-1].levelno == logging.WARNING
    est.close()

    est = restart_with(V7, tmp_path / "ahead")  # stored, not yet published when it crashed
    assert est.engine.sampler.calibration == {"default": V7}
    assert _events(caplog, "calibration_recovered")[-1].levelno == logging.INFO
    maps = _maps_by_partition(log)
    assert [m[-1] for m in maps] == [V7] * len(maps)  # published again at the restart
    est.close()


def test_a_sampler_counts_and_logs_the_maps_it_ignores(
    workload: Workload, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(workload)
    cfg = _recal(tmp_path)
    _publish(log, V2)
    a, src = _sampler(log, cfg, range(PARTITIONS))
    assert a.maps == {"default": V2}
    _publish(log, V2)  # the same map again (a restarted estimator publishes what it stored)
    a.step(src, FakeSink(log))
    assert _ignored(a, "older") == _ignored(a, "conflicting") == 0
    assert not _events(caplog, "calibration_ignored")
    _publish(log, V1)
    _publish(log, dataclasses.replace(V2, lam=0.3))
    a.step(src, FakeSink(log))
    assert a.maps == {"default": V2}
    n = len(log.topics[TOPICS.aggregates])
    assert _ignored(a, "older") == _ignored(a, "conflicting") == n
    lines = _events(caplog, "calibration_ignored")
    assert {(r.reason, r.version, r.last) for r in lines} == {  # type: ignore[attr-defined]
        ("older", 1, 2),
        ("conflicting", 2, 2),
    }
    assert all(r.levelno == logging.WARNING for r in lines)


def test_a_map_in_a_later_releases_format_is_counted_and_named(
    workload: Workload, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade that took the estimator first: its maps, in a format the sampler's release
    cannot read, were logged as malformed and counted nowhere, so no alert said the samplers'
    decisions no longer followed the labels."""
    log = _log(workload)
    a, src = _sampler(log, _recal(tmp_path), range(PARTITIONS))
    later = aggregates.encode_map("default", V7).replace(b'"v":1', b'"v":2')
    key = aggregates.encode_map_key("default")
    for p in range(len(log.topics[TOPICS.aggregates])):
        log.append(TOPICS.aggregates, later, key, p)
    a.step(src, FakeSink(log))
    assert "default" not in a.maps or a.maps["default"] != V7
    assert _ignored(a, "later_format") == len(log.topics[TOPICS.aggregates])
    (line, *_) = _events(caplog, "calibration_ignored")
    assert "upgrade the samplers before the estimator" in line.error  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="must be a JSON object with v=1"):
        aggregates.decode_map(key, later.replace(b'"v":2', b'"v":"2"'))
