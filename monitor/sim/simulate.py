"""Simulated pools with known truth, for tests, benchmarks and the demo (pure numpy).

A pool is a set of true logits z ~ Normal(mu, LOGIT_SD^2) with labels y ~ Bernoulli(expit(z)),
so the score expit(z) is calibrated; mu is solved so that the expected positive rate
E[expit(z)] equals the requested rate. An over-confident model reports
expit(overconfidence * z) instead (DESIGN.md: logits multiplied by 3 is the known hard case).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Spread of the true logits: discriminative but imperfect (AUC 0.92-0.97 by positive rate).
LOGIT_SD = 3.0

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def _expit(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _mean_score(mu: float, sd: float) -> float:
    """E[expit(mu + sd Z)], Z standard normal, by 64-point Gauss-Hermite quadrature."""
    return float(np.dot(_WEIGHTS, _expit(mu + sd * _NODES)))


def logit_mean_for_rate(positive_rate: float, sd: float = LOGIT_SD) -> float:
    """Solve E[expit(mu + sd Z)] = positive_rate for mu (bisection; monotone in mu)."""
    if not 0.0 < positive_rate < 1.0:
        msg = f"positive_rate must be in (0, 1), got {positive_rate}"
        raise ValueError(msg)
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _mean_score(mid, sd) < positive_rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def calibrated_pool(
    n: int,
    positive_rate: float,
    rng: np.random.Generator,
    overconfidence: float = 1.0,
    *,
    logit_sd: float = LOGIT_SD,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """A pool of n scored items with labels drawn from the calibrated scores.

    z ~ Normal(mu, logit_sd^2) with mu such that E[expit(z)] = positive_rate;
    y ~ Bernoulli(expit(z)); reported score s = expit(overconfidence * z) (calibrated for 1).

    Args:
        n: Pool size.
        positive_rate: Expected share of positives in (0, 1).
        rng: Random generator.
        overconfidence: Multiplier of the logits in the reported score (> 1: over-confident).
        logit_sd: Standard deviation of the true logits (keyword only).

    Returns:
        ``(score, label)``: float64 scores in [0, 1] and int8 labels.
    """
    mu = logit_mean_for_rate(positive_rate, logit_sd)
    z = rng.normal(mu, logit_sd, size=n)
    label = (rng.random(n) < _expit(z)).astype(np.int8)
    score = _expit(overconfidence * z)
    return score, label
