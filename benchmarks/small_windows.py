"""Small windows: coverage and mean width of the 95% interval at 20, 30, 50 and 100 labels.

The streaming setting of ``tests/statistical/test_coverage.py`` (small windows): a fresh
calibrated window of 0.35 x labels / positive-rate records per repetition (so the predicted
positives mostly get pi = 1, as in the daemon's 1 h windows), audited with the product's
design for the measure (q* mixed with 10% uniform, ``inclusion_for_budget``); the truth is the
window's realised value. Columns, on the same samples:

- ``shipped``: the ratio's own interval, ``estimate_falpha`` (jackknife-corrected ratio, delta
  se with c = 2 pseudo false negatives while fewer were seen, logit-t interval, Wilson on n_eff
  at 0 or 1), the product's interval until the score-type floor below;
- ``c=1``: the same with one pseudo event (``pseudo_events=1``);
- ``score c``: the same with a pseudo-event count from the scores: the false negatives expected
  among the sampled predicted negatives, ``sum s_i`` over those with pi < 1 (= E[k] under the
  design if the scores are calibrated), clipped to [1/2, 2];
- four intervals on the effective counts of the shipped estimate, n* = G (1 - G) / se^2 and
  x* = G n* (n_eff when G is 0 or 1; Korn and Graubard 1998), with the shipped se:
  ``KG``: Clopper-Pearson on the degrees-of-freedom adjusted n* (z / t_{n-1})^2;
  ``mid-p``: the mid-p Clopper-Pearson interval on the same counts (P(X > x) + P(X = x) / 2 =
  2.5%, with the incomplete beta function for non-integer counts);
  ``Jeffreys``: the 2.5% and 97.5% quantiles of Beta(x* + 1/2, n* - x* + 1/2) on the same counts
  (0 at x* = 0, 1 at x* = n*; Brown, Cai and DasGupta 2001);
  ``Wilson-t``: Wilson's score interval on n* with the t_{n-1} quantile (the shipped fallback
  at 0 or 1, used everywhere);
- ``score-type``: the ratio's test inverted with the false negatives' variance taken at the
  count each tested value implies (``monitor.stats.score_interval``);
- ``intersect``: the intersection of ``shipped`` and ``score-type`` (each an honest 95% interval,
  so together they exclude the truth at most as often as both do apart);
- ``daemon``: what the daemon and ``monitor estimate`` export: ``measure_all``, the hull of the
  shipped interval and the score-type bounds with the pseudo events as a floor (credited only
  while fewer than two false negatives were sampled), and where the window's labels reject its
  scores (the label-free F of the window's scores outside the interval at 1%) the score-type
  bounds with the pseudo events always.

Precision (alpha = 1) is left out: in these windows the predicted positives are a census and its
interval is exact. Every cell is reported; the goal of issue 11 is coverage 0.93-0.97.
``--scenario overconfident`` reports logits x3 (labels from the calibrated score, reported
score over-confident); ``--scenario drift`` adds positives at the window's positive rate
uniformly over the records, so the scores miss them (a model that degraded). ``--defensive``
sets the design's uniform share (the product's default, 0.1).

    .venv/bin/python benchmarks/small_windows.py              # 1,000 windows per cell
    .venv/bin/python benchmarks/small_windows.py --reps 300   # quicker
    .venv/bin/python benchmarks/small_windows.py --reps 300 --scenario overconfident
    .venv/bin/python benchmarks/small_windows.py --reps 300 --scenario drift --defensive 0.5
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from scipy import optimize, special

from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import (
    estimate_falpha,
    falpha_exact,
    intrinsic_falpha,
    intrinsic_falpha_se,
)
from monitor.stats.interval import t_quantile, wilson_interval
from monitor.stats.measures import measure_all
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import Widening, score_type_bounds, scores_disagree
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

LABELS = (20, 30, 50, 100)
RATES = (0.01, 0.05, 0.2)
ALPHAS = (0.0, 0.5)
SHARE = 0.35
LEVEL = 0.95
TAIL = (1.0 - LEVEL) / 2.0
Z = float(special.ndtri(1.0 - TAIL))
SCENARIOS = ("calibrated", "overconfident", "drift")
Bounds = tuple[float, float]
Interval = Callable[[LabeledSample, float], Bounds | None]
CountInterval = Callable[[float, float], Bounds]


def _bounds(est: Estimate) -> Bounds | None:
    return (est.lower, est.upper) if est.defined else None


def effective_counts(est: Estimate, *, df: bool) -> tuple[float, float]:
    """``(x*, n*)``: n* = G (1 - G) / se^2 (n_eff at G = 0 or 1), times (z / t)^2 if ``df``."""
    g, se = est.value, est.se
    n = g * (1.0 - g) / se**2 if 0.0 < g < 1.0 and se > 0.0 else est.n_eff
    if df:
        n *= (Z / t_quantile(LEVEL, est.n_labels)) ** 2
    return g * n, n


def clopper_pearson(x: float, n: float) -> Bounds:
    """Clopper-Pearson on (possibly non-integer) counts: beta quantiles."""
    lower = float(special.betaincinv(x, n - x + 1.0, TAIL)) if x > 0.0 else 0.0
    upper = float(special.betaincinv(x + 1.0, n - x, 1.0 - TAIL)) if x < n else 1.0
    return lower, upper


def jeffreys(x: float, n: float) -> Bounds:
    """Quantiles of Beta(x + 1/2, n - x + 1/2); 0 at x = 0 and 1 at x = n."""
    lower = float(special.betaincinv(x + 0.5, n - x + 0.5, TAIL)) if x > 0.0 else 0.0
    upper = float(special.betaincinv(x + 0.5, n - x + 0.5, 1.0 - TAIL)) if x < n else 1.0
    return lower, upper


def mid_p(x: float, n: float) -> Bounds:
    """Mid-p Clopper-Pearson: P(X > x) + P(X = x) / 2 = TAIL on each side (incomplete beta)."""

    def upper_tail(p: float) -> float:  # P(X >= x) + P(X >= x + 1), halved; increasing in p
        at_least = special.betainc(x, n - x + 1.0, p) if x > 0.0 else 1.0
        above = special.betainc(x + 1.0, n - x, p) if x < n else 0.0
        return float(at_least + above) / 2.0

    lower = optimize.brentq(lambda p: upper_tail(p) - TAIL, 0.0, 1.0) if x > 0.0 else 0.0
    upper = optimize.brentq(lambda p: upper_tail(p) - 1.0 + TAIL, 0.0, 1.0) if x < n else 1.0
    return float(lower), float(upper)


def on_counts(count_interval: CountInterval, *, df: bool = True) -> Interval:
    """An interval of the effective counts of the shipped estimate (see module docstring)."""

    def interval(sample: LabeledSample, alpha: float) -> Bounds | None:
        est = estimate_falpha(sample, alpha, LEVEL)
        if not est.defined:
            return None
        x, n = effective_counts(est, df=df)
        if math.isinf(n):
            return est.value, est.value
        if not n > 0.0:
            return 0.0, 1.0
        lower, upper = count_interval(min(x, n), n)
        return min(lower, est.value), max(upper, est.value)

    return interval


def wilson_counts(sample: LabeledSample, alpha: float) -> Bounds | None:
    """Wilson's score interval on n* (no df adjustment) with the t_{n-1} quantile."""
    est = estimate_falpha(sample, alpha, LEVEL)
    if not est.defined:
        return None
    _, n = effective_counts(est, df=False)
    return wilson_interval(est.value, n, t_quantile(LEVEL, est.n_labels))


def score_pseudo_events(sample: LabeledSample, alpha: float) -> Bounds | None:
    """The shipped interval with c = sum of the scores of the sampled open predicted negatives."""
    open_ = (sample.pred == 0) & (sample.fpc > 0.0)
    c = float(np.clip(sample.score[open_].sum(), 0.5, 2.0))
    return _bounds(estimate_falpha(sample, alpha, LEVEL, pseudo_events=c))


def score_type(sample: LabeledSample, alpha: float) -> Bounds | None:
    """Test inversion with the false negatives' variance at the tested value (module docstring)."""
    est = estimate_falpha(sample, alpha, LEVEL)
    return score_type_bounds(sample, alpha, est) if est.defined else None


VARIANTS: dict[str, Interval] = {
    "shipped": lambda s, a: _bounds(estimate_falpha(s, a, LEVEL)),
    "c=1": lambda s, a: _bounds(estimate_falpha(s, a, LEVEL, pseudo_events=1.0)),
    "score c": score_pseudo_events,
    "KG": on_counts(clopper_pearson),
    "mid-p": on_counts(mid_p),
    "Jeffreys": on_counts(jeffreys),
    "Wilson-t": wilson_counts,
    "score-type": score_type,
}


COLUMNS = [*VARIANTS, "intersect", "daemon"]  # the table's, in order


def intersect(a: Bounds | None, b: Bounds | None) -> Bounds | None:
    """The bounds both intervals hold (empty, lower above upper, when they are disjoint)."""
    return None if a is None or b is None else (max(a[0], b[0]), min(a[1], b[1]))


def daemon(
    sample: LabeledSample, alpha: float, score: np.ndarray, pred: np.ndarray
) -> Bounds | None:
    """The interval the daemon exports: ``measure_all``'s, with the score-type bounds where the
    window's labels reject its scores (``monitor.stats.score_interval``)."""
    m = measure_all(sample, alpha, LEVEL)
    est, recall = m.f, m.recall
    if not est.defined:
        return None
    g, g_se = intrinsic_falpha(score, pred, alpha), intrinsic_falpha_se(score, pred, alpha)
    if not scores_disagree(est, g, g_se):
        return _bounds(est)
    return _bounds(Widening.of(sample, alpha, est, recall).apply(est, recall)[0])


def window_pool(
    window: int, rate: float, scenario: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and labels of one window in the given scenario (module docstring)."""
    score, label = calibrated_pool(
        window, rate, rng, overconfidence=3.0 if scenario == "overconfident" else 1.0
    )
    if scenario == "drift":
        label = (label.astype(bool) | (rng.random(window) < rate)).astype(np.int8)
    return score, label


def run_cell(
    labels: int,
    rate: float,
    alpha: float,
    reps: int,
    rng: np.random.Generator,
    *,
    scenario: str,
    defensive: float = 0.1,
) -> str:
    """One line of the table."""
    window = int(SHARE * labels / rate)
    covered = dict.fromkeys(COLUMNS, 0)
    width = dict.fromkeys(COLUMNS, 0.0)
    n_used = 0
    for _ in range(reps):
        score, label = window_pool(window, rate, scenario, rng)
        pred = (score >= 0.5).astype(np.int8)
        truth = falpha_exact(pred, label, alpha)
        g = intrinsic_falpha(score, pred, alpha)
        q = q_star_falpha(score, pred, alpha, 0.0 if math.isnan(g) else g)
        q = defensive_mix(q, defensive)
        pi, _ = inclusion_for_budget(q, labels)
        take = np.flatnonzero(rng.random(window) < pi)
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        got = {k: f(sample, alpha) for k, f in VARIANTS.items()}
        got["intersect"] = intersect(got["shipped"], got["score-type"])
        got["daemon"] = daemon(sample, alpha, score, pred)
        if math.isnan(truth) or any(b is None for b in got.values()):
            continue
        n_used += 1
        for k, b in got.items():
            assert b is not None
            covered[k] += b[0] <= truth <= b[1]
            width[k] += max(b[1] - b[0], 0.0)
    cells = "  ".join(f"{covered[k] / n_used:.3f} {width[k] / n_used:.2f}" for k in COLUMNS)
    return f"{labels:6d} {rate:5.0%} {alpha:5.1f} {window:6d} {n_used:5d} | {cells}"


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--scenario", choices=SCENARIOS, default="calibrated")
    parser.add_argument("--defensive", type=float, default=0.1, help="uniform share (0.1)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    head = "  ".join(f"{k:>10s}" for k in COLUMNS)
    print(f"labels  rate alpha window  used | {head}")
    for i, labels in enumerate(LABELS):
        for j, rate in enumerate(RATES):
            for k, alpha in enumerate(ALPHAS):
                rng = np.random.default_rng([args.seed, i, j, k])
                row = run_cell(
                    labels,
                    rate,
                    alpha,
                    args.reps,
                    rng,
                    scenario=args.scenario,
                    defensive=args.defensive,
                )
                print(row, flush=True)
    print(
        f"{args.scenario}, defensive share {args.defensive}: {args.reps} windows per cell, "
        f"coverage and mean width per column, {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
