"""Coverage and bias of the F_alpha interval on simulated calibrated pools (DESIGN.md checks).

For each positive rate (1%, 5%, 20%, 50%) one calibrated pool of POOL_SIZE items is simulated
(``monitor.simulate.calibrated_pool``; its true F_alpha is ``falpha_exact`` on the pool). For
each alpha in {0, 0.5, 1} and budget in {100, 400} the audit design is the product's:
``pi = inclusion_for_budget(defensive_mix(q_star_falpha(s, f, alpha, G_theta), LAMBDA), budget)``
with G_theta the pool's intrinsic F. REPS independent Poisson samples are drawn and the 95%
interval of ``estimate_falpha`` is checked against the pool's true value.

Pool size: 200,000, so that even at 1% positives the predicted positives (about 570) exceed
what a 400-label precision design takes with certainty; with 20,000 items the 1%-precision
design is a census and its coverage a trivial 100%.

Poisson samples are drawn exactly and cheaply by thinning: items are grouped by pi into
power-of-two bands; per band a Binomial(size, max pi) number of candidates is drawn without
replacement and each is kept with probability pi / max pi.

The shipped estimate is the jackknife bias-corrected ratio with the interval around it
(``monitor.stats.interval``). Each case also evaluates the plain ratio (seed 000 Eq. 4,
``bias_correction=False``) on the same samples; the table prints both ("before" columns).

Asserted, as issue 2 requires:
* coverage of the 95% interval in [0.93, 0.97] with 400 labels in every case and with 100
  labels in every case with >= 5% positives;
* |bias| < 0.1 mean se in every case (bias = mean estimate - true pool value). The plain ratio
  fails this (its O(1/n) bias, seed 000 Lemma 1: +0.44 se for recall at 1% positives with 100
  labels, +0.20 se with 400, +0.16 se at 5% with 100) because the false negatives are a few
  low-score items of large weight and the estimated denominator is right-skewed; the jackknife
  correction brings every case under 0.06 se (measured with 4,000-10,000 repetitions per case
  while choosing it). The Monte Carlo error of a mean is about 0.022-0.03 se here.

Documented looser bound (issue 2: "report the 1% cases at 100 labels as measured"): 1% positives
with 100 labels holds only about 16-22 positive labels; its coverage is printed and asserted
within [0.90, 0.99] (measured 0.941-0.977 here, 0.944-0.970 with 4,000 repetitions: recall
over-covers slightly because the delta se of a ratio with ~5 heavy false negatives is noisy).

Measured with this seed (36 s on 2 cores; "before" = plain ratio on the same samples):
coverage 0.941-0.966 in the required cases (before 0.933-0.967), |bias| <= 0.060 se in every
case (before up to +0.469 se); the over-confident case covers 0.885 (before 0.889), its sd
0.072 against the plain ratio's 0.067: with heavy-tailed weights the correction costs variance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from monitor.simulate import calibrated_pool
from monitor.stats.falpha import estimate_falpha, falpha_exact, intrinsic_falpha
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

pytestmark = pytest.mark.slow

SEED = 20101206
POOL_SIZE = 200_000
REPS = 2000
LAMBDA = 0.1  # the shipped default of estimation.defensive
LEVEL = 0.95
RATES = (0.01, 0.05, 0.2, 0.5)
ALPHAS = (0.0, 0.5, 1.0)
BUDGETS = (100, 400)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Draws:
    """Per-repetition results of one case (defined estimates only)."""

    truth: float
    values: FloatArray
    ses: FloatArray
    covered: FloatArray
    widths: FloatArray
    plain_values: FloatArray
    plain_covered: FloatArray
    undefined: int


@dataclass(frozen=True)
class CaseResult:
    rate: float
    alpha: float
    budget: int
    truth: float
    coverage: float
    bias: float
    coverage_plain: float
    bias_plain: float
    mean_se: float
    sd: float
    mean_width: float
    mean_labels: float
    undefined: int


def poisson_sampler(pi: FloatArray, rng: np.random.Generator) -> Callable[[], IntArray]:
    """Exact Poisson sampling (item i independently with probability pi_i) by thinning."""
    certain = np.flatnonzero(pi >= 1.0)
    uncertain = np.flatnonzero((pi > 0.0) & (pi < 1.0))
    band = np.floor(-np.log2(pi[uncertain])).astype(np.int64)
    bands = []
    for b in np.unique(band):
        idx = uncertain[band == b]
        bands.append((idx, float(pi[idx].max())))

    def draw() -> IntArray:
        parts = [certain]
        for idx, bound in bands:
            count = int(rng.binomial(idx.size, bound))
            if count:
                cand = idx[rng.choice(idx.size, count, replace=False)]
                parts.append(cand[rng.random(count) * bound < pi[cand]])
        return np.concatenate(parts)

    return draw


def run_case(
    score: FloatArray,
    pred: npt.NDArray[np.int8],
    label: npt.NDArray[np.int8],
    *,
    alpha: float,
    budget: int,
    rng: np.random.Generator,
    reps: int = REPS,
) -> Draws:
    truth = falpha_exact(pred, label, alpha)
    g = intrinsic_falpha(score, pred, alpha)
    pi, _ = inclusion_for_budget(
        defensive_mix(q_star_falpha(score, pred, alpha, g), LAMBDA), budget
    )
    draw = poisson_sampler(pi, rng)
    rows: list[tuple[float, float, float, float, float, float]] = []
    undefined = 0
    for _ in range(reps):
        take = draw()
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        est = estimate_falpha(sample, alpha, LEVEL)
        if not est.defined:
            undefined += 1
            continue
        plain = estimate_falpha(sample, alpha, LEVEL, bias_correction=False)
        rows.append(
            (
                est.value,
                est.se,
                float(est.lower <= truth <= est.upper),
                est.upper - est.lower,
                plain.value,
                float(plain.lower <= truth <= plain.upper),
            )
        )
    cols = np.array(rows, dtype=np.float64).reshape(-1, 6).T
    return Draws(truth, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], undefined)


@pytest.fixture(scope="module")
def results() -> dict[tuple[float, float, int], CaseResult]:
    out: dict[tuple[float, float, int], CaseResult] = {}
    started = time.perf_counter()
    for i, rate in enumerate(RATES):
        score, label = calibrated_pool(POOL_SIZE, rate, np.random.default_rng([SEED, i]))
        pred = (score >= 0.5).astype(np.int8)
        for j, alpha in enumerate(ALPHAS):
            for k, budget in enumerate(BUDGETS):
                rng = np.random.default_rng([SEED, i, j, k])
                d = run_case(score, pred, label, alpha=alpha, budget=budget, rng=rng)
                out[(rate, alpha, budget)] = CaseResult(
                    rate,
                    alpha,
                    budget,
                    d.truth,
                    float(np.mean(d.covered)),
                    float(np.mean(d.values)) - d.truth,
                    float(np.mean(d.plain_covered)),
                    float(np.mean(d.plain_values)) - d.truth,
                    float(np.mean(d.ses)),
                    float(np.std(d.values)),
                    float(np.mean(d.widths)),
                    float(budget),
                    d.undefined,
                )
    elapsed = time.perf_counter() - started
    print(
        f"\ncoverage of the {LEVEL:.0%} interval, {REPS} Poisson samples per case, "
        f"pool {POOL_SIZE:,}, lambda {LAMBDA}, {elapsed:.1f} s"
    )
    print(
        " rate  alpha budget  truth  cover  bias/se | before: cover  bias/se"
        " | mean_se     sd   width  undef"
    )
    for r in out.values():
        print(
            f"{r.rate:5.0%}  {r.alpha:5.1f} {r.budget:6d}  {r.truth:.3f}  {r.coverage:.3f}"
            f"  {r.bias / r.mean_se:+7.3f} |         {r.coverage_plain:.3f}"
            f"  {r.bias_plain / r.mean_se:+7.3f} |  {r.mean_se:7.4f}  {r.sd:.4f}"
            f"  {r.mean_width:.3f}  {r.undefined:5d}"
        )
    return out


CASES = [(r, a, b) for r in RATES for a in ALPHAS for b in BUDGETS]


def _strict_coverage(rate: float, budget: int) -> bool:
    return budget >= 400 or rate >= 0.05


@pytest.mark.parametrize(("rate", "alpha", "budget"), CASES)
def test_coverage(
    results: dict[tuple[float, float, int], CaseResult], rate: float, alpha: float, budget: int
) -> None:
    r = results[(rate, alpha, budget)]
    assert r.undefined == 0
    if _strict_coverage(rate, budget):
        assert 0.93 <= r.coverage <= 0.97, r
    else:  # 1% positives with 100 labels: documented looser bound, printed in the table
        assert 0.90 <= r.coverage <= 0.99, r


@pytest.mark.parametrize(("rate", "alpha", "budget"), CASES)
def test_bias(
    results: dict[tuple[float, float, int], CaseResult], rate: float, alpha: float, budget: int
) -> None:
    """Issue 2: bias below a tenth of the standard error, in every case."""
    r = results[(rate, alpha, budget)]
    # Monte Carlo error of the mean is sd / sqrt(REPS), about 0.022-0.03 standard errors
    assert abs(r.bias) < 0.1 * r.mean_se, r


def test_correction_removes_the_ratio_bias_where_it_matters(
    results: dict[tuple[float, float, int], CaseResult],
) -> None:
    """The plain ratio's bias is real (> 0.3 se for recall at 1%); the correction removes it."""
    worst = results[(0.01, 0.0, 100)]
    assert worst.bias_plain > 0.3 * worst.mean_se
    at_400 = results[(0.01, 0.0, 400)]
    assert at_400.bias_plain > 0.1 * at_400.mean_se
    for r in results.values():
        assert abs(r.bias) <= abs(r.bias_plain) + 0.05 * r.mean_se, r


def test_standard_error_matches_spread(results: dict[tuple[float, float, int], CaseResult]) -> None:
    for r in results.values():
        if r.budget == 400:
            assert 0.8 < r.mean_se / r.sd < 1.25, r


def test_with_replacement_design_covers() -> None:
    """Algorithm 1 of seed 000 (draws with replacement, fpc = 1) with the same interval."""
    rng = np.random.default_rng([SEED, 99])
    score, label = calibrated_pool(POOL_SIZE, 0.05, rng)
    pred = (score >= 0.5).astype(np.int8)
    alpha = 0.5
    truth = falpha_exact(pred, label, alpha)
    q = defensive_mix(
        q_star_falpha(score, pred, alpha, intrinsic_falpha(score, pred, alpha)), LAMBDA
    )
    p = q / q.sum()
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    covered = []
    for _ in range(1000):
        idx = np.searchsorted(cdf, rng.random(400), side="right")
        est = estimate_falpha(
            LabeledSample.with_replacement(score[idx], pred[idx], label[idx], p[idx]), alpha, LEVEL
        )
        covered.append(est.lower <= truth <= est.upper)
    coverage = float(np.mean(covered))
    print(f"\nwith replacement, 5% positives, F1, 400 draws: coverage {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97


def test_overconfident_model_is_the_known_hard_case() -> None:
    """Logits x3 (DESIGN.md): measured and reported, not hidden; only a floor is asserted."""
    rng = np.random.default_rng([SEED, 98])
    score, label = calibrated_pool(POOL_SIZE, 0.05, rng, overconfidence=3.0)
    pred = (score >= 0.5).astype(np.int8)
    d = run_case(score, pred, label, alpha=0.5, budget=400, rng=rng, reps=1000)
    coverage = float(np.mean(d.covered))
    print(
        f"\nover-confident scores (logits x3), 5% positives, F1, 400 labels: coverage "
        f"{coverage:.3f} (plain ratio {np.mean(d.plain_covered):.3f}), bias "
        f"{np.mean(d.values) - d.truth:+.4f} (plain {np.mean(d.plain_values) - d.truth:+.4f}), "
        f"mean se {np.mean(d.ses):.4f}, sd {np.std(d.values):.4f}, undefined {d.undefined}"
    )
    assert coverage > 0.6
