"""A calibration map that changes q* tenfold does not make the sampler overspend its budget.

The stream's model is over-confident (logits x10, 1% positives). Controls first decide with a
map that trusts the scores (q* small everywhere), then a map that undoes the x10 arrives (q*
about ten times larger on average). A control that normalised the new q* by the mean q* summed
under the old map would request about ten times the budget; the map is pending until enough
records have q* summed under it, so every bucket's expected requests stay near the budget.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from monitor.config.schema import Config, ModelConfig
from monitor.core.records import ScoredBatch
from monitor.core.sampler import SamplerService
from monitor.sim.simulate import LOGIT_SD, logit_mean_for_rate
from monitor.stats import budget
from monitor.stats.budget import (
    Calibration,
    Control,
    control_from_list,
    control_to_list,
    maps_to_list,
    refreshes_to_list,
    with_maps,
    with_refreshes,
)
from monitor.stats.calibration import PlattMap
from tests.unit.engine_streams import hourly_batch

PER_BUCKET = 5000
BUDGET = 150.0
START = 1_800_000_000.0
#: a map that trusts the over-confident scores, and the one that undoes the x10
TRUSTING = Calibration(version=1, cal_map=PlattMap(0.0, 1.0 + 1e-9), lam=0.1)
UNDOING = Calibration(version=2, cal_map=PlattMap(0.0, 0.1), lam=0.1)
#: a bucket's expected requests may exceed its budget by at most this factor (Poisson noise of
#: ~10 positives per 1000 records in the normaliser, not the tenfold of a stale one)
MAX_SPEND = 1.5


def _config() -> Config:
    model = ModelConfig(
        name="default", labels_per_hour=BUDGET, expected_records_per_hour=float(PER_BUCKET)
    )
    return Config(models={"default": model})


def _stream(seed: int, buckets: int) -> ScoredBatch:
    rng = np.random.default_rng(seed)
    n = PER_BUCKET * buckets
    z = rng.normal(logit_mean_for_rate(0.01, LOGIT_SD), LOGIT_SD, n)
    score = 0.5 * (1.0 + np.tanh(0.5 * 10.0 * z))
    return hourly_batch(score, np.sort(rng.random(PER_BUCKET)), START)


@pytest.mark.parametrize("change_at", [2 * PER_BUCKET, 2 * PER_BUCKET + 1500])
@pytest.mark.parametrize("seed", [14, 15])
def test_no_bucket_overspends_after_a_map_that_raises_q_star_tenfold(
    seed: int, change_at: int
) -> None:
    """The undoing map arrives at a bucket's start or in the middle of it (before record 2000,
    where the bucket's second refresh would take it)."""
    stream = _stream(seed, 5)
    sampler = SamplerService(_config())
    spent: dict[int, float] = {}

    def run(lo: int, hi: int) -> None:
        for key, agg in sampler.process(stream.rows(slice(lo, hi))).traffic.items():
            spent[key.bucket] = spent.get(key.bucket, 0.0) + agg.pi_total

    run(0, PER_BUCKET)
    sampler.calibration = {"default": TRUSTING}
    run(PER_BUCKET, change_at)
    sampler.calibration = {"default": UNDOING}
    run(change_at, len(stream))
    first = int(START // 3600)
    mean_q = {}
    for b in range(1, 5):
        ctl = sampler.control("default", 0, first + b)
        assert ctl is not None
        mean_q[b] = [s.mean_qstar for s in (ctl, *(r.control for r in ctl.refreshes))]
    # the premise: q* under the undoing map is about ten times q* under the trusting one
    assert min(mean_q[4]) > 5.0 * max(mean_q[1][1:])
    ratio = {b - first: spent[b] / BUDGET for b in spent}
    assert max(ratio[b] for b in range(1, 5)) <= MAX_SPEND, ratio
    assert ratio[1] >= 1.0 / MAX_SPEND, ratio  # and spends it
    # Known limit (monitor.stats.budget): while g slides after the map, the normaliser holds q*
    # at the earlier g, so buckets 3 and 4 under-spend; bucket 4 measured 0.63-0.96 (0.67-1.00
    # while the cap re-solve read that drift as caps)
    assert ratio[4] >= 0.6, ratio


def test_a_pending_map_is_adopted_after_refresh_records_records() -> None:
    stream = _stream(3, 2)
    sampler = SamplerService(_config())
    sampler.process(stream.rows(slice(0, PER_BUCKET + 1500)))
    sampler.calibration = {"default": UNDOING}
    sampler.process(stream.rows(slice(PER_BUCKET + 1500, len(stream))))
    ctl = sampler.control("default", 0, int(START // 3600) + 1)
    assert ctl is not None
    stages = [(r.offset - PER_BUCKET, r.control, r.base) for r in ctl.refreshes]
    # refreshes at 1000 (no map), 2000 (the map is pending: q* summed under it), 3000 (taken,
    # normalised by the 1000 records summed under it), then 4000 on the doubling schedule
    assert [o for o, _, _ in stages] == [1000, 2000, 3000, 4000]
    assert [b[0] for _, _, b in stages if b is not None] == [1000, 2000, 3000, 4000]
    _, pending, _ = stages[1]
    assert pending.calibration.version == 0 and pending.accumulate == UNDOING
    _, taken, base = stages[2]
    assert taken.calibration == UNDOING and taken.accumulate is None
    _, _, before = stages[1]
    assert before is not None and base is not None
    summed = (base[1] - before[1]) / (1 << 24) / (base[0] - before[0])
    assert taken.mean_qstar == pytest.approx(summed, rel=1e-12)


def test_pending_maps_and_bases_round_trip_and_old_records_still_load() -> None:
    plain = Control(0.5, 0.01, 0.2, calibration=TRUSTING)
    pending = Control(0.4, 0.02, 0.3, calibration=TRUSTING, accumulate=UNDOING)
    cold = Control(0.5, 0.03, math.nan, accumulate=UNDOING)  # uniform, no map, one pending
    capped = (1000, 5 << 24, 7 << 20, 8 << 20)
    ctl = pending.refreshed(1000, plain, capped).refreshed(2000, cold, (2000, 9, 3, 3))
    assert control_to_list(plain) == [0.5, 0.01, 0.2, TRUSTING.to_list()]  # as before
    for c in (plain, pending, cold):
        assert control_from_list(json.loads(json.dumps(control_to_list(c)))) == c
        assert with_maps(Control(c.g, c.kappa, c.mean_qstar), maps_to_list(c)) == c
    assert maps_to_list(Control(0.5, 0.01, 0.2)) is None
    back = with_refreshes(pending, json.loads(json.dumps(refreshes_to_list(ctl))))
    assert back == ctl and back.refreshes[0].base == capped
    # the uncapped sum is written only where a cap bound, as the aggregates write it
    written = json.loads(json.dumps(refreshes_to_list(ctl)))
    assert [r[-1]["base"] for r in written] == [list(capped), [2000, 9, 3]]
    three = with_refreshes(pending, [[1000, 0.5, 0.01, 0.2, None, {"base": [7, 8, 9]}]])
    assert three.refreshes[0].base == (7, 8, 9, 9)
    # a refresh written before bases and pending maps existed
    old = with_refreshes(
        plain, [[1000, 0.5, 0.01, 0.2, TRUSTING.to_list()], [2000, 0.5, 0.01, 0.2]]
    )
    assert [r.base for r in old.refreshes] == [None, None]
    assert not any(r.control.pending for r in old.refreshes)
    with pytest.raises(ValueError, match="base"):
        with_refreshes(plain, [[1000, 0.5, 0.01, 0.2, None, {"base": [1, -2, 3]}]])
    with pytest.raises(ValueError, match="extra"):
        control_from_list([0.5, 0.01, 0.2, None, {"other": 1}])


def test_a_store_without_refresh_bases_decides_as_before_when_no_map_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Controls written before bases existed (no base, no pending map): a sampler resumed from
    them makes the requests an uninterrupted one makes. Such a store predates the refreshes by
    a stage's age (``budget.REFRESH_AGE``) too, so the runs compared have none."""
    monkeypatch.setattr(budget, "REFRESH_AGE", math.inf)
    stream = _stream(5, 3)
    whole = SamplerService(_config())
    want = [r.to_json() for r in whole.process(stream).requests]
    first = SamplerService(_config())
    got = [r.to_json() for r in first.process(stream.rows(slice(0, PER_BUCKET + 2500))).requests]
    changes = first.take_changes()
    assert any(r.base is not None for c in changes.controls.values() for r in c.refreshes)
    legacy = {
        k: replace(c, refreshes=tuple(replace(r, base=None) for r in c.refreshes))
        for k, c in changes.controls.items()
    }
    resumed = SamplerService(_config(), traffic=changes.traffic, controls=legacy)
    got += [
        r.to_json() for r in resumed.process(stream.rows(slice(PER_BUCKET + 2500, None))).requests
    ]
    assert got == want


def test_a_model_configured_not_to_recalibrate_drops_a_stored_map() -> None:
    """A deployment whose store holds a map, restarted with ``recalibrate: false``: the map kept
    deciding for good (the sampler took the stored one whatever the configuration, and no
    refit came to replace it). Now the next controls take the raw scores, as they take any new
    map: pending first, so the spend stays the budget, then in force."""
    stream = _stream(5, 3)
    first = SamplerService(_config())
    first.calibration = {"default": UNDOING}
    first.process(stream.rows(slice(0, PER_BUCKET + 2500)))
    changes = first.take_changes()
    hour = int(START // 3600) + 1
    assert changes.controls[("default", 0, hour)].latest.calibration == UNDOING
    off = Config(models={"default": replace(_config().models["default"], recalibrate=False)})
    resumed = SamplerService(off, traffic=changes.traffic, controls=changes.controls)
    resumed.calibration = {"default": UNDOING}  # what the store holds
    resumed.process(stream.rows(slice(PER_BUCKET + 2500, None)))
    ctl = resumed.control("default", 0, hour)
    assert ctl is not None and ctl.latest.calibration.version == 0
    after = resumed.control("default", 0, hour + 1)
    assert after is not None
    assert all(s.calibration.version == 0 for s in (after, *(r.control for r in after.refreshes)))
