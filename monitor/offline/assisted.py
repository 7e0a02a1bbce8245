"""Model-assisted estimate of an offline audit: the pool's scores as a control variate.

``monitor estimate --pool POOL.csv`` knows every item's score, not only the labelled ones'. Per
prediction stratum h it has N_h and S_h = sum of p_hat over the pool, and the regression (GREG)
estimator of ``monitor.stats.greg`` corrects the Horvitz-Thompson sums by how far the labelled
items' p_hat strayed from the pool's (Sarndal, Swensson and Wretman 1992, Sec. 6.4):

    Y_h = sum_s v y + a_h (N_h - sum_s v) + b_h (S_h - sum_s v p_hat),   F = T / D.

p_hat = m(s) with m the calibration map fitted on the labels of the *earlier* rounds
(the map that chose the latest round, ``monitor.offline.rounds``); a single round has no earlier
labels and uses the identity (p_hat = s). The sample is the ratio estimate's
(``design.rounds_mixture``): the latest round's labels, which carry most of the weight, are never
in the map's fit; a middle round's are in both (with rounds of 20, 30 and 150 labels the
intervals still cover, ``tests/statistical/test_offline_assisted_coverage.py``). The regression
coefficients (a_h, b_h) are fitted on the sample (approximately design-unbiased, bias O(1/n)).

The daemon's rule decides where it is used (``monitor.stats.greg.choose``): the ratio estimate
is kept for every measure when a prediction stratum has fewer than ``greg.MIN_LABELS`` labels,
and for one measure when its model-assisted estimate is undefined; the report says which and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError
from monitor.offline.poolfile import Plan, Pool, whole_number
from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.calibration import IDENTITY
from monitor.stats.estimate import Estimate
from monitor.stats.greg import StratumTraffic, choose
from monitor.stats.sample import LabeledSample

_SCORE_ATOL = 1e-9


@dataclass(frozen=True)
class Assisted:
    """The model-assisted F_alpha, precision and recall, and the map p_hat = m(s) they used.

    ``used`` says which of the three are model-assisted (the rest are the ratio estimates) and
    ``reason`` why the ratio was kept ("" when every measure is model-assisted);
    ``scores_disagree`` that F_alpha and recall hold the score-type bounds (``scores_checked``).
    """

    f: Estimate
    precision: Estimate
    recall: Estimate
    cal_map: CalibrationMap
    used: tuple[bool, bool, bool]
    reason: str
    scores_disagree: bool = False


def check_pool(pool: Pool, plans: Sequence[tuple[str, Plan]], pool_path: str) -> None:
    """Refuse a pool the plans were not drawn from (sizes, ids, scores and predictions).

    The pool totals N_h and S_h must be those of the pool the plans were selected from, or the
    estimate would silently describe another population.
    """
    for path, plan in plans:
        for key, have in (
            ("pool_size", len(pool)),
            ("pool_predicted_positives", int(pool.pred.sum())),
        ):
            want = plan.meta.get(key)
            if want is not None and whole_number(want) != have:
                msg = (
                    f"{pool_path}: has {key}={have}, but {path} was planned from a pool with "
                    f"{key}={want}; pass the pool the plan was made from"
                )
                raise InputFileError(msg)
        index = {k: i for i, k in enumerate(pool.ids.tolist())}
        for i, rid in enumerate(plan.ids.tolist()):
            row = index.get(rid)
            if row is None:
                msg = f"{path}: item '{rid}' is not in the pool {pool_path}"
                raise InputFileError(msg)
            pred_differs = plan.pred[i] != pool.pred[row]
            if pred_differs or abs(plan.score[i] - pool.score[row]) > _SCORE_ATOL:
                msg = (
                    f"{path}: item '{rid}' has score {float(plan.score[i])!r}, pred "
                    f"{int(plan.pred[i])} but score {float(pool.score[row])!r}, pred "
                    f"{int(pool.pred[row])} in the pool {pool_path}"
                )
                if pred_differs:
                    msg += (
                        " (a pool with a pred column, or the --threshold of the plan, fixes pred)"
                    )
                raise InputFileError(msg)


def pool_traffic(
    pool: Pool, cal_map: CalibrationMap
) -> tuple[StratumTraffic, StratumTraffic, npt.NDArray[np.float64]]:
    """(N_0, S_0), (N_1, S_1) of the pool under ``cal_map``, and p_hat of every pool item."""
    p_hat = cal_map.apply(pool.score)
    f1 = pool.pred == 1
    neg = StratumTraffic(float(np.count_nonzero(~f1)), float(p_hat[~f1].sum()))
    pos = StratumTraffic(float(np.count_nonzero(f1)), float(p_hat[f1].sum()))
    return neg, pos, p_hat


def assisted_estimate(  # noqa: PLR0917  (the sample, the pool and the ratio it falls back to)
    sample: LabeledSample,
    pool: Pool,
    alpha: float,
    level: float,
    ratio: tuple[Estimate, Estimate, Estimate],
    cal_map: CalibrationMap = IDENTITY,
) -> Assisted:
    """GREG F_alpha, precision and recall of the pool from ``sample`` where the rule allows.

    ``ratio`` holds the ratio estimates of F_alpha, precision and recall from the same sample,
    kept where the model-assisted one is not used (module docstring).
    """
    neg, pos, _ = pool_traffic(pool, cal_map)
    p_hat = cal_map.apply(sample.score)
    c = choose(sample, p_hat, neg, pos, ratio, alpha, level)
    return Assisted(c.f, c.precision, c.recall, cal_map, c.assisted, c.reason)
