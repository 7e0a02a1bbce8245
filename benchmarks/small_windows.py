"""Small windows: coverage and mean width of the 95% interval at 20, 30, 50 and 100 labels.

The streaming setting of ``tests/statistical/test_coverage.py`` (small windows): a fresh
calibrated window of 0.35 x labels / positive-rate records per repetition (so the predicted
positives mostly get pi = 1, as in the daemon's 1 h windows), audited with the product's
design for the measure (q* mixed with 10% uniform, ``inclusion_for_budget``); the truth is the
window's realised value. Columns, on the same samples:

- ``shipped``: ``estimate_falpha`` (jackknife-corrected ratio, delta se with c = 2 pseudo
  false negatives while fewer were seen, logit-t interval, Wilson on n_eff at 0 or 1);
- ``c=1``: the same with one pseudo event (``pseudo_events=1``);
- ``c=0``: no pseudo events (the interval that collapsed to a point);
- ``KG``: Korn and Graubard's (1998) Clopper-Pearson interval on the effective counts
  n* = G (1 - G) / se^2 (x (z / t_{n-1})^2), x* = G n*, with the shipped se.

Precision (alpha = 1) is left out: in these windows the predicted positives are a census and its
interval is exact. Every cell is reported; the goal of issue 11 is coverage 0.93-0.97.

    .venv/bin/python benchmarks/small_windows.py              # 1,000 windows per cell
    .venv/bin/python benchmarks/small_windows.py --reps 300   # quicker
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_exact, intrinsic_falpha
from monitor.stats.interval import t_quantile
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

LABELS = (20, 30, 50, 100)
RATES = (0.01, 0.05, 0.2)
ALPHAS = (0.0, 0.5)
SHARE = 0.35
LEVEL = 0.95
Interval = Callable[[LabeledSample, float], tuple[float, float] | None]


def _bounds(est: Estimate) -> tuple[float, float] | None:
    return (est.lower, est.upper) if est.defined else None


def korn_graubard(sample: LabeledSample, alpha: float) -> tuple[float, float] | None:
    """Clopper-Pearson on the effective counts of the shipped estimate (see module docstring)."""
    est = estimate_falpha(sample, alpha, LEVEL)
    if not est.defined:
        return None
    g, se = est.value, est.se
    if not (0.0 < g < 1.0 and se > 0.0):
        return est.lower, est.upper
    z = float(stats.norm.ppf(0.5 + LEVEL / 2))
    n = g * (1.0 - g) / se**2 * (z / t_quantile(LEVEL, est.n_labels)) ** 2
    x = n * g
    tail = (1.0 - LEVEL) / 2.0
    lower = float(stats.beta.ppf(tail, x, n - x + 1.0))
    upper = float(stats.beta.ppf(1.0 - tail, x + 1.0, n - x))
    return (0.0 if math.isnan(lower) else lower), (1.0 if math.isnan(upper) else upper)


VARIANTS: dict[str, Interval] = {
    "shipped": lambda s, a: _bounds(estimate_falpha(s, a, LEVEL)),
    "c=1": lambda s, a: _bounds(estimate_falpha(s, a, LEVEL, pseudo_events=1.0)),
    "c=0": lambda s, a: _bounds(estimate_falpha(s, a, LEVEL, pseudo_events=0.0)),
    "KG": korn_graubard,
}


def run_cell(labels: int, rate: float, alpha: float, reps: int, rng: np.random.Generator) -> str:
    """One line of the table."""
    window = int(SHARE * labels / rate)
    covered = {k: 0 for k in VARIANTS}
    width = {k: 0.0 for k in VARIANTS}
    n_used = 0
    for _ in range(reps):
        score, label = calibrated_pool(window, rate, rng)
        pred = (score >= 0.5).astype(np.int8)
        truth = falpha_exact(pred, label, alpha)
        g = intrinsic_falpha(score, pred, alpha)
        q = defensive_mix(q_star_falpha(score, pred, alpha, 0.0 if math.isnan(g) else g), 0.1)
        pi, _ = inclusion_for_budget(q, labels)
        take = np.flatnonzero(rng.random(window) < pi)
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        got = {k: f(sample, alpha) for k, f in VARIANTS.items()}
        if math.isnan(truth) or any(b is None for b in got.values()):
            continue
        n_used += 1
        for k, b in got.items():
            assert b is not None
            covered[k] += b[0] <= truth <= b[1]
            width[k] += b[1] - b[0]
    cells = "  ".join(f"{covered[k] / n_used:.3f} {width[k] / n_used:.2f}" for k in VARIANTS)
    return f"{labels:6d} {rate:5.0%} {alpha:5.1f} {window:6d} {n_used:5d} | {cells}"


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    head = "  ".join(f"{k:>7s} cov/width" for k in VARIANTS)
    print(f"labels  rate alpha window  used | {head}")
    for i, labels in enumerate(LABELS):
        for j, rate in enumerate(RATES):
            for k, alpha in enumerate(ALPHAS):
                rng = np.random.default_rng([args.seed, i, j, k])
                print(run_cell(labels, rate, alpha, args.reps, rng), flush=True)
    print(f"{args.reps} windows per cell, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
