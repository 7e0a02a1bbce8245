"""The design and streaming benchmarks run end to end (tiny repetitions) and report misses."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from monitor.core.recalibration import label_window_buckets

try:
    from benchmarks import designs, stream
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import designs, stream


def test_designs_run_on_a_simulated_and_a_real_case() -> None:
    cases = designs.build_cases(pool_size=2000, n_pools=1, seed=1, rates=(0.05,))
    names = [c.name for c in cases]
    assert any(n.startswith("naive Bayes") for n in names)
    assert any(n.startswith("logits x10") for n in names)
    picked = [cases[1], cases[-2]]  # calibrated 5% F1, naive Bayes F1
    results = [designs.evaluate_case(c, reps=2, seed=1, budgets=(50, 800)) for c in picked]
    for cells in results:
        assert set(cells) == {(d, b) for d in designs.DESIGNS for b in (50, 800)}
        for cell in cells.values():
            assert math.isnan(cell.mae) or 0.0 <= cell.mae <= 1.0
    lines = designs.report(picked, results, budgets=(50, 800))
    assert any("Cells that miss" in line for line in lines)


def test_naive_bayes_case_is_a_real_miscalibrated_model() -> None:
    pool = designs.naive_bayes_pool(seed=1)
    assert pool.score.size > 5000 and 0.05 < pool.label.mean() < 0.15
    # naive Bayes is over-confident: most scores are within 1e-6 of 0 or 1
    extreme = np.mean((pool.score < 1e-6) | (pool.score > 1 - 1e-6))
    assert extreme > 0.5


def test_stream_runs_through_the_daemons_sampler() -> None:
    case = stream.StreamCase("x10 smoke", 10.0, 0.05, 0.5, 1000, 60.0)
    rows = stream.run_rep(case, rep=0, seed=1)
    assert {d for d, _ in rows} == set(stream.DESIGNS)
    assert len(rows[("recal", "later")]) == stream.BUCKETS - stream.DRIFT - 1
    tallies = stream.evaluate(case, reps=1, seed=1)
    assert any(line.strip().startswith("x10 smoke") for line in stream.report([(case, tallies)]))


def test_hidden_positives_double_the_rate_after_the_drift_and_leave_the_scores_alone() -> None:
    case = stream.StreamCase("hidden", 1.0, 0.05, 0.5, 20_000, 150.0, hidden=0.05)
    plain = replace(case, hidden=0.0)
    assert case.drifts and not plain.drifts
    for bucket, rate in ((stream.DRIFT - 1, 0.05), (stream.DRIFT, 0.05 + 0.95 * 0.05)):
        batch, label = stream._bucket_batch(np.random.default_rng(7), case, bucket, 0, 0)
        same, plain_label = stream._bucket_batch(np.random.default_rng(7), plain, bucket, 0, 0)
        np.testing.assert_array_equal(batch.score, same.score)  # the scores do not show it
        assert label.mean() == pytest.approx(rate, abs=0.006)
        assert (label >= plain_label).all()  # only new positives


def test_the_daemon_path_fits_maps_on_the_window_the_daemon_uses_at_its_budget() -> None:
    # benchmarks/README.md's daemon-path tables (150 labels a bucket) stand for the product
    # while these agree
    assert label_window_buckets(3600, 150.0) == stream.FIT_BUCKETS
