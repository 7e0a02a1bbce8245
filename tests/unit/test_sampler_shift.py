"""A shift of the score distribution raises the defensive share before any label arrives.

The stream's model turns over-confident (logits x10) at the start of bucket 2. The first
bucket after it is decided before any label of the drifted model exists, with a map fitted on
the earlier traffic; its refreshes see the drifted scores and decide closer to uniform
(``monitor.stats.drift.shift_share``), and keep doing so while that map stays in force. Healthy
traffic leaves the share alone. The shift share is stored with the control, so a sampler resumed
from stored state decides the same.
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
from monitor.stats.budget import (
    Calibration,
    Control,
    control_from_list,
    control_to_list,
    maps_to_list,
    refresh_times,
    refreshes_to_list,
    with_maps,
    with_refreshes,
)
from monitor.stats.calibration import PlattMap
from monitor.stats.drift import SHIFT_MAX, score_histogram
from tests.unit.engine_streams import hourly_batch

PER_BUCKET = 3000
START = 1_800_000_000.0
FIRST = int(START // 3600)
LAM0 = 0.1
FITTED = Calibration(version=1, cal_map=PlattMap(0.0, 1.0 + 1e-9), lam=0.12)
REFITTED = Calibration(version=2, cal_map=PlattMap(0.0, 0.1), lam=0.2)


def _config() -> Config:
    model = ModelConfig(
        name="default",
        labels_per_hour=100.0,
        expected_records_per_hour=float(PER_BUCKET),
        defensive=LAM0,
    )
    return Config(models={"default": model})


def _stream(seed: int, buckets: int, drift_at: int | None) -> ScoredBatch:
    rng = np.random.default_rng(seed)
    z = rng.normal(logit_mean_for_rate(0.05, LOGIT_SD), LOGIT_SD, PER_BUCKET * buckets)
    if drift_at is not None:
        z[drift_at * PER_BUCKET :] *= 10.0
    score = 0.5 * (1.0 + np.tanh(0.5 * z))
    return hourly_batch(score, np.sort(rng.random(PER_BUCKET)), START)


def _stages(sampler: SamplerService, b: int) -> list[Control]:
    ctl = sampler.control("default", 0, FIRST + b)
    assert ctl is not None
    return [ctl, *(r.control for r in ctl.refreshes)]


def test_the_refreshes_of_the_first_drifted_bucket_raise_the_share_until_a_new_map() -> None:
    stream = _stream(1, 6, drift_at=2)
    sampler = SamplerService(_config())
    sampler.process(stream.rows(slice(0, PER_BUCKET)))
    sampler.calibration = {"default": FITTED}
    sampler.process(stream.rows(slice(PER_BUCKET, 4 * PER_BUCKET)))
    sampler.calibration = {"default": REFITTED}  # fitted once labels of the drift exist
    sampler.process(stream.rows(slice(4 * PER_BUCKET, None)))
    # bucket 1 is healthy; bucket 2 (drifted) is decided with the map fitted before the drift:
    # its first control cannot see the drift, its refreshes (records 1000, 2000 and a quarter
    # hour after each stage) do
    assert all(s.shift == 0.0 for s in _stages(sampler, 1))
    drifted = _stages(sampler, 2)
    assert drifted[0].shift == 0.0 and drifted[0].calibration == FITTED
    assert len(drifted) > 3 and all(s.shift == SHIFT_MAX for s in drifted[1:])
    assert all(s.share(LAM0) == SHIFT_MAX for s in drifted[1:])
    # bucket 3's refreshes compare drifted with drifted traffic, but the map is still the one
    # fitted before the drift: the raise stays
    assert all(s.calibration == FITTED and s.shift == SHIFT_MAX for s in _stages(sampler, 3))
    # a new map is taken in bucket 4 (pending at its start): from then on the raise is over
    after = _stages(sampler, 4)
    assert after[0].calibration == FITTED and after[0].shift == SHIFT_MAX
    taken = [s for s in after if s.calibration == REFITTED]
    assert taken and all(s.shift == 0.0 and s.share(LAM0) == REFITTED.lam for s in taken)


@pytest.mark.parametrize(("fit_buckets", "raised"), [((1, 2, 3), True), ((3,), False)])
def test_a_new_map_ends_the_raise_only_when_fitted_on_traffic_like_the_current(
    fit_buckets: tuple[int, ...], raised: bool
) -> None:
    """A map refitted on labels whose traffic still includes the healthy bucket before the
    drift (buckets 1-3: one healthy, two drifted; the drift starts at bucket 2) is suspect: its
    controls keep the raise. One fitted on a drifted bucket's labels alone ends it."""
    stream = _stream(1, 6, drift_at=2)
    reference = tuple(
        int(c)
        for c in score_histogram(
            np.concatenate(
                [stream.score[b * PER_BUCKET : (b + 1) * PER_BUCKET] for b in fit_buckets]
            )
        )
    )
    refitted = replace(REFITTED, reference=reference)
    sampler = SamplerService(_config())
    sampler.process(stream.rows(slice(0, PER_BUCKET)))
    sampler.calibration = {"default": FITTED}
    sampler.process(stream.rows(slice(PER_BUCKET, 4 * PER_BUCKET)))
    sampler.calibration = {"default": refitted}
    sampler.process(stream.rows(slice(4 * PER_BUCKET, None)))
    taken = [s for b in (4, 5) for s in _stages(sampler, b) if s.calibration == refitted]
    assert taken
    assert all(s.shift == (SHIFT_MAX if raised else 0.0) for s in taken)


def test_without_a_map_consecutive_traffic_is_compared() -> None:
    """The drifted bucket's refreshes (its records so far against the bucket before) and the
    next bucket's first control (the drifted bucket against the one before it); no later."""
    sampler = SamplerService(_config())
    sampler.process(_stream(2, 4, drift_at=2))
    healthy, drifted, after = ([s.shift > 0.0 for s in _stages(sampler, b)] for b in range(1, 4))
    assert not any(healthy) and len(healthy) > 3
    assert drifted[0] is False and all(drifted[1:])
    assert after[0] is True and not any(after[1:])


@pytest.mark.parametrize("seed", [3, 4])
def test_healthy_traffic_never_raises_it(seed: int) -> None:
    sampler = SamplerService(_config())
    sampler.calibration = {"default": FITTED}
    sampler.process(_stream(seed, 6, drift_at=None))
    assert all(s.shift == 0.0 for b in range(6) for s in _stages(sampler, b))


def test_shift_shares_round_trip_and_old_records_still_load() -> None:
    plain = Control(0.5, 0.01, 0.2, calibration=FITTED)
    raised = Control(0.5, 0.01, 0.2, calibration=FITTED, shift=0.4)
    bare = Control(0.5, 0.01, 0.2, shift=0.3)  # no map
    pending = Control(0.4, 0.02, 0.3, calibration=FITTED, accumulate=REFITTED, shift=0.5)
    assert control_to_list(plain) == [0.5, 0.01, 0.2, FITTED.to_list()]  # as before
    assert maps_to_list(plain) == FITTED.to_list()
    for c in (plain, raised, bare, pending):
        assert control_from_list(json.loads(json.dumps(control_to_list(c)))) == c
        stored = json.loads(json.dumps(maps_to_list(c)))
        assert with_maps(Control(c.g, c.kappa, c.mean_qstar), stored) == c
    ctl = plain.refreshed(1000, raised, (1000, 5 << 24, 7 << 20, 7 << 20)).refreshed(2000, bare)
    assert with_refreshes(plain, json.loads(json.dumps(refreshes_to_list(ctl)))) == ctl
    assert bare.share(LAM0) == 0.3 and raised.share(LAM0) == 0.4 and plain.share(LAM0) == 0.12
    for bad in (0.0, 1.5, True, "0.3", math.nan):
        with pytest.raises(ValueError, match="shift"):
            control_from_list([0.5, 0.01, 0.2, None, {"shift": bad}])
        with pytest.raises(ValueError, match="shift"):
            with_maps(plain, {"maps": None, "shift": bad})
    with pytest.raises(ValueError, match="shift"):
        with_maps(plain, {"maps": None})


@pytest.mark.parametrize("cut", [2 * PER_BUCKET + 1500, 3 * PER_BUCKET + 10])
def test_a_sampler_resumed_from_stored_state_decides_the_same(cut: int) -> None:
    """Cut inside the drifted bucket (between its raised refreshes) or just after it (the
    raise kept at the next bucket's start): the resumed sampler makes the same requests."""
    stream = _stream(5, 5, drift_at=2)

    def run(sampler: SamplerService, lo: int, hi: int) -> list[bytes]:
        out = []
        for a, b in ((lo, min(hi, PER_BUCKET)), (max(lo, PER_BUCKET), hi)):
            if a < b:
                if a >= PER_BUCKET:
                    sampler.calibration = {"default": FITTED}
                out += [r.to_json() for r in sampler.process(stream.rows(slice(a, b))).requests]
        return out

    want = run(SamplerService(_config()), 0, len(stream))
    first = SamplerService(_config())
    got = run(first, 0, cut)
    changes = first.take_changes()
    assert any(s.shift > 0.0 for c in changes.controls.values() for s in _chain(c))
    # what the store and the aggregates topic hold: the controls written and read back
    controls = {
        k: with_refreshes(
            with_maps(Control(c.g, c.kappa, c.mean_qstar), maps_to_list(c))
            if maps_to_list(c) is not None
            else Control(c.g, c.kappa, c.mean_qstar),
            json.loads(json.dumps(refreshes_to_list(c))),
            json.loads(json.dumps(refresh_times(c))),
        )
        for k, c in changes.controls.items()
    }
    assert controls == changes.controls
    resumed = SamplerService(_config(), traffic=changes.traffic, controls=controls)
    got += run(resumed, cut, len(stream))
    assert got == want
    # and the stored controls alone decide the whole stream again the same way
    again = SamplerService(_config(), controls={**controls, **resumed.take_changes().controls})
    assert [r.to_json() for r in again.process(stream).requests] == want


def _chain(c: Control) -> list[Control]:
    return [c, *(r.control for r in c.refreshes)]
