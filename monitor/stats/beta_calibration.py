"""Beta calibration: the recalibration map where the Platt form fits badly, and the choice.

Kull, Silva Filho and Flach, "Beta calibration: a well-founded and easily implemented
improvement on logistic calibration for binary classifiers", AISTATS 2017, Eq. 5:

    p_hat = expit(c + a ln s - b ln(1 - s)),   a, b >= 0,

monotone non-decreasing in s (d eta / d s = a / s + b / (1 - s) >= 0) and inside (0, 1). Platt
scaling on the logit (``monitor.stats.calibration``) is the special case a = b, so
(a, b, c) = (1, 1, 0) is the identity. With a != b the map corrects one side of the scores more
than the other: a model whose low scores are far too low while its high scores are right
(a < b) is where an F-measure audit's false negatives hide, and no Platt map fits it.

Fit: the Platt fit's penalised, design-weighted logistic regression
(``calibration.fit_penalised_logistic``) on the features (ln s, -ln(1 - s)), with the same ridge
of ``tau`` pseudo-labels toward the identity, ``tau (c^2 + (a - 1)^2 + (b - 1)^2)``. (Kull et al.
fit without a ridge and drop a feature whose coefficient comes out negative; here the slopes are
clipped at 0 inside the Newton steps, as for Platt.)

Choice (:func:`choose_map`): the beta map replaces the Platt map only where

1. a likelihood-ratio test of its one extra parameter rejects the Platt form at level
   ``BETA_LEVEL`` = 0.01,

       LR = 2 [NLL(Platt fit) - NLL(beta fit)] > chi2_1 quantile 0.99 = 6.63,

   with NLL the labels' negative log-likelihood (without the ridge) at the two fits; and
2. its slope on the side of the low scores is at most its slope on the side of the high scores,
   ``a <= b``: the low scores (the predicted negatives, among which an F-measure audit's false
   negatives hide) are trusted no more than the high ones, so deep among the low scores the beta
   map is at least as cautious as Platt's single slope between a and b.

Why a test and not a held-out log-loss comparison: the labels are few and the fit needs all of
them (a split fits both maps on fewer, and the winner would depend on the split, which would have
to be hashed to stay deterministic); the maps are nested (a = b), so Wilks' theorem states the
false-choice rate: about 1% of fits choose beta when the truth has the Platt form (0.5-0.7%
measured at 100-3,000 labels: the ridge shrinks both fits), checked by simulation
(``tests/unit/stats/test_stats_beta_calibration.py``). With few labels the ridge holds both fits
near the identity, LR stays small and Platt stays. The test conditions on the scores: the audit
chose each item by its score, its prediction (a function of the score) and a control fixed before
the label, so the labels' likelihood given the scores is the same on the audited items as on the
traffic (``monitor.stats.design.recalibrate``).

Why the second condition: the test asks whether the labels are Platt-shaped, not whether the
traffic to come is. Right after a drift the labels of the fit window mix the old calibration and
the new one; no Platt map fits the mixture and the test rightly rejects it, but beta fits the two
sides of the scores separately and took the side of the low scores from the pre-drift labels
(the drifted model's false negatives sit at the defensive floor and are rarely labelled yet):
``a`` near 1, the raw over-confident scores, ``b`` near the drifted slope, where Platt's single
slope carried the drift seen among the high scores over to the low ones. Measured through the
streaming controller (``python -m benchmarks.efficiency --stream --quick --reps 100``, logits
x10 from bucket 3) without the condition: beta decided 16% of the later buckets, one in six, the
first bucket whose window held drifted labels (in the 3 streams inspected: a = 0.8-1.3,
b = 0.07-0.11), and coverage of the later buckets
fell from 0.942 to 0.922 (recall) and 0.930 to 0.900 (F1). A map surer than Platt's that the low
scores are negatives is the one error an F-measure audit cannot afford (q* starves the false
negatives and the interval misses). The price: a miscalibration over-confident among the high
scores only (a > b), which beta would fit, keeps the Platt map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from scipy import stats

from monitor.stats.calibration import (
    DEFAULT_TAU,
    LOGIT_EPS,
    PlattMap,
    expit,
    fit_penalised_logistic,
    fit_platt,
    log_loss,
)

FloatArray = npt.NDArray[np.float64]

#: Level of the likelihood-ratio test that chooses the beta map over Platt.
BETA_LEVEL = 0.01


@dataclass(frozen=True)
class BetaMap:
    """The map p_hat = expit(c + a ln s - b ln(1 - s)); (1, 1, 0) is the identity.

    ``n_labels`` and ``ess`` record how many labels (and their effective number) it was fitted
    on; they do not change the map.

    Examples:
        >>> m = BetaMap(a=0.5, b=1.0, c=0.0)
        >>> round(float(m.apply([0.5])[0]), 4)  # ln 0.5 (0.5 - 1) = 0.3466
        0.5858
    """

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0
    n_labels: int = 0
    ess: float = 0.0

    family: ClassVar[str] = "beta"

    @property
    def is_identity(self) -> bool:
        """Whether the map leaves every score as it is."""
        return self.a == 1.0 and self.b == 1.0 and self.c == 0.0

    def params(self) -> dict[str, float]:
        """The map's parameters by name (a: on ln s, b: on -ln(1 - s), c: intercept)."""
        return {"a": self.a, "b": self.b, "c": self.c}

    def log_odds(self, score: npt.ArrayLike) -> FloatArray:
        """The log-odds of p_hat, c + a ln s - b ln(1 - s), without rounding through p_hat."""
        return _eta(self.a, self.b, self.c, _features(score))

    def apply(self, score: npt.ArrayLike) -> FloatArray:
        """p_hat = expit(c + a ln s - b ln(1 - s)), s clipped as for the logit; identity exact."""
        s = np.asarray(score, dtype=np.float64)
        if self.is_identity:
            return s.copy()
        return expit(self.log_odds(s))


#: Every map a calibration may hold.
CalibrationMap = PlattMap | BetaMap


def _features(score: npt.ArrayLike) -> FloatArray:
    """(ln s, -ln(1 - s)) per score, s clipped to [LOGIT_EPS, 1 - LOGIT_EPS]."""
    s = np.clip(np.asarray(score, dtype=np.float64), LOGIT_EPS, 1.0 - LOGIT_EPS)
    out: FloatArray = np.stack([np.log(s), -np.log1p(-s)], axis=-1)
    return out


def _eta(a: float, b: float, c: float, features: FloatArray) -> FloatArray:
    out: FloatArray = c + a * features[..., 0] + b * features[..., 1]
    return out


def fit_beta(
    score: npt.ArrayLike,
    label: npt.ArrayLike,
    v: npt.ArrayLike,
    *,
    tau: float = DEFAULT_TAU,
) -> BetaMap:
    """Design-weighted beta calibration with a ridge toward the identity (module docstring).

    Args:
        score: Scores of the audited items.
        label: Their labels (0/1).
        v: Their design weights 1/pi (> 0).
        tau: Ridge toward (a, b, c) = (1, 1, 0), in pseudo-labels; > 0.

    Returns:
        The fitted map; the identity without labels.

    Examples:
        >>> fit_beta([], [], []).is_identity
        True
    """
    x = _features(np.asarray(score, dtype=np.float64).reshape(-1))
    theta, ess = fit_penalised_logistic(x, label, v, (0.0, 1.0, 1.0), tau=tau)
    if x.shape[0] == 0:
        return BetaMap()
    return BetaMap(float(theta[1]), float(theta[2]), float(theta[0]), x.shape[0], ess)


def likelihood_ratio(
    score: npt.ArrayLike, label: npt.ArrayLike, platt: PlattMap, beta: BetaMap
) -> float:
    """LR = 2 [NLL(platt) - NLL(beta)] of the labels given the scores (module docstring)."""
    return 2.0 * (log_loss(platt.apply(score), label) - log_loss(beta.apply(score), label))


def choose_map(
    score: npt.ArrayLike,
    label: npt.ArrayLike,
    *,
    tau: float = DEFAULT_TAU,
    level: float = BETA_LEVEL,
) -> CalibrationMap:
    """The Platt fit, or the beta fit where it passes both conditions of the module docstring.

    Both fits count each label once (unit weights; ``monitor.stats.design.recalibrate`` says
    why). Deterministic: a function of the labels, ``tau`` and ``level``.

    Examples:
        >>> s = [0.1, 0.2, 0.8, 0.9]
        >>> choose_map(s, [0, 0, 1, 1]).family  # four labels cannot reject Platt
        'platt'
    """
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    ones = np.ones(s.size)
    platt = fit_platt(s, label, ones, tau=tau)
    if s.size == 0:
        return platt
    beta = fit_beta(s, label, ones, tau=tau)
    critical = float(stats.chi2.ppf(1.0 - level, df=1))
    rejects = likelihood_ratio(s, label, platt, beta) > critical
    return beta if rejects and beta.a <= beta.b else platt
