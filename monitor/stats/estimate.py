"""Result types of the estimators: a point estimate with its interval, and confusion counts."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval.

    ``value`` is NaN (and ``n_labels`` may be 0) when the measure is undefined on the sample,
    e.g. precision before any predicted positive was audited: missing, never 0.

    ``se`` is the design standard error of the window's realised value (with finite-population
    correction) and ``n_eff`` the effective sample size the interval's small-sample fallback used.
    ``se_model`` and ``n_eff_model`` are their super-population counterparts (no
    finite-population correction): the uncertainty about the model's own value, which alerts
    about the model use (DESIGN.md, "Labels that arrive late or never"). NaN when not computed.
    """

    value: float
    se: float
    lower: float
    upper: float
    n_labels: int
    ess: float
    level: float
    n_eff: float = math.nan
    se_model: float = math.nan
    n_eff_model: float = math.nan

    @classmethod
    def missing(cls, level: float, n_labels: int = 0) -> Estimate:
        """The estimate of an undefined measure: NaN everywhere."""
        nan = math.nan
        return cls(nan, nan, nan, nan, n_labels, 0.0, level)

    @property
    def defined(self) -> bool:
        """Whether there is a value at all."""
        return not math.isnan(self.value)


@dataclass(frozen=True)
class Confusion:
    """Estimated confusion counts over the traffic (Horvitz-Thompson sums of 1/pi)."""

    tp: float
    fp: float
    fn: float
    tn: float
