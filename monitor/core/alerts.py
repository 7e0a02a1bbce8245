"""Alert evaluation over published Snapshots (issue 4): decisions, state, and their evidence.

Three alerts per (model, segment, window), configured per model by :class:`AlertConfig`:

- ``f_below_floor`` (critical): the one-sided upper confidence bound of the monitored measure
  (F_alpha, precision or recall) is below ``floor``;
- ``f_dropped`` (warning): the measure is significantly below a reference (a configured
  ``baseline`` with its ``baseline_se``, or the same window ``reference_lag_s`` earlier, which
  must not overlap it), tested on the difference of the two independent estimates
  (:func:`monitor.stats.alerting.drop_bound`);
- ``model_untrustworthy`` (warning): the model likelihood is significantly below
  ``likelihood_floor`` (its upper confidence bound is), or the intrinsic F (what the scores
  claim) lies outside the audited F's interval.

Floors and drops are about the model, not the window's draw: their bounds use the estimator's
super-population standard error and effective size (:mod:`monitor.stats.alerting`).

Repeated looks. A window is re-tested once 1/``looks_per_window`` of it has been renewed (every
3 h for 24 h, 21 h for 7 d; never more often than ``check_interval_s``), by event time (the
model's watermark), and only when it has ``min_labels`` labels. Consecutive hourly estimates of
a 24 h window share 23/24 of their data: testing each would spend the error budget on almost the
same evidence, while fewer looks allow a less strict level (a 7 d window is tested 34 times a
month instead of 720). The price is at most window / ``looks_per_window`` of delay. A look
that decides nothing (fewer than ``min_labels`` labels, no reference yet) spends nothing and
leaves the check open: the next estimate of the same interval is looked at (the labels that
arrive later in it are judged without waiting for the next interval's traffic).

``false_alarm_rate`` is the chance that a healthy (model, segment) raises *any* of its alerts on
*any* alerted window within a horizon: it is split evenly over the A enabled alerts x W alerted
windows, and look k of each fires at the error spent by the rule of
:mod:`monitor.stats.alerting` (default ``horizon``: ``false_alarm_rate / (A W H)`` per look,
H looks per ``horizon_s``; by the union bound at most ``false_alarm_rate`` false alarms per
horizon per (model, segment)).

Hysteresis. An alert fires on the strict (spent) bound and clears only when the bound at the
unadjusted ``false_alarm_rate`` no longer shows the problem (likelihood: back above the floor by
``LIKELIHOOD_BAND``); in between it keeps its state, so a bound hovering at the threshold does
not flap. Fewer than ``min_labels`` labels never change the state.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from monitor.config.schema import AlertConfig
from monitor.stats.alerting import (
    disagreement,
    drop_bound,
    likelihood_upper_bound,
    look_error,
    model_se,
    upper_bound,
)

if TYPE_CHECKING:
    from monitor.config.schema import Config
    from monitor.core.snapshot import Snapshot, WindowEstimate
    from monitor.stats.estimate import Estimate

log = logging.getLogger(__name__)

ALERT_SEVERITY: dict[str, str] = {
    "f_below_floor": "critical",
    "f_dropped": "warning",
    "model_untrustworthy": "warning",
}
#: a likelihood alert clears once the likelihood is this far above its floor again
LIKELIHOOD_BAND = 0.02
#: 2: the reference history names its measure (1, without it, is read without its history)
STATE_VERSION = 2


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

    @property
    def key(self) -> tuple[str, str, str, str]:
        """``(alert, model, segment, window)``."""
        return (self.alert, self.model, self.segment, self.window)


@dataclass
class _KeyState:
    active: bool = False
    since: float = math.nan
    looks: int = 0
    last_check: int | None = None
    status: AlertStatus | None = None


@dataclass(frozen=True)
class _Decision:
    fires: bool
    clears: bool
    bound: float
    threshold: float
    description: str


_NO_DECISION = _Decision(False, False, math.nan, math.nan, "")
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class _Look:
    """One alert to decide on one window estimate."""

    alert: str
    window: WindowEstimate
    cfg: AlertConfig
    est: Estimate  # the monitored measure
    reference: tuple[float, float] | None
    split: int  # the rate is shared by this many (alert, window) tests of the series
    horizon_looks: int  # looks at this window per horizon

    def decide(self, error: float) -> _Decision:
        if self.alert == "f_below_floor":
            return _below_floor(self.window, self.est, self.cfg, error)
        if self.alert == "f_dropped" and self.reference is not None:
            return _dropped(self.window, self.est, self.cfg, self.reference, error)
        return _untrusted(self.window, self.cfg, error)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


@dataclass
class AlertEvaluator:
    """Keeps alert state across Snapshots and returns every alert's status after each one.

    Args:
        config: The daemon's configuration (models, reported windows).
        alert_configs: Per-model alert settings; by default each model's ``alerts`` field
            (``AlertConfig()`` when the model has none).
    """

    config: Config
    alert_configs: Mapping[str, AlertConfig] | None = None
    _state: dict[Key, _KeyState] = field(default_factory=dict, init=False)
    # (model, segment, window) -> (the monitored measure, ``_measure_key``; check index ->
    # (value, se, n_labels) of it): a reference of another measure is no reference
    _history: dict[tuple[str, str, str], tuple[str, dict[int, tuple[float, float, int]]]] = field(
        default_factory=dict, init=False
    )

    def settings(self, model: str) -> AlertConfig:
        """The alert settings of ``model``."""
        if self.alert_configs is not None and model in self.alert_configs:
            return self.alert_configs[model]
        return self.config.model(model).alerts

    def evaluate(self, snapshot: Snapshot) -> list[AlertStatus]:
        """Decide every enabled alert of every window in ``snapshot`` (at most once per check).

        The state of inactive keys the snapshot does not report is forgotten (:meth:`_forget`).

        Returns:
            One status per (alert, model, segment, window) present in the snapshot.
        """
        out: list[AlertStatus] = []
        window_s = dict(self.config.windows.report)
        for w in snapshot.windows:
            cfg = self.settings(w.model)
            if cfg.windows and w.window not in cfg.windows:
                continue
            now = snapshot.watermarks.get(w.model, snapshot.created_at)
            span = window_s.get(w.window)
            check = math.floor(now / cfg.interval_s(span))
            est = _measure(w, cfg.measure)
            reference = self._reference(w, cfg, est, now, span)
            alerts = [
                name
                for name, enabled in (
                    ("f_below_floor", cfg.floor is not None),
                    ("f_dropped", reference is not None),
                    (
                        "model_untrustworthy",
                        cfg.likelihood_floor is not None or cfg.check_calibration,
                    ),
                )
                if enabled
            ]
            split = cfg.tests(len(window_s))
            for alert in alerts:
                look = _Look(alert, w, cfg, est, reference, split, cfg.horizon_looks(span))
                out.append(self._look(look, check, now))
        self._forget({s.key for s in out})
        return out

    def _forget(self, decided: set[Key]) -> None:
        """Drop the state of every inactive key this snapshot does not report, and unused history.

        A segment whose traffic has aged out leaves the snapshots (campaign segments come and
        go): its keys' looks and references would otherwise be kept, and stored, for ever. An
        active key is kept until a look clears it: it is not reported while its window is
        absent (the exporter drops its series and the Alertmanager push sends it resolved),
        and if the segment comes back the alert holds until the evidence clears it. A window's
        reference history lives as long as its ``f_dropped`` key.
        """
        for key in [k for k, s in self._state.items() if k not in decided and not s.active]:
            del self._state[key]
        dropped = {(m, s, w) for a, m, s, w in self._state if a == "f_dropped"}
        for window in [k for k in self._history if k not in dropped]:
            del self._history[window]

    def _look(self, look: _Look, check: int, now: float) -> AlertStatus:
        alert, w, cfg = look.alert, look.window, look.cfg
        key = (alert, w.model, w.segment, w.window)
        st = self._state.setdefault(key, _KeyState())
        if st.last_check == check and st.status is not None:
            return st.status
        n = w.labels if alert == "model_untrustworthy" else look.est.n_labels
        decision = _NO_DECISION
        if n >= cfg.min_labels:
            rate = cfg.false_alarm_rate / look.split
            error = look_error(rate, st.looks + 1, cfg.spending, look.horizon_looks)
            decision = look.decide(error)
            if not math.isnan(decision.bound):
                st.looks += 1
        if decision.fires and not st.active:
            st.active, st.since = True, now
            log.warning(
                "alert firing",
                extra={"event": "alert_firing", "alert": alert, "model": w.model,
                       "segment": w.segment, "window": w.window, "bound": decision.bound,
                       "threshold": decision.threshold},
            )  # fmt: skip
        elif decision.clears and st.active:
            st.active, st.since = False, math.nan
            log.info(
                "alert resolved",
                extra={"event": "alert_resolved", "alert": alert, "model": w.model,
                       "segment": w.segment, "window": w.window},
            )  # fmt: skip
        if not math.isnan(decision.bound):  # a look that decided nothing leaves the check open
            st.last_check = check
        st.status = AlertStatus(
            alert, w.model, w.segment, w.window, st.active, decision.bound,
            decision.threshold, st.since, decision.description,
        )  # fmt: skip
        return st.status

    def _reference(
        self, w: WindowEstimate, cfg: AlertConfig, est: Estimate, now: float, span: int | None
    ) -> tuple[float, float] | None:
        """The configured baseline, or this window's estimate ``reference_lag_s`` ago.

        History is kept per check interval (the latest estimate seen in it); the reference is
        the newest entry at least ``reference_lag_s`` old. ``None``: f_dropped is off for this
        window (no reference configured, or the lag is shorter than the window, which would
        compare overlapping data); ``(nan, nan)``: on, but no usable reference yet.
        """
        if cfg.baseline is not None:
            return cfg.baseline, cfg.baseline_se
        if cfg.reference_lag_s <= 0 or span is None or cfg.reference_lag_s < span:
            return None
        interval = cfg.interval_s(span)
        measure = _measure_key(cfg.measure, w.alpha)
        kept, series = self._history.get((w.model, w.segment, w.window), (measure, {}))
        if kept != measure:  # the measure changed: "recall 0.90, now precision 0.60" fired
            series = {}
        self._history[(w.model, w.segment, w.window)] = (measure, series)
        check = math.floor(now / interval)
        if est.defined and math.isfinite(est.se):
            series[check] = (est.value, model_se(est), est.n_labels)
        old_enough = [c for c in series if c <= check - math.ceil(cfg.reference_lag_s / interval)]
        if not old_enough:
            return (math.nan, math.nan)
        newest = max(old_enough)
        for c in [c for c in series if c < newest]:
            del series[c]
        value, se, n = series[newest]
        if n < cfg.min_labels:
            return (math.nan, math.nan)
        return value, se

    # --- persistence ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Strict-JSON alert state (active flags, looks, reference history; no NaN)."""
        keys = [
            {
                "key": list(k),
                "active": s.active,
                "since": None if math.isnan(s.since) else s.since,
                "looks": s.looks,
            }
            for k, s in self._state.items()
        ]
        history = [
            {"key": [*k, measure], "points": [[c, *v] for c, v in sorted(series.items())]}
            for k, (measure, series) in self._history.items()
        ]
        return {"version": STATE_VERSION, "keys": keys, "history": history}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Load a :meth:`state` (e.g. after a restart); the next snapshot re-decides."""
        self._state.clear()
        self._history.clear()
        for item in state.get("keys", []):
            a, m, s, w = (str(x) for x in item["key"])
            self._state[(a, m, s, w)] = _KeyState(
                active=bool(item["active"]),
                since=math.nan if item.get("since") is None else float(item["since"]),
                looks=int(item["looks"]),
            )
        if state.get("version") != STATE_VERSION:  # a history without its measure
            if state.get("history"):
                log.warning(
                    "alert history of an earlier release dropped: f_dropped compares again once "
                    "reference_lag_s of new estimates are recorded",
                    extra={"event": "alert_history_dropped", "windows": len(state["history"])},
                )
            return
        for item in state.get("history", []):
            m, s, w, measure = (str(x) for x in item["key"])
            self._history[(m, s, w)] = (
                measure,
                {int(c): (float(v), float(se), int(n)) for c, v, se, n in item["points"]},
            )


def _measure_key(measure: str, alpha: float) -> str:
    """The monitored measure as a history key: ``precision``, ``recall`` or ``f@<alpha>``."""
    return f"f@{alpha!r}" if measure == "f" else measure


def _measure(w: WindowEstimate, measure: str) -> Estimate:
    if measure == "precision":
        return w.precision
    if measure == "recall":
        return w.recall
    return w.f


def _name(w: WindowEstimate, measure: str) -> str:
    return f"F_{w.alpha:g}" if measure == "f" else measure


def _below_floor(w: WindowEstimate, est: Estimate, cfg: AlertConfig, error: float) -> _Decision:
    floor = float(cfg.floor if cfg.floor is not None else math.nan)
    bound = upper_bound(est, error)
    if math.isnan(bound):
        return _NO_DECISION
    relaxed = upper_bound(est, cfg.false_alarm_rate)
    text = (
        f"{_name(w, cfg.measure)} {_fmt(est.value)} on {w.window} ({est.n_labels} labels): "
        f"upper bound {_fmt(bound)} at error {error:.2g} vs floor {_fmt(floor)}"
    )
    return _Decision(bound < floor, relaxed >= floor, bound, floor, text)


def _dropped(
    w: WindowEstimate, est: Estimate, cfg: AlertConfig, ref: tuple[float, float], error: float
) -> _Decision:
    ref_value, ref_se = ref
    threshold = ref_value - cfg.drop_tolerance
    bound = drop_bound(est, ref_value, ref_se, error)
    if math.isnan(bound) or math.isnan(threshold):
        return _NO_DECISION
    relaxed = drop_bound(est, ref_value, ref_se, cfg.false_alarm_rate)
    text = (
        f"{_name(w, cfg.measure)} {_fmt(est.value)} on {w.window} vs reference "
        f"{_fmt(ref_value)} (se {_fmt(ref_se)}): upper bound {_fmt(bound)} at error {error:.2g} "
        f"vs {_fmt(threshold)}"
    )
    return _Decision(bound < threshold, relaxed >= threshold, bound, threshold, text)


def _untrusted(w: WindowEstimate, cfg: AlertConfig, error: float) -> _Decision:
    """Likelihood significantly below its floor, or intrinsic F outside the audited F's interval.

    The likelihood check is a test at the look's error: it fires when the upper confidence
    bound of the likelihood (:func:`monitor.stats.alerting.likelihood_upper_bound`) is below
    the floor and clears when the bound at the unadjusted ``false_alarm_rate`` is back above it
    (above it by ``LIKELIHOOD_BAND`` when the likelihood has no standard error). The evidence
    exported is that of the failing check (the likelihood's if both fail), then of the
    calibration check while it is not clear (it holds a firing alert between its two levels),
    else the likelihood bound while it is known, else the calibration bound.
    """
    floor = cfg.likelihood_floor
    lik_known = floor is not None and not math.isnan(w.likelihood)
    lik_bound = likelihood_upper_bound(w.likelihood, w.likelihood_log_se, w.labels, error)
    relaxed = likelihood_upper_bound(
        w.likelihood, w.likelihood_log_se, w.labels, cfg.false_alarm_rate
    )
    band = LIKELIHOOD_BAND if math.isnan(w.likelihood_log_se) else 0.0
    lik_bad = lik_known and lik_bound < float(floor or 0.0)
    lik_clear = not lik_known or relaxed >= float(floor or 0.0) + band
    outside, bound, inside = False, math.nan, True
    if cfg.check_calibration:
        outside, bound = disagreement(w.f, w.intrinsic_f, error, w.intrinsic_se)
        inside = not disagreement(w.f, w.intrinsic_f, cfg.false_alarm_rate, w.intrinsic_se)[0]
    if not lik_known and math.isnan(bound):
        return _NO_DECISION
    fires, clears = lik_bad or outside, lik_clear and inside
    if lik_bad or (lik_known and inside):
        text = (
            f"model likelihood {_fmt(w.likelihood)} (upper bound {_fmt(lik_bound)} at error "
            f"{error:.2g}) vs floor {_fmt(float(floor or 0.0))}"
        )
        return _Decision(fires, clears, lik_bound, float(floor or 0.0), text)
    text = (
        f"intrinsic F_{w.alpha:g} {_fmt(w.intrinsic_f)} vs audited {_fmt(w.f.value)}: "
        f"interval bound {_fmt(bound)} at error {error:.2g}"
    )
    return _Decision(fires, clears, bound, w.intrinsic_f, text)
