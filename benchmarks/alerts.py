"""Alert benchmark: false alarms on healthy streams and detection delay after a drop of F1.

Many simulated streams of one model, checked hourly over a simulated month:

- Traffic: ``--records-per-hour`` records per hour drawn from a calibrated pool
  (``monitor.sim.simulate.calibrated_pool``), predictions ``score >= 0.5``.
- Audits: Poisson sampling with pi = min(1, kappa q), q = defensive mix (lambda 0.1) of q* for
  F1 (``monitor.stats.selection``), kappa solved for ``--budget`` labels per hour. Exact and
  cheap: the number audited in an hour is Binomial(N, mean pi) and each audited record is a
  pool item drawn with probability proportional to pi.
- Answers: by default every request is answered within its hour. ``--answer-rates a0,a1``
  answers a request of a predicted negative with probability a0 and one of a predicted positive
  with a1 (the rest are skipped: never answered), and ``--mean-delay-hours D`` delays each
  answer by an Exponential(D) number of hours; a window is read at the end of each hour with
  the answers arrived by then (the rest pending).
- Estimates: the real estimator (``response_sample``: answers as a second phase of sampling;
  ``estimate_falpha``, model likelihood and its se) on rolling windows of the last 24 h and
  7 d, fed as Snapshots to the real ``AlertEvaluator``.
- Drift: concept drift at ``--drift-day``: labels follow ``(1 - m) s + m mean(s)`` instead of the
  score s (same prevalence, same scores, so the model still *believes* its old F1), with m solved
  so that the expected F1 drops by exactly ``--drop`` (10 points).
- Alerts: floor = F1_0 - drop / 2 (the drift ends drop / 2 below it), baseline = F1_0 with se
  0.01 (or, with ``--reference lag``, the same window ``--lag-days`` earlier), likelihood
  floor 0.5, calibration check on, 30 labels minimum, false-alarm rate 0.05.
  The rate is shared by the 3 alerts x the alerted windows of a stream, then spent over looks
  (a window is re-tested when 1/8 of it is new: 240 looks a month at 24 h, 34 at 7 d) by
  ``horizon`` (rate / (A W H) per look, the default) or ``anytime`` (rate / (A W) 6 / (pi^2 k^2));
  ``naive`` tests every hour at rate / (A W): no correction for looks, for contrast.

Reported per budget, window and rule: the share of healthy streams that ever alert in the month
(goal: <= 5%), and on drifted streams the share detected before the end, the median delay in
hours after the drift and the median labels spent in that time.

    .venv/bin/python benchmarks/alerts.py            # full table (several minutes)
    .venv/bin/python benchmarks/alerts.py --quick    # < 1 min
    .venv/bin/python benchmarks/alerts.py --answer-rates 0.5,0.9 --mean-delay-hours 6
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.config.schema import AlertConfig, Config, ModelConfig, WindowsConfig
from monitor.core.alerts import AlertEvaluator, AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate
from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Confusion, Estimate
from monitor.stats.falpha import estimate_falpha, intrinsic_falpha
from monitor.stats.likelihood import effective_sample_size, log_likelihood_se, model_likelihood
from monitor.stats.response import response_sample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

HOUR = 3600
WINDOW_HOURS = {"24h": 24, "7d": 168}
ALERTS = ("f_below_floor", "f_dropped", "model_untrustworthy")
MODEL = "m"
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Pool:
    """The traffic distribution, the audit design and the drift of one benchmark setting."""

    score: FloatArray
    pred: npt.NDArray[np.int8]
    pi: FloatArray  # inclusion probability of one record with this score
    cum: FloatArray  # cumulative pi / sum(pi): draws an audited record
    mean_pi: float
    f0: float  # expected F1 before the drift (= intrinsic F1: the scores are calibrated)
    mix: float  # m of the drifted label probability (1 - m) s + m mean(s)

    def label_prob(self, idx: npt.NDArray[np.intp], drifted: bool) -> FloatArray:
        """P(y = 1) of the audited records."""
        s = self.score[idx]
        return (1.0 - self.mix) * s + self.mix * float(self.score.mean()) if drifted else s


def expected_f1(score: FloatArray, pred: npt.NDArray[np.int8], p: FloatArray) -> float:
    """Expected F1 over the pool: sum(f p) / (0.5 sum(f) + 0.5 sum(p))."""
    return float(np.dot(pred, p) / (0.5 * pred.sum() + 0.5 * p.sum()))


def make_pool(args: argparse.Namespace, budget: float, rng: np.random.Generator) -> Pool:
    """Pool, q* design for the budget, and the drift mix giving an F1 drop of ``args.drop``."""
    score, _ = calibrated_pool(args.pool_size, args.positive_rate, rng)
    pred = (score >= 0.5).astype(np.int8)
    g = intrinsic_falpha(score, pred, 0.5)
    q = defensive_mix(q_star_falpha(score, pred, 0.5, g), 0.1)
    # per-record inclusion when records_per_hour are drawn from the pool per hour
    pi, _ = inclusion_for_budget(q, budget * score.size / args.records_per_hour)
    f0 = expected_f1(score, pred, score)
    # F1 is linear in m (prevalence is unchanged): F(m) = f0 - m (f0 - F(1))
    f_full = expected_f1(score, pred, np.full_like(score, score.mean()))
    mix = args.drop / (f0 - f_full)
    if not 0.0 < mix <= 1.0:
        msg = f"cannot drop F1 by {args.drop} from {f0:.3f} on this pool"
        raise SystemExit(msg)
    cum = np.cumsum(pi / pi.sum())
    return Pool(score, pred, pi, cum, float(pi.mean()), f0, mix)


@dataclass(frozen=True)
class Hour:
    """The audited records of one hour and when (if ever) each answer arrives."""

    idx: npt.NDArray[np.intp]  # pool items
    label: npt.NDArray[np.int8]
    arrival: FloatArray  # hour at which the answer arrives (inf: skipped)


@dataclass
class Stream:
    """One simulated stream: its recent hourly audits."""

    drift_hour: int | None
    start_hour: int = 0  # hour of labels[0]
    hours: deque[tuple[int, Hour]] = field(default_factory=lambda: deque(maxlen=168))
    labels: list[int] = field(default_factory=list)  # requests issued per hour

    def step(
        self, pool: Pool, hour: int, args: argparse.Namespace, rng: np.random.Generator
    ) -> None:
        """Audit one hour of traffic; draw which answers come and when."""
        m = int(rng.binomial(args.records_per_hour, pool.mean_pi))
        idx = np.minimum(np.searchsorted(pool.cum, rng.random(m)), pool.cum.size - 1)
        drifted = self.drift_hour is not None and hour >= self.drift_hour
        label = (rng.random(m) < pool.label_prob(idx, drifted)).astype(np.int8)
        willing = rng.random(m) < np.asarray(args.answer_rates)[pool.pred[idx]]
        delay = rng.exponential(args.mean_delay_hours, m) if args.mean_delay_hours > 0 else 0.0
        arrival = np.where(willing, hour + rng.random(m) + delay, np.inf)
        self.hours.append((hour, Hour(idx, label, arrival)))
        self.labels.append(m)


def window_estimate(
    pool: Pool, segment: str, window: str, stream: Stream, now: float
) -> WindowEstimate:
    """The estimates the daemon would publish for one window of one stream at hour ``now``."""
    k = WINDOW_HOURS[window]
    recent = list(stream.hours)[-k:]
    idx = np.concatenate([h.idx for _, h in recent])
    answered = np.concatenate([h.arrival <= now for _, h in recent])
    label = np.where(answered, np.concatenate([h.label for _, h in recent]), -1)
    bucket = np.concatenate([np.full(h.idx.size, b) for b, h in recent])
    sample = response_sample(pool.score[idx], pool.pred[idx], label, pool.pi[idx], bucket)
    f = estimate_falpha(sample, 0.5, 0.95)
    missing = Estimate.missing(0.95)
    n = int(answered.sum())
    return WindowEstimate(
        model=MODEL,
        segment=segment,
        window=window,
        alpha=0.5,
        f=f,
        precision=missing,
        recall=missing,
        intrinsic_f=pool.f0,
        likelihood=model_likelihood(sample.score, sample.label, sample.v),
        likelihood_log_se=log_likelihood_se(sample.score, sample.label, sample.v),
        ess=effective_sample_size(sample.v),
        confusion=Confusion(math.nan, math.nan, math.nan, math.nan),
        records=0,
        requests=idx.size,
        labels=n,
        pending=idx.size - n,
        missing=0,
        psi=math.nan,
    )


RULES: dict[str, dict[str, object]] = {
    "horizon": {"spending": "horizon"},
    "anytime": {"spending": "anytime"},
    # hourly looks, each at the full rate: no correction for repeated looks
    "naive": {"spending": "horizon", "horizon_s": HOUR, "looks_per_window": 0},
}


def alert_config(pool: Pool, args: argparse.Namespace, rule: str) -> AlertConfig:
    """The benchmark's alert settings (see the module docstring)."""
    if args.reference == "lag":  # the same window one week earlier
        reference: dict[str, object] = {"reference_lag_s": args.lag_days * 86_400}
    else:
        reference = {"baseline": pool.f0, "baseline_se": 0.01}
    settings: dict[str, object] = {
        "floor": pool.f0 - args.drop / 2,
        **reference,
        "likelihood_floor": 0.5,
        "min_labels": 30,
        "false_alarm_rate": 0.05,
        "horizon_s": 30 * 86_400,
        "windows": tuple(args.windows),
        **RULES[rule],
    }
    return AlertConfig(**settings)  # type: ignore[arg-type]


# first activation hour per (rule, stream, alert, window)
FirstAlarm = dict[tuple[str, int, str, str], int]


def run_streams(
    pool: Pool, args: argparse.Namespace, drift_hour: int | None, rng: np.random.Generator
) -> tuple[FirstAlarm, list[Stream]]:
    """Simulate ``args.streams`` streams hour by hour and feed every rule's evaluator.

    Healthy streams (``drift_hour`` None) are checked every hour of ``args.days``. Drifted
    streams are simulated from just enough hours before the drift to fill the longest window,
    checked from the drift on, and retired once every alert of every rule has fired.
    """
    hours = args.days * 24
    config = Config(
        models={MODEL: ModelConfig(name=MODEL)},
        default_model=MODEL,
        windows=WindowsConfig(report=tuple((w, WINDOW_HOURS[w] * HOUR) for w in args.windows)),
    )
    evaluators = {
        rule: AlertEvaluator(config, {MODEL: alert_config(pool, args, rule)}) for rule in args.rules
    }
    start = drift_hour or 0
    longest = max(WINDOW_HOURS[w] for w in args.windows)
    # estimates from this hour on: a lagged reference needs the windows a lag before the drift
    estimate_from = max(0, start - (args.lag_days * 24 if args.reference == "lag" else 0))
    first_hour = max(0, estimate_from - longest)
    streams = [Stream(drift_hour, first_hour) for _ in range(args.streams)]
    live = set(range(len(streams)))
    keys = [(r, a, w) for r in args.rules for a in ALERTS for w in args.windows]
    first: FirstAlarm = {}
    for hour in range(first_hour, hours):
        windows = []
        for i in sorted(live):
            streams[i].step(pool, hour, args, rng)
            if hour >= estimate_from:
                windows += [
                    window_estimate(pool, str(i), w, streams[i], hour + 1.0) for w in args.windows
                ]
        if not windows:
            continue
        snapshot = Snapshot(windows=tuple(windows), watermarks={MODEL: hour * HOUR + HOUR - 1.0})
        for rule, evaluator in evaluators.items():
            for s in evaluator.evaluate(snapshot):
                _record(first, rule, s, hour, start)
        if drift_hour is not None:
            live = {i for i in live if any((r, i, a, w) not in first for r, a, w in keys)}
            if not live:
                break
    return first, streams


def _record(first: FirstAlarm, rule: str, s: AlertStatus, hour: int, start: int) -> None:
    key = (rule, int(s.segment), s.alert, s.window)
    if s.active and hour >= start and key not in first:
        first[key] = hour


@dataclass(frozen=True)
class Row:
    """One line of the result table."""

    budget: float
    window: str
    rule: str
    alert: str
    false_alarm: float
    detected: float
    delay_h: float
    labels: float


def summarise(
    args: argparse.Namespace,
    *,
    budget: float,
    null: FirstAlarm,
    drift: FirstAlarm,
    drift_streams: list[Stream],
    drift_hour: int,
) -> list[Row]:
    """False-alarm share, detection share, median delay and labels per (window, rule, alert)."""
    rows = []
    for window in [*args.windows, "any"] if len(args.windows) > 1 else args.windows:
        for rule in args.rules:
            for alert in [*ALERTS, "any"]:
                rows.append(
                    _row(
                        args, budget=budget, window=window, rule=rule, alert=alert, null=null,
                        drift=drift, drift_streams=drift_streams, drift_hour=drift_hour,
                    )
                )  # fmt: skip
    return rows


def _first(
    first: FirstAlarm, rule: str, stream: int, *, alert: str, window: str, windows: list[str]
) -> int | None:
    hits = [
        first[(rule, stream, a, w)]
        for a in (ALERTS if alert == "any" else (alert,))
        for w in (windows if window == "any" else (window,))
        if (rule, stream, a, w) in first
    ]
    return min(hits) if hits else None


def _row(
    args: argparse.Namespace,
    *,
    budget: float,
    window: str,
    rule: str,
    alert: str,
    null: FirstAlarm,
    drift: FirstAlarm,
    drift_streams: list[Stream],
    drift_hour: int,
) -> Row:
    n = args.streams
    where = {"alert": alert, "window": window, "windows": args.windows}
    alarms = sum(_first(null, rule, i, **where) is not None for i in range(n))
    delays, spent = [], []
    for i, stream in enumerate(drift_streams):
        hit = _first(drift, rule, i, **where)
        if hit is not None:
            delays.append(hit - drift_hour + 1)  # hours of drifted traffic seen when it fired
            offset = stream.start_hour
            spent.append(sum(stream.labels[drift_hour - offset : hit - offset + 1]))
    return Row(
        budget,
        window,
        rule,
        alert,
        false_alarm=alarms / n,
        detected=len(delays) / n,
        delay_h=float(np.median(delays)) if delays else math.nan,
        labels=float(np.median(spent)) if spent else math.nan,
    )


def print_table(rows: list[Row], args: argparse.Namespace, f0s: dict[float, float]) -> None:
    """Markdown table."""
    days_after = args.days - args.drift_day
    print(
        f"\n{args.streams} healthy + {args.streams} drifted streams per budget, {args.days} days "
        f"of hourly checks, {args.records_per_hour} records/h, {args.positive_rate:.0%} positives; "
        f"F1 drop of {args.drop:.2f} at day {args.drift_day} ({days_after} days to detect); "
        f"f_dropped reference: "
        + (f"same window {args.lag_days} d earlier" if args.reference == "lag" else "baseline")
        + f"; answers: {args.answer_rates[0]:g} of predicted negatives', "
        f"{args.answer_rates[1]:g} of predicted positives' requests, mean delay "
        f"{args.mean_delay_hours:g} h."
    )
    for budget, f0 in f0s.items():
        print(f"budget {budget:g} labels/h: F1 before {f0:.3f}, after {f0 - args.drop:.3f}")
    print(
        "\n| labels/h | window | rule | alert | healthy streams alerting | drifts detected "
        "| median delay (h) | median labels spent |"
    )
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        delay = "-" if math.isnan(r.delay_h) else f"{r.delay_h:.0f}"
        labels = "-" if math.isnan(r.labels) else f"{r.labels:.0f}"
        print(
            f"| {r.budget:g} | {r.window} | {r.rule} | {r.alert} | {r.false_alarm:.1%} "
            f"| {r.detected:.0%} | {delay} | {labels} |"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="small run (< 1 min)")
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--drift-day", type=int, default=10)
    p.add_argument("--drop", type=float, default=0.10)
    p.add_argument("--budgets", default="10,40", help="labels per hour, comma separated")
    p.add_argument("--windows", default="24h,7d")
    p.add_argument("--rules", default="horizon,naive", help="horizon, anytime, naive")
    p.add_argument(
        "--reference",
        choices=("baseline", "lag"),
        default="baseline",
        help="f_dropped against a configured baseline (F1 before, se 0.01) or an earlier window",
    )
    p.add_argument("--lag-days", type=int, default=7, help="age of the earlier window (lag)")
    p.add_argument(
        "--answer-rates",
        default="1,1",
        help="share of requests ever answered for predicted negatives,positives (rest skipped)",
    )
    p.add_argument("--mean-delay-hours", type=float, default=0.0, help="mean answer delay")
    p.add_argument("--positive-rate", type=float, default=0.1)
    p.add_argument("--records-per-hour", type=int, default=2000)
    p.add_argument("--pool-size", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=20260101)
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.days, args.drift_day = min(args.streams, 24), 12, 4
        args.budgets, args.windows, args.rules = "40", "24h", "horizon,naive"
    args.budgets = [float(b) for b in str(args.budgets).split(",")]
    args.answer_rates = [float(a) for a in str(args.answer_rates).split(",")]
    if len(args.answer_rates) != 2 or not all(0.0 < a <= 1.0 for a in args.answer_rates):
        p.error("--answer-rates takes two rates in (0, 1]: predicted negatives,positives")
    if args.mean_delay_hours < 0:
        p.error("--mean-delay-hours must be >= 0")
    args.windows = [w for w in str(args.windows).split(",") if w]
    args.rules = [r for r in str(args.rules).split(",") if r]
    unknown = [w for w in args.windows if w not in WINDOW_HOURS] + [
        r for r in args.rules if r not in RULES
    ]
    if unknown:
        p.error(f"unknown window or rule: {', '.join(unknown)}")
    if not 0 < args.drift_day < args.days:
        p.error("--drift-day must be inside --days")
    if args.reference == "lag" and args.lag_days * 24 < max(WINDOW_HOURS[w] for w in args.windows):
        p.error("--lag-days must be at least the longest window (else windows overlap)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every budget and print the table."""
    args = parse_args(argv)
    logging.getLogger("monitor.core.alerts").setLevel(logging.ERROR)  # one line per firing is noise
    rng = np.random.default_rng(args.seed)
    rows: list[Row] = []
    f0s: dict[float, float] = {}
    started = time.monotonic()
    for budget in args.budgets:
        pool = make_pool(args, budget, rng)
        f0s[budget] = pool.f0
        null, _ = run_streams(pool, args, None, rng)
        drift_hour = args.drift_day * 24
        drift, drift_streams = run_streams(pool, args, drift_hour, rng)
        rows += summarise(
            args, budget=budget, null=null, drift=drift, drift_streams=drift_streams,
            drift_hour=drift_hour,
        )  # fmt: skip
        print(f"budget {budget:g}: done after {time.monotonic() - started:.0f} s", file=sys.stderr)
    print_table(rows, args, f0s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
