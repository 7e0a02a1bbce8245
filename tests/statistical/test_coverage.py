"""Coverage and bias of the F_alpha interval on simulated calibrated pools (DESIGN.md checks).

For each positive rate (1%, 5%, 20%, 50%) one calibrated pool of POOL_SIZE items is simulated
(``monitor.sim.simulate.calibrated_pool``; its true F_alpha is ``falpha_exact`` on the pool). For
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
within [0.90, 0.99] (measured 0.954-0.987 here; 0.941-0.977 without the unseen-event term of
``monitor.stats.interval``, which adds pseudo false negatives to the variance while fewer than
two were sampled: recall over-covers because the delta se of a ratio with ~5 heavy false
negatives is noisy, and the floor widens the samples with 0-1 of them).

Measured with this seed (77 s for the required cells on 2 shared cores; "plain" = plain ratio,
"no-unseen" = without the unseen-event term, on the same samples): coverage 0.941-0.966 in the
required cases (plain 0.933-0.967; no-unseen identical except 1%/100 labels), |bias| <= 0.060
se in every case (plain up to +0.469 se), se in units of the delta se without the unseen-event
term; the over-confident case covers 0.885 (before 0.889), its sd 0.072 against the plain
ratio's 0.067: with heavy-tailed weights the correction costs variance.

Small windows (the streaming bug: F1 0.889 [0.889, 0.889] against a true 0.800 on a 1-hour
window with ~30 labels): a fresh calibrated window of 0.35 budget / rate records per repetition
(so that predicted positives mostly get pi = 1), 20/30/50 labels, 1/3/5% positives, recall and
F1, the product's design, 1,000 windows per case (72 s). Measured: coverage 0.938-0.999 and no
point interval; without the unseen-event term 0.698-0.962 with up to 262 of 1,000 intervals
collapsed to a point. Conservative at 20-30 labels (0.98-0.999, wide intervals): only a lower
bound on coverage is asserted there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from monitor.sim.simulate import calibrated_pool
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
    seen_covered: FloatArray
    seen_ses: FloatArray
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
    coverage_seen: float
    mean_se: float
    mean_se_seen: float
    sd: float
    mean_width: float
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
    rows: list[tuple[float, float, float, float, float, float, float, float]] = []
    undefined = 0
    for _ in range(reps):
        take = draw()
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        est = estimate_falpha(sample, alpha, LEVEL)
        if not est.defined:
            undefined += 1
            continue
        plain = estimate_falpha(sample, alpha, LEVEL, bias_correction=False)
        seen = estimate_falpha(sample, alpha, LEVEL, pseudo_events=0.0)
        rows.append(
            (
                est.value,
                est.se,
                float(est.lower <= truth <= est.upper),
                est.upper - est.lower,
                plain.value,
                float(plain.lower <= truth <= plain.upper),
                float(seen.lower <= truth <= seen.upper),
                seen.se,
            )
        )
    cols = np.array(rows, dtype=np.float64).reshape(-1, 8).T
    values, ses, covered, widths, plain_values, plain_covered, seen_covered, seen_ses = cols
    return Draws(
        truth,
        values,
        ses,
        covered,
        widths,
        plain_values,
        plain_covered,
        seen_covered,
        seen_ses,
        undefined,
    )


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
                    float(np.mean(d.seen_covered)),
                    float(np.mean(d.ses)),
                    float(np.mean(d.seen_ses)),
                    float(np.std(d.values)),
                    float(np.mean(d.widths)),
                    d.undefined,
                )
    elapsed = time.perf_counter() - started
    print(
        f"\ncoverage of the {LEVEL:.0%} interval, {REPS} Poisson samples per case, "
        f"pool {POOL_SIZE:,}, lambda {LAMBDA}, {elapsed:.1f} s"
    )
    print(
        " rate  alpha budget  truth  cover  bias/se | plain: cover  bias/se"
        " | no-unseen: cover | mean_se (no-unseen)     sd   width  undef"
    )
    for r in out.values():
        print(
            f"{r.rate:5.0%}  {r.alpha:5.1f} {r.budget:6d}  {r.truth:.3f}  {r.coverage:.3f}"
            f"  {r.bias / r.mean_se_seen:+7.3f} |        {r.coverage_plain:.3f}"
            f"  {r.bias_plain / r.mean_se_seen:+7.3f} |            {r.coverage_seen:.3f}"
            f" |  {r.mean_se:7.4f} ({r.mean_se_seen:.4f})  {r.sd:.4f}"
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
    # Monte Carlo error of the mean is sd / sqrt(REPS), about 0.022-0.03 standard errors. The unit
    # is the delta se without the unseen-event term: that term inflates the mean se by rare huge
    # values (1% positives, 100 labels) and would loosen this check; the estimate is the same.
    assert abs(r.bias) < 0.1 * r.mean_se_seen, r


def test_correction_removes_the_ratio_bias_where_it_matters(
    results: dict[tuple[float, float, int], CaseResult],
) -> None:
    """The plain ratio's bias is real (> 0.3 se for recall at 1%); the correction removes it."""
    worst = results[(0.01, 0.0, 100)]
    assert worst.bias_plain > 0.3 * worst.mean_se_seen
    at_400 = results[(0.01, 0.0, 400)]
    assert at_400.bias_plain > 0.1 * at_400.mean_se_seen
    for r in results.values():
        assert abs(r.bias) <= abs(r.bias_plain) + 0.05 * r.mean_se_seen, r


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


# --- Small windows (issue: a collapsed interval on a streaming window) -------------------------

SMALL_RATES = (0.01, 0.03, 0.05)
SMALL_ALPHAS = (0.0, 0.5)
SMALL_BUDGETS = (20, 30, 50)
SMALL_REPS = 1000
SMALL_WINDOW_SHARE = 0.35  # window size = 0.35 budget / rate records


@dataclass(frozen=True)
class SmallResult:
    rate: float
    alpha: float
    budget: int
    window: int
    coverage: float
    coverage_seen: float
    width: float
    width_seen: float
    points: int
    points_seen: int
    share_pi_one: float
    share_no_fn: float
    undefined: int


def run_small_case(rate: float, alpha: float, budget: int, rng: np.random.Generator) -> SmallResult:
    """A fresh streaming-like window per repetition, audited with the product's design."""
    window = int(SMALL_WINDOW_SHARE * budget / rate)
    covered, covered_seen, widths, widths_seen = [], [], [], []
    points = points_seen = undefined = 0
    pi_one, no_fn = [], []
    for _ in range(SMALL_REPS):
        score, label = calibrated_pool(window, rate, rng)
        pred = (score >= 0.5).astype(np.int8)
        truth = falpha_exact(pred, label, alpha)
        g = intrinsic_falpha(score, pred, alpha)
        q = defensive_mix(q_star_falpha(score, pred, alpha, 0.0 if np.isnan(g) else g), LAMBDA)
        pi, _ = inclusion_for_budget(q, budget)
        take = np.flatnonzero(rng.random(window) < pi)
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        est = estimate_falpha(sample, alpha, LEVEL)
        seen = estimate_falpha(sample, alpha, LEVEL, pseudo_events=0.0)
        if np.isnan(truth) or not est.defined:
            undefined += 1
            continue
        if pred.any():
            pi_one.append(float(np.mean(pi[pred == 1] >= 1.0)))
        open_neg = (sample.pred == 0) & (sample.fpc > 0.0)
        no_fn.append(float(not (open_neg & (sample.label == 1)).any()))
        covered.append(est.lower <= truth <= est.upper)
        covered_seen.append(seen.lower <= truth <= seen.upper)
        widths.append(est.upper - est.lower)
        widths_seen.append(seen.upper - seen.lower)
        # lambda > 0 samples predicted negatives with pi < 1 in every window (checked): F and
        # recall are never determined by the audited items, a point interval is always wrong
        assert open_neg.any()
        points += int(est.upper == est.lower)
        points_seen += int(seen.upper == seen.lower)
    return SmallResult(
        rate,
        alpha,
        budget,
        window,
        float(np.mean(covered)),
        float(np.mean(covered_seen)),
        float(np.mean(widths)),
        float(np.mean(widths_seen)),
        points,
        points_seen,
        float(np.mean(pi_one)),
        float(np.mean(no_fn)),
        undefined,
    )


@pytest.fixture(scope="module")
def small_results() -> dict[tuple[float, float, int], SmallResult]:
    out: dict[tuple[float, float, int], SmallResult] = {}
    started = time.perf_counter()
    for i, rate in enumerate(SMALL_RATES):
        for j, alpha in enumerate(SMALL_ALPHAS):
            for k, budget in enumerate(SMALL_BUDGETS):
                rng = np.random.default_rng([SEED, 7, i, j, k])
                out[(rate, alpha, budget)] = run_small_case(rate, alpha, budget, rng)
    elapsed = time.perf_counter() - started
    print(
        f"\nsmall windows: {SMALL_REPS} fresh windows per case, {LEVEL:.0%} interval, "
        f"{elapsed:.1f} s (no-unseen = without the unseen-event term, the old interval)"
    )
    print(
        " rate  alpha budget window  pi=1(f=1)  noFN | cover  width points"
        " | no-unseen: cover  width points | undef"
    )
    for r in out.values():
        print(
            f"{r.rate:5.0%}  {r.alpha:5.1f} {r.budget:6d} {r.window:6d}  {r.share_pi_one:9.2f}"
            f"  {r.share_no_fn:4.2f} | {r.coverage:.3f}  {r.width:.3f} {r.points:6d}"
            f" |            {r.coverage_seen:.3f}  {r.width_seen:.3f} {r.points_seen:6d}"
            f" | {r.undefined:5d}"
        )
    return out


SMALL_CASES = [(r, a, b) for r in SMALL_RATES for a in SMALL_ALPHAS for b in SMALL_BUDGETS]


@pytest.mark.parametrize(("rate", "alpha", "budget"), SMALL_CASES)
def test_small_window_interval_covers_and_never_collapses(
    small_results: dict[tuple[float, float, int], SmallResult],
    rate: float,
    alpha: float,
    budget: int,
) -> None:
    """Recall and F1 on 20-50 labels: at least nominal coverage, no point interval.

    A point interval is only right when the measure is determined by the audited items; with
    predicted negatives sampled at pi < 1 it never is for alpha < 1. Coverage is only bounded
    below: the unseen-event term is conservative on these windows (see the module docstring).
    """
    r = small_results[(rate, alpha, budget)]
    assert r.points == 0, r
    assert r.coverage >= 0.93, r
    assert r.coverage >= r.coverage_seen, r


def test_small_windows_reproduce_the_collapse_without_the_unseen_event_term(
    small_results: dict[tuple[float, float, int], SmallResult],
) -> None:
    """The old interval collapsed to a point and under-covered on the rarest, smallest windows."""
    worst = small_results[(0.01, 0.5, 20)]
    assert worst.points_seen > 0.05 * SMALL_REPS, worst
    assert worst.coverage_seen < 0.85, worst
