import math

import numpy as np
import numpy.typing as npt

from monitor.stats.budget import (
    G_PRIOR,
    Control,
    control_for_bucket,
    selection_weights,
    uniform_control,
)
from monitor.stats.falpha import intrinsic_falpha
from monitor.stats.selection import q_star_falpha


def test_uniform_control_spends_budget_rate() -> None:
    c = uniform_control(labels_per_hour=10, expected_records_per_hour=1000)
    assert c.uniform and c.kappa == 0.01 and c.g == G_PRIOR
    q, pi = selection_weights(np.array([0.1, 0.9]), np.array([0, 1], dtype=np.int8), 0.5, 0.1, c)
    assert pi.tolist() == [0.01, 0.01]
    assert np.all(q > 0)


def _control(
    score: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    alpha: float,
    *,
    ts_min: float,
    prev_bucket: int = 10,
    n_partitions: int = 1,
    lph: float = 20.0,
) -> Control:
    qstar = q_star_falpha(score, pred, alpha, 0.5)
    return control_for_bucket(
        n=len(score),
        n_pred=int(pred.sum()),
        pred_score_total=float((score * pred).sum()),
        score_total=float(score.sum()),
        mean_qstar=float(qstar.mean()),
        ts_min=ts_min,
        prev_bucket=prev_bucket,
        alpha=alpha,
        labels_per_hour=lph,
        bucket_s=3600,
        n_partitions=n_partitions,
    )


def test_control_from_previous_bucket(rng: np.random.Generator) -> None:
    score = rng.random(5000)
    pred = (score > 0.5).astype(np.int8)
    c = _control(score, pred, 0.5, ts_min=36_000.0, n_partitions=2)
    assert math.isclose(c.g, intrinsic_falpha(score, pred, 0.5))
    assert math.isclose(c.kappa, (20.0 / 2) / 5000)
    assert not c.uniform
    # a partition that started 15 min before the end of its first bucket: extrapolated x4
    late = _control(score, pred, 0.5, ts_min=36_000.0 + 2700.0)
    assert math.isclose(late.kappa, 20.0 / (5000 * 4))


def test_pi_is_min_one_kappa_q_and_mean_q_is_one(rng: np.random.Generator) -> None:
    score = rng.random(20_000)
    pred = (score > 0.7).astype(np.int8)
    c = _control(score, pred, 0.5, ts_min=36_000.0)
    q = q_star_falpha(score, pred, 0.5, c.g)
    c = Control(c.g, c.kappa, float(q.mean()))
    qstar, pi = selection_weights(score, pred, 0.5, 0.2, c)
    qmix = 0.8 * qstar / qstar.mean() + 0.2
    assert np.allclose(pi, np.minimum(1.0, c.kappa * qmix))
    assert math.isclose(pi.sum(), 20.0, rel_tol=0.02)  # expected requests = the budget
    assert pi.min() >= 0.2 * c.kappa  # defensive share keeps every record possible
