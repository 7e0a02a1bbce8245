import math

import numpy as np
import numpy.typing as npt

from monitor.core.windows import (
    FIXED_ONE,
    GroupKey,
    TrafficAggregate,
    bucket_of,
    group_traffic,
    preceding_buckets,
    window_buckets,
)
from monitor.stats.drift import SCORE_BINS, score_histogram
from tests.unit.engine_streams import Stream, make_stream, random_cuts


def _group(
    s: Stream,
    rows: slice,
    qstar: npt.NDArray[np.float64],
    pi: npt.NDArray[np.float64],
    requested: npt.NDArray[np.bool_],
) -> dict[GroupKey, TrafficAggregate]:
    n = len(s.score[rows])
    return group_traffic(
        np.full(n, "m"),
        s.segment[rows],
        bucket_of(s.ts[rows], 3600),
        s.partition[rows],
        s.score[rows],
        s.pred[rows],
        qstar[rows],
        requested[rows],
        pi[rows],
        s.ts[rows],
    )


def test_group_traffic_matches_direct_sums(rng: np.random.Generator) -> None:
    s = make_stream(rng, 3000, partitions=3, segments=("", "a", "b"))
    qstar, pi = rng.random(3000), rng.random(3000)
    requested = rng.random(3000) < pi
    groups = _group(s, slice(None), qstar, pi, requested)
    b = bucket_of(s.ts, 3600)
    assert sum(a.n for a in groups.values()) == 3000
    for key, agg in groups.items():
        m = (s.segment == key.segment) & (b == key.bucket) & (s.partition == key.partition)
        assert agg.n == int(m.sum())
        assert agg.n_pred == int(s.pred[m].sum())
        assert math.isclose(agg.score_total, s.score[m].sum(), rel_tol=1e-6)
        assert math.isclose(agg.pred_score_total, (s.score * s.pred)[m].sum(), rel_tol=1e-6)
        assert math.isclose(agg.qstar_total, qstar[m].sum(), rel_tol=1e-6)
        assert math.isclose(agg.pi_total, pi[m].sum(), rel_tol=1e-6)
        assert agg.n_requested == int(requested[m].sum())
        assert np.array_equal(agg.hist, score_histogram(s.score[m]))
        assert agg.ts_min == s.ts[m].min() and agg.ts_max == s.ts[m].max()


def test_aggregates_do_not_depend_on_batch_cuts(rng: np.random.Generator) -> None:
    s = make_stream(rng, 2000, partitions=2, segments=("x", "y"))
    qstar, pi = rng.random(2000), rng.random(2000)
    requested = rng.random(2000) < pi
    whole = _group(s, slice(None), qstar, pi, requested)
    merged: dict[GroupKey, TrafficAggregate] = {}
    for cut in random_cuts(rng, 2000, 17):
        for key, agg in _group(s, cut, qstar, pi, requested).items():
            merged[key] = merged.get(key, TrafficAggregate.zero()) + agg
    assert merged == whole  # exact: fixed-point sums are associative


def test_zero_is_neutral_and_hist_has_bins() -> None:
    z = TrafficAggregate.zero()
    assert z.hist.shape == (SCORE_BINS,)
    assert (z + z) == z and math.isnan(z.mean_qstar)
    a = TrafficAggregate(n=2, sum_qstar=3 * FIXED_ONE, ts_min=5.0, ts_max=6.0)
    assert a + z == a and a.mean_qstar == 1.5


def test_buckets_and_windows_are_epoch_anchored() -> None:
    assert bucket_of(np.array([0.0, 3599.999, 3600.0, 7201.0]), 3600).tolist() == [0, 0, 1, 2]
    assert list(window_buckets(100, 86_400, 3600)) == list(range(77, 101))
    assert list(preceding_buckets(100, 7200, 3600)) == [97, 98]
    assert list(window_buckets(5, 600, 3600)) == [5]  # shorter than a bucket: one bucket
