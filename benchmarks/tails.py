"""Tail check of the alert tests: do they keep the per-look errors 1e-3..1e-5 they are run at?

The alerts (``monitor.stats.alerting``) test each look at a tiny error e (e.g. 0.05 / 720 = 7e-5)
and rely on their error being at most e, far out in the tail where a normal approximation may
fail. This measures those tail probabilities directly, for the two tests the alerts run on an
estimate:

- the **upper bound** (``upper_bound``: ``f_below_floor``, and ``f_dropped`` through
  ``drop_bound``): P(upper bound at e < the model's value) <= e;
- the **calibration check** of ``model_untrustworthy`` (``disagreement``: the label-free F of the
  window's traffic outside the audited F's two-sided interval at level 1 - e, with the label-free
  F's own spread): with calibrated scores a firing is a false alarm, P(fire) <= e; with
  over-confident scores it is a detection, and the share of windows where it fires is printed.

Setting: a window of ``--records`` records drawn from a pool of scored traffic (1% or 10%
positives; calibrated scores, or over-confident ones: reported logits x3). Audits: the product's
design for F1 (q* mixed with 10% uniform, ``inclusion_for_budget`` for ``--budget`` labels per
window); every audited record gets a fresh label y ~ Bernoulli(p(x)), so the target of the upper
bound is the model's (super-population) value, F_alpha = sum(f p) / (alpha sum(f) + (1 - alpha)
sum(p)) over the pool, which is what "the model degraded" is about. The audited records of one
window are drawn exactly: Binomial(records, mean pi) of them, each a pool item with probability
proportional to pi. The rest of the window enters the calibration check only through its sums
of f s, f and s, drawn from their normal law (each such record is a pool item with probability
proportional to 1 - pi; tens of thousands of records, so the central limit theorem is exact
enough even in these tails).

For each case and measure (recall, F1, precision) ``--reps`` windows give, per error e, the
number of upper-bound misses and of calibration-check firings (with R repetitions an error of e
is k ~ Poisson(R e) misses: the table prints the count and R e).

    .venv/bin/python benchmarks/tails.py                 # 100,000 windows per case (minutes)
    .venv/bin/python benchmarks/tails.py --reps 20000    # quicker, resolves 1e-3 and 1e-4 only
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import numpy.typing as npt

from monitor.sim.simulate import calibrated_pool
from monitor.stats.alerting import disagreement, upper_bound
from monitor.stats.falpha import (
    estimate_falpha,
    intrinsic_falpha,
    intrinsic_falpha_from_sums,
    intrinsic_falpha_se_from_sums,
)
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

FloatArray = npt.NDArray[np.float64]
ERRORS = (1e-3, 1e-4, 1e-5)
MEASURES = (("recall", 0.0), ("F1", 0.5), ("precision", 1.0))


def _expit(z: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-z))
    return out


def run_case(
    rate: float, overconfidence: float, args: argparse.Namespace, rng: np.random.Generator
) -> list[str]:
    """Rows of the table for one pool."""
    score, _ = calibrated_pool(args.pool, rate, rng, overconfidence)
    # the true probability: the score's logit without the over-confidence factor
    s = np.clip(score, 1e-15, 1.0 - 1e-15)
    p = _expit(np.log(s / (1.0 - s)) / overconfidence)
    pred = (score >= 0.5).astype(np.int8)
    g = intrinsic_falpha(score, pred, 0.5)
    q = defensive_mix(q_star_falpha(score, pred, 0.5, g), 0.1)
    pi, _ = inclusion_for_budget(q, args.budget * score.size / args.records)
    cum = np.cumsum(pi / pi.sum())
    mean_pi = float(pi.mean())
    truths = {
        name: float(np.dot(pred, p) / (a * pred.sum() + (1.0 - a) * p.sum()))
        for name, a in MEASURES
    }
    # sums (f s, f, s) of the unaudited records: mean and Cholesky factor per record
    feats = np.column_stack([pred * score, pred.astype(np.float64), score])
    rest = (1.0 - pi) / (1.0 - pi).sum()
    mean = rest @ feats
    chol = np.linalg.cholesky((feats - mean).T @ ((feats - mean) * rest[:, None]))
    misses = {(name, e, side): 0 for name, _ in MEASURES for e in ERRORS for side in "uc"}
    labels = 0
    for _ in range(args.reps):
        m = int(rng.binomial(args.records, mean_pi))
        idx = np.minimum(np.searchsorted(cum, rng.random(m)), cum.size - 1)
        y = (rng.random(m) < p[idx]).astype(np.int8)
        sample = LabeledSample.poisson(score[idx], pred[idx], y, pi[idx])
        n_rest = args.records - m
        sums = (
            feats[idx].sum(axis=0)
            + n_rest * mean
            + math.sqrt(n_rest) * (chol @ rng.standard_normal(3))
        )
        labels += m
        for name, a in MEASURES:
            est = estimate_falpha(sample, a, 0.95)
            if not est.defined:
                continue
            g = intrinsic_falpha_from_sums(sums[0], sums[1], sums[2], a)
            g_se = intrinsic_falpha_se_from_sums(sums[0], sums[1], sums[2], args.records, a)
            for e in ERRORS:
                misses[(name, e, "u")] += upper_bound(est, e) < truths[name]
                misses[(name, e, "c")] += disagreement(est, g, e, g_se)[0]
    rows = []
    for name, _ in MEASURES:
        cells = " | ".join(
            f"{misses[(name, e, 'u')]:4d} {misses[(name, e, 'c')]:6d} ({args.reps * e:6.1f})"
            for e in ERRORS
        )
        rows.append(
            f"{rate:5.0%} x{overconfidence:<3g} {name:9s} {truths[name]:.3f} "
            f"{labels / args.reps:6.0f} | {cells}"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=100_000)
    parser.add_argument("--budget", type=float, default=200.0, help="labels per window")
    parser.add_argument("--records", type=int, default=72_000, help="records per window")
    parser.add_argument("--pool", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    head = " | ".join(f"e={e:.0e}: up  calib. (R e)" for e in ERRORS)
    print(f" rate  conf measure   truth labels | {head}")
    for i, rate in enumerate((0.01, 0.1)):
        for j, conf in enumerate((1.0, 3.0)):
            rng = np.random.default_rng([args.seed, i, j])
            for row in run_case(rate, conf, args, rng):
                print(row, flush=True)
    print(f"{args.reps} windows per case, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
