"""What the estimator publishes after each update and the exporter renders at scrape time.

A ``Snapshot`` is immutable: publishing one is a single reference swap, so a scrape never
sees half-updated values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.stats.estimate import Confusion, Estimate

_NO_BOUNDS = (math.nan, math.nan)


@dataclass(frozen=True)
class WorstCase:
    """Lowest and highest value of each measure over every value the unanswered labels could take.

    See :func:`monitor.stats.response.worst_case_bounds` (no assumption on why labels are
    missing; exact for strata audited with certainty).
    """

    f: tuple[float, float] = _NO_BOUNDS
    precision: tuple[float, float] = _NO_BOUNDS
    recall: tuple[float, float] = _NO_BOUNDS


@dataclass(frozen=True)
class WindowEstimate:
    """Every estimate for one (model, segment, reported window)."""

    model: str
    segment: str  # "" when the records carry none
    window: str  # the configured window name, e.g. "24h"
    alpha: float
    f: Estimate  # F_alpha
    precision: Estimate
    recall: Estimate
    intrinsic_f: float  # label-free F_alpha from the scores of all traffic in the window
    likelihood: float  # model likelihood on the audited items (NaN without labels)
    ess: float  # effective sample size (sum v)^2 / sum v^2 of the labelled items
    confusion: Confusion
    records: int  # scored records in the window
    requests: int  # audit requests issued for the window
    labels: int  # labels received (used by the estimate)
    pending: int  # requests neither answered nor past their deadline
    missing: int  # requests past their deadline without a label
    psi: float  # population stability index of the scores vs the preceding window (NaN if none)
    # how far the window's real F may stray from intrinsic_f by chance if the scores are
    # calibrated (an upper bound; NaN when unknown)
    intrinsic_se: float = math.nan
    likelihood_log_se: float = math.nan  # super-population se of log(likelihood)
    # labels that arrive late or never (monitor.stats.response): answered / issued requests of
    # the predicted negatives and positives, the shares of the window's sampling weight
    # sum(1/pi) still pending and past its deadline unanswered, and the worst-case bounds
    answer_rate: tuple[float, float] = _NO_BOUNDS
    pending_weight: float = math.nan
    missing_weight: float = math.nan
    worst: WorstCase = field(default_factory=WorstCase)
    # intrinsic F from the recalibrated probabilities p_hat of the window's traffic (under the
    # calibration map of each bucket's control; equal to intrinsic_f without maps)
    intrinsic_f_recalibrated: float = math.nan
    # design-weighted expected calibration error of the raw scores on the audited items
    calibration_error: float = math.nan
    # with models.NAME.estimator = model_assisted (monitor.stats.greg.choose): the ratio
    # estimates of F_alpha, precision and recall (f, precision and recall above are then the
    # model-assisted ones where ``assisted`` says so), and why the ratio was kept where it was;
    # None / all False / "" with the ratio estimator
    ratio: tuple[Estimate, Estimate, Estimate] | None = None
    assisted: tuple[bool, bool, bool] = (False, False, False)
    fallback: str = ""
    # the raw scores disagree with the audit (monitor.stats.score_interval): the intervals of
    # F_alpha and recall (the ratio's too) also hold the score-type bounds
    scores_disagree: bool = False


@dataclass(frozen=True)
class Snapshot:
    """All window estimates at one moment."""

    windows: tuple[WindowEstimate, ...] = ()
    watermarks: Mapping[str, float] = field(default_factory=dict)  # model -> max event time
    created_at: float = 0.0  # wall clock (time.time()) when computed
