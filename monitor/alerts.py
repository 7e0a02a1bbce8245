"""Alert evaluation over published Snapshots (issue 4): decisions, state, and their evidence.

The evaluator itself is added below the result type; the exporter renders ``AlertStatus``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALERT_SEVERITY: dict[str, str] = {
    "f_below_floor": "critical",
    "f_dropped": "warning",
    "model_untrustworthy": "warning",
}


@dataclass(frozen=True)
class AlertStatus:
    """The state of one alert for one (model, segment, window), with the evidence behind it.

    ``bound`` is the confidence bound (or statistic) the decision was taken on and ``threshold``
    what it was compared with; both NaN when there was nothing to decide on yet. ``since`` is the
    event time (Unix seconds, the model's watermark) at which the alert became active, NaN while
    inactive.
    """

    alert: str
    model: str
    segment: str
    window: str
    active: bool
    bound: float = math.nan
    threshold: float = math.nan
    since: float = math.nan
    description: str = ""

    @property
    def severity(self) -> str:
        """``critical`` pages someone, ``warning`` goes to a work queue."""
        return ALERT_SEVERITY.get(self.alert, "warning")
