"""Designs that learn from their labels against today's design: savings and coverage per n.

Run: ``.venv/bin/python -m benchmarks.efficiency --designs [--reps R] [--quick] [--jobs J]``.

Per case (a pool with true labels and a model's scores, an alpha) and total label budget n,
over repetitions with common random numbers:

* ``uniform``: Poisson sampling with pi = n / N; the ratio estimate (seed 000, Eq. 4).
* ``raw q*``: today's daemon: q* (seed 000, Cor. 2) at the raw scores, G their intrinsic F,
  mixed with 10% uniform; pi = min(1, kappa q) with sum(pi) = n; the ratio estimate.
* ``recal q*``: the rounds of ``monitor plan --labelled`` (``monitor.offline.rounds``), shares
  ``ROUNDS`` of n. Round 1 spends 10% of n on q* at the raw scores mixed with 50% uniform (no label
  yet: the scores are not trusted); each later round fits the map on every label so far
  (``design.recalibrate``: Platt, or beta where ``beta_calibration.choose_map`` takes it; ridge
  toward the identity) and spends its share on q* at p_hat over the items not yet labelled, with
  G from the pool's recalibrated expected counts and the defensive share from the labels'
  likelihood, calibration error and number of the model's mistakes seen. The ratio estimate of
  ``monitor estimate``: the mixture of the later rounds' Horvitz-Thompson sums, each over the
  items not labelled before it, weighted by the rounds' budgets, the first round counted exactly
  (``design.rounds_mixture``), with the score-type bounds where the labels reject the
  pool's raw scores, as ``monitor estimate --pool`` reports it (``monitor.stats.score_interval``).
* ``recal+GREG``: the same labels, the model-assisted estimate of ``monitor estimate --pool``
  (``monitor.stats.greg``) with the p_hat of the map that chose the latest round summed over the
  pool per prediction stratum, where the daemon's rule allows it (``greg.choose``: at least 20
  labels per prediction stratum), else the ratio estimate; the score-type bounds likewise.

Savings: 800 / labels needed to reach uniform's MAE at n = 800 (as ``benchmarks.efficiency``).

Cases: the simulated pools of ``benchmarks.efficiency`` (calibrated; logits x3 and x10), its real
covariate-shift case (digits, model trained on degraded images), and a real miscalibrated case:
Gaussian naive Bayes (seed 002, Sec. 4.1: its scores are badly calibrated) trained on half of
scikit-learn's bundled digits to recognise the digit 8, audited on the other half and its 1-pixel
shifts.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from benchmarks.efficiency import (
    ALPHAS,
    BUDGETS,
    LEVEL,
    REFERENCE_BUDGET,
    Case,
    Pool,
    _pool,
    alpha_name,
    digits_pool,
    labels_for_error,
    simulated_cases,
)
from monitor.stats.design import (
    Recalibration,
    recalibrate,
    recalibrated_g,
    recalibrated_weights,
    rounds_mixture,
)
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import (
    falpha_exact,
    intrinsic_falpha,
    intrinsic_falpha_se,
)
from monitor.stats.greg import StratumTraffic, choose
from monitor.stats.measures import measure_all
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import Widening, scores_disagree
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

DESIGNS = ("uniform", "raw q*", "recal q*", "recal+GREG")
LAM_RAW = 0.1  # today's defensive share
#: Shares of the budget per round (``monitor plan --labelled``)
ROUNDS = (0.1, 0.15, 0.75)


@dataclass(frozen=True)
class Cell:
    """MAE, coverage and undefined share of one (design, budget) over the repetitions."""

    mae: float
    coverage: float
    undefined: float


def naive_bayes_pool(seed: int) -> Pool:
    """Gaussian naive Bayes on digits, 'is it an 8', pool = held-out half x 9 shifts."""
    from sklearn.datasets import load_digits
    from sklearn.naive_bayes import GaussianNB

    rng = np.random.default_rng([seed, 88])
    digits = load_digits()
    images = digits.images.astype(np.float64)
    target = (digits.target == 8).astype(np.int8)
    order = rng.permutation(target.size)
    train, test = order[: target.size // 2], order[target.size // 2 :]
    model = GaussianNB().fit(images[train].reshape(train.size, -1), target[train])
    shifts = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, -1), (1, -1), (-1, 1))
    pool = np.concatenate(
        [np.roll(images[test], (dx, dy), axis=(1, 2)) for dx, dy in shifts], axis=0
    )
    labels = np.tile(target[test], len(shifts))
    score = model.predict_proba(pool.reshape(labels.size, -1))[:, 1].astype(np.float64)
    return _pool(score, labels)


def build_cases(
    pool_size: int, n_pools: int, seed: int, rates: Sequence[float] = (0.01, 0.05, 0.20)
) -> list[Case]:
    """Simulated cases (recall and F1) and the two real ones (recall, F1, precision)."""
    cases = [
        c
        for c in simulated_cases(pool_size, n_pools, seed)
        if c.alpha < 1.0 and any(f"{100 * r:>3g}% pos" in c.name for r in rates)
    ]
    for name, group, pool in (
        ("digits", "digits shift", digits_pool(seed)),
        ("naive Bayes", "naive Bayes", naive_bayes_pool(seed)),
    ):
        for alpha in ALPHAS:
            label = f"{name:<11} {100 * pool.label.mean():.1f}% pos, {alpha_name(alpha)}"
            cases.append(Case(label, group, alpha, (pool,)))
    return cases


def _draw(pool: Pool, pi: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, LabeledSample]:
    """The items a Poisson draw with inclusion ``pi`` takes (``u < pi``) and their sample."""
    take = np.flatnonzero(u < pi)
    p = pi[take]
    return take, LabeledSample.poisson(pool.score[take], pool.pred[take], pool.label[take], p)


def _rounds(
    pool: Pool, alpha: float, budget: int, us: Sequence[np.ndarray]
) -> tuple[LabeledSample, Recalibration]:
    """The rounds of ``monitor plan --labelled``: the sample ``monitor estimate`` uses, and the map
    that chose the latest round.

    Round 1 spends ``ROUNDS[0]`` of the budget on q* at the raw scores mixed with 50% uniform (no
    label, so no mistake seen: ``selection.defensive_share`` gives its largest share whatever the
    configured one, as ``monitor plan --defensive 0.5`` in the README); every later round fits
    the map on all labels so far (``design.recalibrate``) and spends its share on q* at p_hat over
    the items not yet labelled (``monitor.offline.rounds``).
    """
    shares = [max(1, round(f * budget)) for f in ROUNDS[:-1]]
    sizes = [*shares, budget - sum(shares)]
    known = np.zeros(pool.score.size, dtype=np.bool_)
    earlier: list[LabeledSample] = []
    for r, size in enumerate(sizes):
        recal = recalibrate(LabeledSample.concat(earlier))
        q = np.where(known, 0.0, recalibrated_weights(pool.score, pool.pred, alpha, recal, LAM_RAW))
        take, drawn = _draw(pool, inclusion_for_budget(q, size)[0], us[r])
        known[take] = True
        earlier.append(drawn)
    return rounds_mixture(earlier, [0.0, *sizes[1:]]), recal


def _estimates(
    pool: Pool, alpha: float, budget: int, us: Sequence[np.ndarray]
) -> dict[str, Estimate]:
    """One repetition: the estimate of every design at one budget."""
    size = pool.score.size
    out = {}
    pi_u = np.full(size, min(1.0, budget / size))
    out["uniform"] = measure_all(_draw(pool, pi_u, us[0])[1], alpha, LEVEL).f
    g_raw = recalibrated_g(pool.score, pool.pred, alpha)
    q_raw = defensive_mix(q_star_falpha(pool.score, pool.pred, alpha, g_raw), LAM_RAW)
    pi = inclusion_for_budget(q_raw, budget)[0]
    out["raw q*"] = measure_all(_draw(pool, pi, us[0])[1], alpha, LEVEL).f
    both, recal = _rounds(pool, alpha, budget, us)
    p_pool = recal.cal_map.apply(pool.score)
    f1 = pool.pred == 1
    traffic = [StratumTraffic(float(np.sum(sel)), float(p_pool[sel].sum())) for sel in (~f1, f1)]
    m = measure_all(both, alpha, LEVEL)  # as `monitor estimate` reports it
    ratio = (m.f, m.precision, m.recall)
    p_hat = recal.cal_map.apply(both.score)
    greg = choose(both, p_hat, traffic[0], traffic[1], ratio, alpha, LEVEL).f
    intrinsic = intrinsic_falpha(pool.score, pool.pred, alpha)
    intrinsic_se = intrinsic_falpha_se(pool.score, pool.pred, alpha)
    checked = {"recal q*": ratio[0], "recal+GREG": greg}
    out.update(checked)
    off = [n for n, est in checked.items() if scores_disagree(est, intrinsic, intrinsic_se)]
    if off:
        wide = Widening.of(both, alpha, ratio[0], ratio[2])
        out.update({n: wide.apply(checked[n], ratio[2])[0] for n in off})
    return out


def evaluate_case(
    case: Case, reps: int, seed: int, budgets: Sequence[int] = BUDGETS
) -> dict[tuple[str, int], Cell]:
    """MAE, coverage and undefined share per (design, budget) over ``reps`` repetitions."""
    errors: dict[tuple[str, int], list[float]] = {(d, b): [] for d in DESIGNS for b in budgets}
    covered = dict.fromkeys(errors, 0)
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode()), 11])
    for p, pool in enumerate(case.pools):
        truth = falpha_exact(pool.pred, pool.label, case.alpha)
        n_reps = reps // len(case.pools) + (p < reps % len(case.pools))
        for _ in range(n_reps):
            us = [rng.random(pool.score.size) for _ in ROUNDS]
            for b in budgets:
                for d, est in _estimates(pool, case.alpha, b, us).items():
                    if est.defined:
                        errors[(d, b)].append(abs(est.value - truth))
                        covered[(d, b)] += est.lower <= truth <= est.upper
    out = {}
    for key, errs in errors.items():
        n = len(errs)
        out[key] = Cell(
            mae=float(np.mean(errs)) if n else math.nan,
            coverage=covered[key] / n if n else math.nan,
            undefined=1.0 - n / reps,
        )
    return out


def savings(cells: dict[tuple[str, int], Cell], design: str, budgets: Sequence[int]) -> float:
    """Uniform's labels / the design's labels for uniform's MAE at n = 800."""
    target = cells[("uniform", REFERENCE_BUDGET)].mae
    need = labels_for_error(budgets, [cells[(design, b)].mae for b in budgets], target)
    return REFERENCE_BUDGET / need.factor


def _job(args: tuple[Case, int, int]) -> dict[tuple[str, int], Cell]:
    return evaluate_case(*args)


def report(
    cases: Sequence[Case],
    results: Sequence[dict[tuple[str, int], Cell]],
    budgets: Sequence[int] = BUDGETS,
) -> list[str]:
    """The table (coverage per n, savings) and every cell that misses the issue's goals."""
    head = f"  {'case':<34} {'design':<11}" + "".join(f"{'cov' + str(b):>8}" for b in budgets)
    lines = [head + f"{'savings':>9}"]
    misses = []
    real_sav: dict[str, list[float]] = {d: [] for d in DESIGNS}
    for case, cells in zip(cases, results, strict=True):
        raw_sav = savings(cells, "raw q*", budgets)
        for d in DESIGNS:
            sav = savings(cells, d, budgets)
            covs = "".join(f"{cells[(d, b)].coverage:>8.3f}" for b in budgets)
            lines.append(f"  {case.name:<34} {d:<11}{covs}{sav:>8.2f}x")
            if case.group in ("digits shift", "naive Bayes"):
                real_sav[d].append(sav)
            if d in ("uniform", "raw q*"):
                continue
            for b in budgets:
                c = cells[(d, b)].coverage
                if b >= 100 and c < 0.90:
                    misses.append(f"  {case.name} {d} n={b}: coverage {c:.3f} < 0.90")
                if case.group == "calibrated" and b >= 100 and not 0.93 <= c <= 0.97:
                    misses.append(f"  {case.name} {d} n={b}: coverage {c:.3f} not in 0.93-0.97")
            if sav < 1.0:
                misses.append(f"  {case.name} {d}: savings {sav:.2f}x < 1")
            if case.group == "calibrated" and sav < 0.95 * raw_sav:
                misses.append(
                    f"  {case.name} {d}: savings {sav:.2f}x < 95% of today's {raw_sav:.2f}x"
                )
    lines.append("")
    lines.append("Geometric mean savings over the real cases:")
    for d in DESIGNS:
        vals = [v for v in real_sav[d] if v > 0 and math.isfinite(v)]
        gm = math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan
        lines.append(f"  {d:<11} {gm:.2f}x")
        if d not in ("uniform", "raw q*") and not gm >= 2.0:
            misses.append(f"  real cases {d}: geometric mean savings {gm:.2f}x < 2")
    lines.append("")
    lines.append("Cells that miss the goals (recalibrated designs only):")
    lines.extend(misses or ["  none"])
    return lines


def main(reps: int, quick: bool, jobs: int, seed: int, echo: Callable[[str], None]) -> int:
    """Run the design comparison and print the table."""
    pool_size, n_pools = (10_000, 2) if quick else (20_000, 4)
    cases = build_cases(pool_size, n_pools, seed)
    work = [(c, reps, seed) for c in cases]
    if jobs <= 1:
        results = [_job(w) for w in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(_job, work))
    echo(
        f"Designs that learn from their labels: {reps} repetitions per case, 95% intervals, "
        f"simulated pools of {pool_size} ({n_pools} per setting); coverage per n, savings"
    )
    for line in report(cases, results):
        echo(line)
    return 0
