"""The simulated stream: truth computations against direct numpy/sklearn, drift present."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import fbeta_score, precision_score, recall_score

from monitor.sim.workload import (
    Workload,
    WorkloadSpec,
    bucket_truth,
    falpha_from_counts,
    generate,
    truth_of,
    window_truth,
)

SPEC = WorkloadSpec(n=40_000, seed=7)


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(SPEC)


def test_deterministic_given_seed() -> None:
    a, b = generate(WorkloadSpec(n=3000, seed=3)), generate(WorkloadSpec(n=3000, seed=3))
    c = generate(WorkloadSpec(n=3000, seed=4))
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.score, b.score)
    assert np.array_equal(a.label, b.label) and np.array_equal(a.ts, b.ts)
    assert not np.array_equal(a.score, c.score)


def test_shape_times_and_ids(workload: Workload) -> None:
    w = workload
    assert len(w) == SPEC.n
    assert np.all(np.diff(w.ts) >= 0), "records come in event-time order"
    assert w.ts[0] >= SPEC.start_ts and w.ts[-1] < SPEC.end_ts
    assert len(set(w.ids.tolist())) == SPEC.n, "ids are unique"
    assert np.all((w.score >= 0) & (w.score <= 1))
    assert 0.02 <= w.label.mean() <= 0.05, "skewed positive rate"
    # 48 hourly buckets, each with traffic; the diurnal cycle makes them unequal
    counts = bucket_truth(w.ts, w.pred, w.label, 3600)
    assert counts.buckets.size == 48
    per_bucket = counts.tp + counts.fp + counts.fn + counts.tn
    assert per_bucket.sum() == SPEC.n
    assert per_bucket.max() > 1.2 * per_bucket.min()


def test_scores_calibrated_before_drift(workload: Workload) -> None:
    w = workload
    before = ~w.degraded
    s, y = w.score[before], w.label[before]
    for lo, hi in ((0.0, 0.05), (0.05, 0.5), (0.5, 0.95), (0.95, 1.01)):
        sel = (s >= lo) & (s < hi)
        assert sel.sum() > 50
        se = math.sqrt(max(s[sel].mean() * (1 - s[sel].mean()), 1e-4) / sel.sum())
        assert abs(y[sel].mean() - s[sel].mean()) < 4 * se + 0.01


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 0.2])
def test_truth_matches_sklearn(workload: Workload, alpha: float) -> None:
    w = workload
    t = truth_of(w.pred, w.label, alpha)
    if alpha == 0.0:
        expected = recall_score(w.label, w.pred)
    elif alpha == 1.0:
        expected = precision_score(w.label, w.pred)
    else:
        beta = math.sqrt(1.0 / alpha - 1.0)  # alpha = 1 / (1 + beta^2)
        expected = fbeta_score(w.label, w.pred, beta=beta)
    assert t.f == pytest.approx(expected, rel=1e-12)
    assert t.precision == pytest.approx(precision_score(w.label, w.pred), rel=1e-12)
    assert t.recall == pytest.approx(recall_score(w.label, w.pred), rel=1e-12)
    assert t.tp + t.fp + t.fn + t.tn == len(w)


def test_buckets_and_windows_match_direct_numpy(workload: Workload) -> None:
    w = workload
    bucket_s = 3600
    counts = bucket_truth(w.ts, w.pred, w.label, bucket_s)
    direct_bucket = np.floor(w.ts / bucket_s).astype(np.int64)
    f_by_bucket = counts.f(0.5)
    for j, b in enumerate(counts.buckets.tolist()):
        sel = direct_bucket == b
        p, y = w.pred[sel].astype(bool), w.label[sel].astype(bool)
        tp, fp, fn = (p & y).sum(), (p & ~y).sum(), (~p & y).sum()
        assert (counts.tp[j], counts.fp[j], counts.fn[j]) == (tp, fp, fn)
        expected = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else math.nan
        assert f_by_bucket[j] == pytest.approx(expected, rel=1e-12, nan_ok=True)
    last = int(counts.buckets[-1])
    for k in (1, 6, 24, 168):
        sel = (direct_bucket > last - k) & (direct_bucket <= last)
        expected = truth_of(w.pred[sel], w.label[sel], 0.5)
        assert window_truth(counts, last, k, 0.5) == expected
    # a window anchored mid-stream only sees its own buckets
    mid = int(counts.buckets[23])
    sel = (direct_bucket > mid - 24) & (direct_bucket <= mid)
    assert window_truth(counts, mid, 24, 0.5) == truth_of(w.pred[sel], w.label[sel], 0.5)


def test_degradation_half_way(workload: Workload) -> None:
    w = workload
    before = truth_of(w.pred[~w.degraded], w.label[~w.degraded], 0.5)
    after = truth_of(w.pred[w.degraded], w.label[w.degraded], 0.5)
    assert 0.45 <= w.degraded.mean() <= 0.55
    assert np.all(w.ts[w.degraded] >= SPEC.degrade_ts)
    assert 0.10 <= before.f - after.f <= 0.25, (before.f, after.f)
    assert after.recall < before.recall
    # the label-free view (mean score of predicted positives) misses part of the precision drop
    p = w.pred.astype(bool)
    believed = w.score[p & w.degraded].mean()
    assert believed > after.precision


def test_undefined_is_nan_never_zero() -> None:
    assert math.isnan(falpha_from_counts(0, 0, 0, 0.5))
    assert math.isnan(falpha_from_counts(0, 0, 5, 1.0))  # precision with no predicted positive
    assert falpha_from_counts(0, 3, 0, 0.5) == 0.0  # defined and truly 0
    t = truth_of(np.zeros(10, np.int8), np.zeros(10, np.int8), 0.5)
    assert math.isnan(t.f) and math.isnan(t.precision) and math.isnan(t.recall)


def test_segments_and_record_schema() -> None:
    w = generate(WorkloadSpec(n=2000, segments=("web", "app"), model="fraud-v2", seed=1))
    assert set(w.segment.tolist()) == {"web", "app"}
    rec = w.record(5)
    assert rec["model"] == "fraud-v2" and rec["segment"] in {"web", "app"}
    assert set(rec) == {"id", "score", "ts", "model", "segment", "payload"}
    plain = generate(WorkloadSpec(n=10, seed=1)).record(0)
    assert "segment" not in plain
    truth = dict(w.truth_rows())
    assert len(truth) == 2000 and truth[str(w.ids[5])] == int(w.label[5])


def test_rejects_bad_spec() -> None:
    with pytest.raises(ValueError, match="positive_rate"):
        generate(WorkloadSpec(n=10, positive_rate=0.0))
