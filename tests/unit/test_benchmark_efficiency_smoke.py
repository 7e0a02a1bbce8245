"""The efficiency benchmark still runs end to end (tiny repetitions) and its arithmetic holds."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    from benchmarks import efficiency
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import efficiency


def test_core_runs_on_every_kind_of_case() -> None:
    cases = efficiency.build_cases(pool_size=2000, n_pools=1, seed=1, digits=True)
    assert len(cases) == 3 * 3 * 3 + 3
    picked = [cases[1], cases[10], cases[-2]]  # calibrated 1% F1, logits x3 5% recall, digits F1
    results = efficiency.run(picked, reps=3, seed=1)
    for case, cells in zip(picked, results, strict=True):
        assert set(cells) == {(m, b) for m in efficiency.METHODS for b in efficiency.BUDGETS}
        for (method, budget), cell in cells.items():
            assert 0.0 <= cell.undefined <= 1.0
            assert cell.labels == pytest.approx(budget, rel=0.6), (case.name, method, budget)
            if not math.isnan(cell.mae):
                assert 0.0 <= cell.mae <= 1.0 and 0.0 <= cell.coverage <= 1.0
        block = efficiency.render_case(case, cells, efficiency.BUDGETS, efficiency.METHODS)
        assert case.name in block and all(m in block for m in efficiency.METHODS)
    lines = efficiency.summary(picked, results, efficiency.BUDGETS)
    assert any(line.startswith("Goal 1") for line in lines)


def test_digits_case_is_a_shifted_rare_class() -> None:
    pool = efficiency.digits_pool(seed=1)
    assert 5000 < pool.score.size < 10_000
    assert 0.02 < pool.label.mean() < 0.06
    # trained on degraded images, the model is over-confident about the 3s on clean ones
    assert pool.pred.mean() > 2 * pool.label.mean()


def test_labels_for_error_interpolates_and_flags_bounds() -> None:
    budgets = (100, 400)
    # MAE 0.2 at 100 and 0.1 at 400: 1/sqrt(n); 0.1414 is reached at 200
    mid = efficiency.labels_for_error(budgets, (0.2, 0.1), 0.2 / math.sqrt(2))
    assert (round(mid.factor), mid.bound) == (200, "")
    assert efficiency.labels_for_error(budgets, (0.2, 0.1), 0.3) == efficiency.Savings(100.0, ">")
    beyond = efficiency.labels_for_error(budgets, (0.2, 0.1), 0.05)
    assert (round(beyond.factor), beyond.bound) == (1600, "~")
    census = efficiency.labels_for_error(budgets, (0.2, 0.0), 0.1)
    assert 100 < census.factor < 400 and census.bound == ""


def test_selection_weights_match_their_definitions() -> None:
    rng = np.random.default_rng(0)
    score = rng.random(1000)
    pool = efficiency.Pool(
        score, (score >= 0.5).astype(np.int8), (rng.random(1000) < score).astype(np.int8)
    )
    assert np.all(efficiency.selection_weights("passive", pool, 0.5) == 1.0)
    precision = efficiency.selection_weights("active_F l=0", pool, 1.0)
    assert np.all(precision[pool.pred == 0] == 0.0)
    mixed = efficiency.selection_weights("active_F l=0.2", pool, 1.0)
    assert np.allclose(mixed[pool.pred == 0], 0.2) and mixed.mean() == pytest.approx(1.0)


@pytest.mark.parametrize("design", ["poisson", "with-replacement"])
def test_fast_sample_equals_the_library_constructors(design: str) -> None:
    from monitor.stats.sample import LabeledSample
    from monitor.stats.selection import inclusion_for_budget

    pool = efficiency.build_cases(2000, 1, seed=3, digits=False)[1].pools[0]
    q = efficiency.selection_weights("active_F l=0.1", pool, 0.5)
    pi = inclusion_for_budget(q, 100)[0]
    u = np.random.default_rng(0).random(2000)
    fast = efficiency._sample(design, pool, q, budget=100, pi=pi, u=u)
    if design == "poisson":
        take = np.flatnonzero(u < pi)
        ref = LabeledSample.poisson(pool.score[take], pool.pred[take], pool.label[take], pi[take])
    else:
        p = q / q.sum()
        cdf = np.cumsum(p)
        cdf[-1] = 1.0
        idx = np.searchsorted(cdf, u[:100], side="right")
        s, f, y = pool.score[idx], pool.pred[idx], pool.label[idx]
        ref = LabeledSample.with_replacement(s, f, y, p[idx])
    for name in ("score", "pred", "label", "v", "fpc"):
        got, want = getattr(fast, name), getattr(ref, name)
        assert got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)


def test_stream_daemon_runs_only_the_chosen_cells() -> None:
    lines: list[str] = []
    argv = ["--stream-daemon", "--reps", "1", "--seed", "3", "--cells", "calibrated 5%"]
    assert efficiency.main(argv, echo=lines.append) == 0
    rows = [line for line in lines[2:] if line.strip()]
    assert len(rows) == 1 and rows[0].strip().startswith("calibrated 5%, F1")
    windows = int(rows[0].split()[3])
    assert 1 <= windows <= 9  # one stream: its buckets but the cold start
    assert lines[1].split()[-2:] == ["width", "widened"]
    width, widened = (float(x) for x in rows[0].split()[-2:])
    assert 0.0 < width <= 1.0 and 0.0 <= widened <= 1.0
    raw: list[str] = []
    argv += ["--no-recalibrate"]
    assert efficiency.main(argv, echo=raw.append) == 0
    assert "recalibrate: false" in raw[0] and raw[2].strip().startswith("calibrated 5%, F1")
    wrong: list[str] = []
    assert efficiency.main(["--stream-daemon", "--cells", "x7"], echo=wrong.append) == 2
    assert "x7" in wrong[0] and "calibrated 1%, F1" in wrong[0]


def test_stream_daemon_reports_one_bucket_when_asked() -> None:
    lines: list[str] = []
    argv = ["--stream-daemon", "--reps", "2", "--seed", "3", "--cells", "x3 1%", "--bucket", "3"]
    assert efficiency.main(argv, echo=lines.append) == 0
    assert "bucket 3 alone" in lines[0]
    rows = [line for line in lines[2:] if line.strip()]
    assert len(rows) == 1 and rows[0].strip().startswith("x3 1%, F1")
    assert int(rows[0].split()[3]) == 2  # one window of that bucket per stream
    longer: list[str] = []
    argv = ["--stream-daemon", "--reps", "1", "--seed", "3", "--cells", "calibrated 5%"]
    argv += ["--buckets", "12", "--from-bucket", "10"]
    assert efficiency.main(argv, echo=longer.append) == 0
    assert "12 buckets" in longer[0] and "from bucket 10 on" in longer[0]
    assert int(longer[2].split()[3]) == 2  # buckets 10 and 11


def test_stream_segments_prints_every_cell_window_and_design() -> None:
    lines: list[str] = []
    assert (
        efficiency.main(["--stream-segments", "--reps", "1", "--seed", "3"], echo=lines.append) == 0
    )
    rows = [line.split()[-9:] for line in lines[2:]]  # window, design (2 words), windows ...
    assert len(rows) == 4 * 3 * 2  # cells x windows (model, a, b) x designs
    assert {r[0] for r in rows} == {"model", "a", "b"}
    assert {f"{r[1]} {r[2]}" for r in rows} == {"model map", "segment maps"}
    assert all(1 <= int(r[3]) <= 6 for r in rows)  # one stream: its buckets from the fifth on
