"""The sampler with a calibration map: q* at p_hat, controls that record the map, codecs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from monitor.config.schema import Config, ModelConfig
from monitor.core import aggregates, recalibration
from monitor.core.aggregates import BucketState
from monitor.core.sampler import SamplerService
from monitor.core.windows import FIXED_ONE, TrafficAggregate, to_fixed
from monitor.stats.beta_calibration import BetaMap
from monitor.stats.budget import NO_CALIBRATION, Calibration, Control
from monitor.stats.calibration import PlattMap
from monitor.stats.falpha import intrinsic_falpha_from_sums
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import q_star_falpha
from tests.unit.engine_streams import make_stream

CAL = Calibration(version=2, cal_map=PlattMap(-0.5, 0.3), lam=0.3)
BETA_CAL = Calibration(version=2, cal_map=BetaMap(a=0.3, b=1.4, c=-0.5), lam=0.3)


def _config() -> Config:
    model = ModelConfig(name="default", labels_per_hour=40.0, expected_records_per_hour=3000.0)
    return Config(models={"default": model})


def test_new_controls_take_the_map_and_decide_at_p_hat(rng: np.random.Generator) -> None:
    s = make_stream(rng, 6000, span_s=3 * 3600)
    sampler = SamplerService(_config())
    first = sampler.process(s.batch(slice(0, 2000)))
    sampler.calibration = {"default": CAL}  # durable from here on (the engine's job)
    rest = sampler.process(s.batch(slice(2000, None)))
    bucket = np.floor(s.ts / 3600).astype(int)
    buckets = sorted(set(bucket.tolist()))
    controls = {b: sampler.control("default", 0, b) for b in buckets}
    opened_before = set(bucket[:2000].tolist())  # controls frozen before the map existed
    assert all(controls[b].calibration == NO_CALIBRATION for b in opened_before)  # type: ignore[union-attr]
    later = [c for b, c in controls.items() if b not in opened_before and c is not None]
    assert later and all(c.calibration == CAL for c in later)
    # requests of a calibrated bucket carry the pi of q* at p_hat, mixed with the map's share
    ctl = later[-1]
    reqs = [r for r in rest.requests if r.bucket == buckets[-1]]
    assert reqs
    score = np.array([r.score for r in reqs])
    pred = np.array([r.pred for r in reqs], dtype=np.int8)
    qstar = q_star_falpha(CAL.cal_map.apply(score), pred, 0.5, ctl.g)
    want = np.minimum(1.0, ctl.kappa * (0.7 * qstar / ctl.mean_qstar + 0.3))
    np.testing.assert_allclose([r.pi for r in reqs], want, rtol=1e-12)
    assert first.requests  # the uncalibrated part decided too


def test_g_of_the_next_control_comes_from_the_recalibrated_sums(rng: np.random.Generator) -> None:
    s = make_stream(rng, 6000, span_s=3 * 3600)
    sampler = SamplerService(_config())
    sampler.calibration = {"default": CAL}
    sampler.process(s.batch(slice(None)))
    b0 = int(np.floor(s.ts.min() / 3600))
    agg = sampler._traffic[("default", 0)][b0 + 1]
    in_b1 = np.floor(s.ts / 3600) == b0 + 1
    p_hat = CAL.cal_map.apply(s.score[in_b1])
    f = s.pred[in_b1]
    assert agg.phat_total == pytest.approx(p_hat.sum(), abs=1e-4)
    assert agg.pred_phat_total == pytest.approx(p_hat[f == 1].sum(), abs=1e-4)
    ctl = sampler.control("default", 0, b0 + 2)
    assert ctl is not None
    g = intrinsic_falpha_from_sums(agg.pred_phat_total, float(agg.n_pred), agg.phat_total, 0.5)
    assert ctl.g == pytest.approx(g)


def test_aggregates_and_controls_round_trip_with_a_map() -> None:
    agg = TrafficAggregate(n=3, n_pred=1, sum_score=FIXED_ONE, sum_pred_score=FIXED_ONE // 2)
    assert len(agg.to_list()) == 12  # p_hat sums differ from the raw ones (0 here)
    assert TrafficAggregate.from_list(agg.to_list()) == agg
    same = TrafficAggregate(n=1, sum_score=5, sum_phat=5)
    assert len(same.to_list()) == 10 and TrafficAggregate.from_list(same.to_list()) == same
    with pytest.raises(ValueError, match="fields"):
        TrafficAggregate.from_list(agg.to_list()[:11])
    capped = TrafficAggregate(n=2, sum_pi=3 << 20, sum_uncapped=5 << 20, sum_score=7)
    assert len(capped.to_list()) == 13 and TrafficAggregate.from_list(capped.to_list()) == capped
    # written before the uncapped sum existed: read as "no cap bound"
    assert TrafficAggregate.from_list(agg.to_list()).sum_uncapped == agg.sum_pi
    state = BucketState(
        "m", 0, 7, through=10, opened=0, control=Control(0.4, 0.01, 0.9, CAL), segments={"": agg}
    )
    _, back = aggregates.decode(aggregates.encode_key(state.key), aggregates.encode(state))
    assert back == state
    plain = BucketState("m", 0, 7, 10, 0, Control(0.4, 0.01, float("nan")), {"": agg})
    body = aggregates.encode(plain)
    assert b'"control":[0.4,0.01,null]' in body  # the format of uncalibrated controls is kept
    bad = body.replace(b"[0.4,0.01,null]", b"[0.4,0.01,null,[1,0,-1,0.1]]")
    with pytest.raises(ValueError, match="calibration"):
        aggregates.decode(aggregates.encode_key(plain.key), bad)


def test_refit_versions_maps_and_keeps_them_when_nothing_changed(
    rng: np.random.Generator,
) -> None:
    score = rng.random(300)
    label = (rng.random(300) < score**3).astype(np.int8)
    pred = (score >= 0.5).astype(np.int8)
    sample = LabeledSample.poisson(score, pred, label, np.full(300, 0.2))
    one = recalibration.refit(NO_CALIBRATION, sample, 0.1)
    assert one.version == 1 and not one.cal_map.is_identity and 0.1 <= one.lam <= 0.5
    assert recalibration.refit(one, sample, 0.1) is one  # same labels: same map, same version
    assert recalibration.refit(one, LabeledSample.concat([]), 0.1) is one
    doc = recalibration.encode({"m": one})
    assert recalibration.decode(doc) == {"m": one}
    assert recalibration.decode(None) == {}
    with pytest.raises(ValueError, match="JSON object"):
        recalibration.decode([1])


@pytest.mark.parametrize("key", ["recalibrate", "segment_maps"])
def test_recalibrate_and_segment_maps_are_checked_per_model_switches(key: str) -> None:
    from monitor.config.load import parse_config
    from monitor.errors import ConfigError

    off = parse_config({"models": {"m": {key: False}}}, "t")
    assert getattr(parse_config(None, "t").model("m"), key)
    assert not getattr(off.models["m"], key)
    with pytest.raises(ConfigError, match=rf"models\.m\.{key}: expected a boolean"):
        parse_config({"models": {"m": {key: "yes"}}}, "t")


def test_records_of_a_segment_with_its_own_map_are_decided_at_its_p_hat(
    rng: np.random.Generator,
) -> None:
    eu_map = PlattMap(1.0, 2.0)
    cal = dataclasses.replace(CAL, segments=(("eu", eu_map),))
    s = make_stream(rng, 6000, span_s=3 * 3600)
    batch = s.batch(slice(None))
    segment = np.where(np.arange(len(batch)) % 2 == 0, "eu", "us")
    sampler = SamplerService(_config())
    sampler.calibration = {"default": cal}
    reqs = sampler.process(dataclasses.replace(batch, segment=segment)).requests
    last = max(r.bucket for r in reqs)
    ctl = sampler.control("default", 0, last)
    assert ctl is not None
    assert all(c.calibration == cal for c in [ctl, *(r.control for r in ctl.refreshes)])
    for name, m in (("eu", eu_map), ("us", CAL.cal_map)):
        got = [r for r in reqs if r.bucket == last and r.segment == name]
        assert got
        want = m.apply(np.array([r.score for r in got]))
        phat = np.array([r.phat for r in got], dtype=np.float64)
        assert np.max(np.abs(phat - want)) < 1e-6


def test_the_estimator_reports_calibration_error_and_recalibrated_intrinsic_f(
    rng: np.random.Generator,
) -> None:
    from monitor.core.estimator import EstimatorService
    from monitor.stats.calibration import calibration_error

    s = make_stream(rng, 6000, span_s=3 * 3600)
    cfg = _config()
    sampler = SamplerService(cfg)
    sampler.calibration = {"default": CAL}
    est = EstimatorService(cfg, clock=lambda: float(s.ts.max()))
    res = sampler.process(s.batch(slice(None)))
    est.apply_traffic(res.traffic)
    est.upsert_requests(res.requests)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    from monitor.core.messages import LabelResult, RawRecord

    raw = RawRecord("labels", 0, 0, 0, None, b"")
    est.handle_labels(
        [LabelResult(r.request_id, None, truth[r.id], None, None, None, raw) for r in res.requests]
    )
    row = next(w for w in est.snapshot().windows if w.window == "24h" and w.segment == "")
    agg = sum(res.traffic.values(), TrafficAggregate.zero())
    want_f = intrinsic_falpha_from_sums(agg.pred_phat_total, float(agg.n_pred), agg.phat_total, 0.5)
    assert row.intrinsic_f_recalibrated == pytest.approx(want_f)
    assert row.intrinsic_f_recalibrated != pytest.approx(row.intrinsic_f)
    score = np.array([r.score for r in res.requests])
    label = np.array([truth[r.id] for r in res.requests])
    v = 1.0 / np.array([r.pi for r in res.requests])
    assert row.calibration_error == pytest.approx(calibration_error(score, label, v))


@pytest.mark.parametrize("cal", [CAL, BETA_CAL], ids=["platt", "beta"])
def test_a_sampler_taking_over_from_the_aggregates_topic_decides_with_the_stored_maps(
    rng: np.random.Generator, cal: Calibration
) -> None:
    """Scale-out hand-over: the controls' maps travel in the bucket states, not in memory."""
    s = make_stream(rng, 6000, span_s=3 * 3600)
    cfg = _config()
    bucket = np.floor(s.ts / 3600).astype(int)
    # resume inside the last bucket, after its control was frozen and published
    committed = (int(np.flatnonzero(bucket == bucket.max())[0]) // 250 + 1) * 250
    assert committed < len(s)
    a = SamplerService(cfg)
    log = aggregates.BucketStates()
    messages: list[tuple[bytes, bytes | None]] = []
    reference: dict[str, bytes] = {}
    for lo in range(0, len(s), 250):
        if lo == 2000:
            a.calibration = {"default": cal}  # the map changes mid-stream
        rows = slice(lo, min(lo + 250, len(s)))
        res = a.process(s.batch(rows))
        reference.update({r.request_id: r.to_json() for r in res.requests})
        for _, key, value in log.record(
            res.traffic, a.take_changes(), {0: lo}, {0: min(lo + 250, len(s))}
        ):
            messages.append((key, value))
    assert {c.calibration.version for c in a._controls.values()} == {0, 2}
    # a new sampler, that never saw the map, resumes at `committed` from the published states
    b = aggregates.BucketStates(aggregates.as_of(messages, {0: committed}).states).service(cfg, 1)
    assert b.calibration == {}
    again = b.process(s.batch(slice(committed, None))).requests
    assert again and all(reference[r.request_id] == r.to_json() for r in again)
    # and nothing else: exactly the reference's requests for the records from `committed` on
    later_ids = set(s.ids[committed:].tolist())
    want = {rid for rid, body in reference.items() if json.loads(body)["id"] in later_ids}
    assert {r.request_id for r in again} == want


def test_requests_record_the_p_hat_their_aggregates_summed() -> None:
    """With every record requested, the requests' p_hat add up to the aggregates' sums exactly.

    The map changes between steps, so the refreshes of one bucket take different maps: each
    request carries the p_hat of the control it was decided with, on the fixed-point grid.
    """
    cfg = Config(
        models={
            "default": ModelConfig(
                name="default",
                labels_per_hour=1e9,  # pi = 1 for every record
                expected_records_per_hour=3000.0,
                defensive=1.0,
                refresh_records=100,
            )
        }
    )
    rng = np.random.default_rng(5)
    s = make_stream(rng, 3000, span_s=2 * 3600.0)
    sampler = SamplerService(cfg)
    total = TrafficAggregate.zero()
    requests = []
    for k, rows in enumerate(np.array_split(np.arange(len(s)), 6)):
        sampler.calibration = {"default": Calibration(k + 1, PlattMap(0.2 * k, 1.0 + k), 0.1)}
        res = sampler.process(s.batch(rows))
        requests += res.requests
        total = sum(res.traffic.values(), total)
    assert len(requests) == len(s)
    phat = np.array([r.phat for r in requests], dtype=np.float64)
    pred = np.array([r.pred for r in requests])
    assert int(to_fixed(phat).sum()) == total.sum_phat
    assert int(to_fixed(phat[pred == 1]).sum()) == total.sum_pred_phat
    assert np.array_equal(to_fixed(phat) / FIXED_ONE, phat)  # already on the grid
    assert len(np.unique(np.round(phat - np.array([r.score for r in requests]), 6))) > 10
