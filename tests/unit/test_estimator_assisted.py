"""The daemon's model-assisted estimate (``estimator: model_assisted``) against the stats function.

The estimator's window rows must be ``monitor.stats.greg.choose`` applied to the window's
two-phase sample (``response_sample`` of its requests in request-id order), the p_hat each
request recorded, and the strata's N_h and S_h summed from the sampler's traffic of the window.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monitor.config.schema import Config, ModelConfig, WindowsConfig
from monitor.core.estimator import EstimatorService
from monitor.core.messages import AuditRequest, LabelResult, RawRecord
from monitor.core.sampler import SamplerService
from monitor.core.windows import TrafficAggregate
from monitor.stats.budget import Calibration
from monitor.stats.calibration import PlattMap
from monitor.stats.greg import StratumTraffic, choose, greg_falpha
from monitor.stats.measures import measure_all
from monitor.stats.response import response_sample
from monitor.stats.score_interval import Widening
from tests.unit.engine_streams import make_stream

START = 472_222 * 3600.0  # a bucket start: the 2 h window is two whole buckets


def _config(estimator: str, alpha: float) -> Config:
    model = ModelConfig(
        name="default",
        alpha=alpha,
        labels_per_hour=400.0,
        expected_records_per_hour=4000.0,
        refresh_records=300,
        estimator=estimator,
    )
    return Config(models={"default": model}, windows=WindowsConfig(3600, (("2h", 7200),)))


def _run(
    seed: int, alpha: float, answer: float, estimator: str = "model_assisted"
) -> tuple[EstimatorService, list[AuditRequest], TrafficAggregate, dict[str, int]]:
    """Two hours of traffic through the sampler (the map changing every step), some answered."""
    rng = np.random.default_rng(seed)
    s = make_stream(rng, 8000, start=START, span_s=2 * 3600.0 - 1.0, positive_rate=0.15)
    cfg = _config(estimator, alpha)
    sampler = SamplerService(cfg)
    est = EstimatorService(cfg, clock=lambda: 0.0)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    total = TrafficAggregate.zero()
    requests: list[AuditRequest] = []
    answered: dict[str, int] = {}
    src = RawRecord("labels", 0, 0, 0, None, None)
    for k, rows in enumerate(np.array_split(np.arange(len(s)), 8)):
        a, b = rng.normal(0.0, 0.5), rng.uniform(0.5, 2.0)
        sampler.calibration = {"default": Calibration(k + 1, PlattMap(a, b), 0.1)}
        res = sampler.process(s.batch(rows))
        total = sum(res.traffic.values(), total)
        requests += res.requests
        est.apply_traffic(res.traffic)
        est.upsert_requests(res.requests)
        labels = []
        for r in res.requests:
            if rng.random() < answer:
                answered[r.request_id] = truth[r.id]
                labels.append(LabelResult(r.request_id, None, truth[r.id], None, None, None, src))
        est.handle_labels(labels)
    return est, requests, total, answered


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    alpha=st.sampled_from([0.0, 0.5, 1.0]),
    answer=st.sampled_from([1.0, 0.8, 0.5]),
)
@example(seed=621, alpha=0.0, answer=1.0)  # a window whose labels reject its scores
def test_window_rows_are_the_stats_function_of_the_window(
    seed: int, alpha: float, answer: float
) -> None:
    est, requests, total, answered = _run(seed, alpha, answer)
    row = next(w for w in est.snapshot().windows if w.segment == "")
    assert row.records == total.n and row.ratio is not None
    reqs = sorted(requests, key=lambda r: r.request_id)
    label = np.array([answered.get(r.request_id, -1) for r in reqs])
    sample = response_sample(
        [r.score for r in reqs],
        [r.pred for r in reqs],
        label,
        [r.pi for r in reqs],
        [r.bucket for r in reqs],
    )
    phat = np.array([r.phat for r in reqs], dtype=np.float64)[label >= 0]
    n1 = float(total.n_pred)
    pos = StratumTraffic(n1, total.pred_phat_total)
    neg = StratumTraffic(total.n - n1, total.phat_total - total.pred_phat_total)
    ratio = measure_all(sample, alpha, 0.95)
    want = choose(sample, phat, neg, pos, (ratio.f, ratio.precision, ratio.recall), alpha, 0.95)
    f = (
        greg_falpha(sample, phat, neg, pos, alpha=alpha, level=0.95)
        if want.assisted[0]
        else ratio.f
    )
    assert f == want.f
    ratio_f, ratio_recall, recall = ratio.f, ratio.recall, want.recall
    if row.scores_disagree:  # the window's labels reject its scores: the score-type hull
        wide = Widening.of(sample, alpha, ratio.f, ratio.recall)
        f, recall = wide.apply(f, recall)
        ratio_f, ratio_recall = wide.apply(ratio.f, ratio.recall)
    assert row.ratio == (ratio_f, ratio.precision, ratio_recall)
    assert (row.f, row.precision, row.recall) == (f, want.precision, recall)
    assert row.assisted == want.assisted and row.fallback == want.reason


def test_the_switch_is_used_and_the_ratio_estimator_is_unchanged() -> None:
    est, *_ = _run(3, 0.5, 1.0)
    assisted = next(w for w in est.snapshot().windows if w.segment == "")
    plain_est, *_ = _run(3, 0.5, 1.0, estimator="ratio")
    plain = next(w for w in plain_est.snapshot().windows if w.segment == "")
    assert plain.ratio is None and plain.assisted == (False, False, False)
    assert assisted.ratio is not None and assisted.ratio[0] == plain.f
    assert assisted.assisted[0] and assisted.fallback in ("", "model-assisted estimate undefined")
    assert assisted.f != plain.f


def test_requests_without_a_recorded_p_hat_keep_the_ratio_estimate() -> None:
    """State written before requests recorded p_hat: such a window falls back, saying why."""
    rng = np.random.default_rng(8)
    s = make_stream(rng, 6000, start=START, span_s=7199.0, positive_rate=0.15)
    cfg = _config("model_assisted", 0.5)
    res = SamplerService(cfg).process(s.batch(slice(None)))
    est = EstimatorService(cfg, clock=lambda: 0.0)
    est.apply_traffic(res.traffic)
    old = [
        dataclasses.replace(r, phat=None) if i % 7 == 0 else r for i, r in enumerate(res.requests)
    ]
    est.upsert_requests(old)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    src = RawRecord("labels", 0, 0, 0, None, None)
    est.handle_labels(
        [LabelResult(r.request_id, None, truth[r.id], None, None, None, src) for r in old]
    )
    row = next(w for w in est.snapshot().windows if w.segment == "")
    assert row.ratio is not None and row.f == row.ratio[0]
    assert row.assisted == (False, False, False)
    assert row.fallback == "labels without a recorded p_hat"


def test_a_stratum_with_few_labels_keeps_the_ratio_estimate() -> None:
    est, *_ = _run(4, 0.5, 0.04)  # a few answers only
    row = next(w for w in est.snapshot().windows if w.segment == "")
    assert row.ratio is not None and row.f == row.ratio[0]
    assert "fewer than 20" in row.fallback and not math.isnan(row.f.value)
