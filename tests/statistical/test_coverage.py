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

Known limitations, measured and asserted with documented looser bounds (see REPORT below):
* 1% positives at 100 labels: few weighted labels (about 15-25 positives), the coverage is
  printed and only required to be within [0.90, 0.99];
* the ratio estimator's O(1/n) bias (seed 000, Lemma 1) exceeds a tenth of the standard error
  for recall-like measures (alpha < 1) at <= 5% positives: the false negatives live among many
  low-score items with large weights, so the estimated denominator is right-skewed. There the
  bias is asserted below half the standard error, and the bias of the second-order corrected
  ratio ``G - interval.ratio_bias(...)`` is printed for comparison (column bc-bias/se).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from monitor.simulate import calibrated_pool
from monitor.stats.falpha import (
    estimate_falpha,
    falpha_exact,
    falpha_gain,
    falpha_weight,
    intrinsic_falpha,
)
from monitor.stats.interval import ratio_bias
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
class CaseResult:
    rate: float
    alpha: float
    budget: int
    truth: float
    coverage: float
    bias: float
    bias_corrected: float
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
) -> tuple[float, list[float], list[float], list[float], list[float], list[float], int]:
    truth = falpha_exact(pred, label, alpha)
    g = intrinsic_falpha(score, pred, alpha)
    pi, _ = inclusion_for_budget(
        defensive_mix(q_star_falpha(score, pred, alpha, g), LAMBDA), budget
    )
    draw = poisson_sampler(pi, rng)
    values: list[float] = []
    corrected: list[float] = []
    ses: list[float] = []
    covered: list[float] = []
    widths: list[float] = []
    undefined = 0
    for _ in range(reps):
        take = draw()
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        est = estimate_falpha(sample, alpha, LEVEL)
        if not est.defined:
            undefined += 1
            continue
        bias = ratio_bias(
            falpha_gain(sample.pred, sample.label),
            falpha_weight(sample.pred, sample.label, alpha),
            sample.v,
            sample.fpc,
        )
        corrected.append(est.value - bias)
        values.append(est.value)
        ses.append(est.se)
        covered.append(float(est.lower <= truth <= est.upper))
        widths.append(est.upper - est.lower)
    return truth, values, corrected, ses, covered, widths, undefined


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
                truth, values, corrected, ses, covered, widths, undefined = run_case(
                    score, pred, label, alpha=alpha, budget=budget, rng=rng
                )
                out[(rate, alpha, budget)] = CaseResult(
                    rate,
                    alpha,
                    budget,
                    truth,
                    float(np.mean(covered)),
                    float(np.mean(values)) - truth,
                    float(np.mean(corrected)) - truth,
                    float(np.mean(ses)),
                    float(np.std(values)),
                    float(np.mean(widths)),
                    float(budget),
                    undefined,
                )
    elapsed = time.perf_counter() - started
    print(
        f"\ncoverage of the {LEVEL:.0%} interval, {REPS} Poisson samples per case, "
        f"pool {POOL_SIZE:,}, lambda {LAMBDA}, {elapsed:.1f} s"
    )
    print(" rate  alpha budget  truth  cover   bias/se  bc-bias/se  mean_se     sd   width  undef")
    for r in out.values():
        print(
            f"{r.rate:5.0%}  {r.alpha:5.1f} {r.budget:6d}  {r.truth:.3f}  {r.coverage:.3f}"
            f"  {r.bias / r.mean_se:+8.3f}  {r.bias_corrected / r.mean_se:+10.3f}"
            f"  {r.mean_se:7.4f}  {r.sd:.4f}  {r.mean_width:.3f}  {r.undefined:5d}"
        )
    return out


CASES = [(r, a, b) for r in RATES for a in ALPHAS for b in BUDGETS]


def _strict_coverage(rate: float, budget: int) -> bool:
    return budget >= 400 or rate >= 0.05


def _strict_bias(rate: float, alpha: float) -> bool:
    return alpha == 1.0 or rate >= 0.2


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
    r = results[(rate, alpha, budget)]
    # Monte Carlo error of the mean is sd / sqrt(REPS), about 0.02 standard errors
    if _strict_bias(rate, alpha):
        assert abs(r.bias) < 0.1 * r.mean_se, r
    else:  # recall-like measures at <= 5% positives: the ratio's O(1/n) bias, documented
        assert abs(r.bias) < 0.5 * r.mean_se, r


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
    truth, values, _, ses, covered, _, undefined = run_case(
        score, pred, label, alpha=0.5, budget=400, rng=rng, reps=1000
    )
    coverage = float(np.mean(covered))
    print(
        f"\nover-confident scores (logits x3), 5% positives, F1, 400 labels: coverage "
        f"{coverage:.3f}, bias {np.mean(values) - truth:+.4f}, mean se {np.mean(ses):.4f}, "
        f"sd {np.std(values):.4f}, undefined {undefined}"
    )
    assert coverage > 0.6
