"""Label efficiency of active F_alpha estimation against uniform sampling (seed 000, Sec. 3).

Run: ``.venv/bin/python -m benchmarks.efficiency [--reps R] [--quick] [--jobs J]``.
With ``--designs``: the designs that learn from their labels (recalibrated q* in rounds,
with and without the model-assisted estimate) against today's, on the simulated pools and two
real cases (``benchmarks.designs``); ``--stream``: the streaming controller over a simulated
stream whose model turns over-confident after a drift (``benchmarks.stream``); ``--stream-daemon``:
the same through the daemon's sampler and estimator with ``estimator: model_assisted``.

For every case (a pool with true labels, a model's scores and an alpha) and every method, items
are sampled from the pool with a budget of n labels, F_alpha is estimated with
``G = sum(v l w) / sum(v w)`` (seed 000, Eq. 4) and its 95% interval
(``monitor.stats.interval``), and compared with the pool's true F_alpha. Reported per budget:
mean absolute error (MAE), coverage of the interval, mean interval width, and the share of
repetitions where the estimate is undefined (no label with weight; excluded from MAE and
coverage, as the paper discards them).

Methods (selection weights q over the pool, all with the same estimator):
* ``passive``: uniform q = 1;
* ``active_err``: q* of the zero-one risk (seed 002, Derivation 1), R = intrinsic risk;
* ``active_F l=0``, ``l=0.1``, ``l=0.2``: q* for F_alpha (seed 000, Corollary 2; G the
  intrinsic F of the pool), mixed with uniform: q = (1 - l) q*/mean(q*) + l.

Designs: ``poisson`` (default, as the daemon and ``monitor plan``): pi = min(1, kappa q) with
sum(pi) = n, the number of labels is random with mean n; ``with-replacement`` (seed 000,
Algorithm 1): exactly n draws with probability q / sum(q). Within a repetition all methods and
budgets share the same uniform numbers (common random numbers: differences between methods are
measured more precisely than each one alone).

Label-savings factor: 800 / (labels the method needs to reach the MAE that uniform sampling
reaches with 800 labels), interpolating MAE linearly in log(n) -- log(MAE) on the budget grid and
extrapolating beyond it with the 1/sqrt(n) law. Above 1 the method saves labels; below 1 it loses.

Cases: simulated calibrated pools (``monitor.sim.simulate.calibrated_pool``) with 1%, 5% and 20%
positives, for recall (alpha = 0), F1 (0.5) and precision (1); the same pools scored by an
over-confident model (logits x3 and x10); and a real covariate-shift case from scikit-learn's
bundled digits: a logistic regression trained on blurred, noisy images to recognise the digit 3,
audited on a pool of clean images and their 1-pixel shifts, a third of the 3s kept (~3.5%
positives, against 10% in training).
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.sim.simulate import calibrated_pool
from monitor.stats.falpha import (
    estimate_falpha,
    falpha_exact,
    intrinsic_falpha,
    intrinsic_zero_one_risk,
)
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import (
    defensive_mix,
    inclusion_for_budget,
    q_star_falpha,
    q_star_zero_one,
)

FloatArray = npt.NDArray[np.float64]
Int8Array = npt.NDArray[np.int8]

BUDGETS = (50, 100, 200, 400, 800)
RATES = (0.01, 0.05, 0.20)
ALPHAS = (0.0, 0.5, 1.0)
OVERCONFIDENCE = (1.0, 3.0, 10.0)
METHODS = ("passive", "active_err", "active_F l=0", "active_F l=0.1", "active_F l=0.2")
LEVEL = 0.95
REFERENCE_BUDGET = 800


@dataclass(frozen=True)
class Pool:
    """A pool with true labels and the model's scores and predictions."""

    score: FloatArray
    pred: Int8Array
    label: Int8Array


@dataclass(frozen=True)
class Case:
    """One benchmark case: pools (independent draws of the same setting) and alpha."""

    name: str
    group: str
    alpha: float
    pools: tuple[Pool, ...]


@dataclass(frozen=True)
class Cell:
    """Results of one (case, method, budget) over all repetitions."""

    mae: float
    coverage: float
    width: float
    undefined: float
    labels: float


def alpha_name(alpha: float) -> str:
    """recall (0), F1 (0.5), precision (1)."""
    return {0.0: "recall", 0.5: "F1", 1.0: "precision"}.get(alpha, f"F_alpha={alpha:g}")


def selection_weights(method: str, pool: Pool, alpha: float) -> FloatArray:
    """The selection weights q of ``method`` on ``pool`` (see the module docstring)."""
    if method == "passive":
        return np.ones_like(pool.score)
    if method == "active_err":
        risk = intrinsic_zero_one_risk(pool.score, pool.pred)
        return q_star_zero_one(pool.score, pool.pred, risk)
    lam = float(method.rsplit("=", 1)[1])
    g = intrinsic_falpha(pool.score, pool.pred, alpha)
    return defensive_mix(q_star_falpha(pool.score, pool.pred, alpha, g), lam)


def _pool(score: FloatArray, label: npt.ArrayLike) -> Pool:
    return Pool(score, (score >= 0.5).astype(np.int8), np.asarray(label, dtype=np.int8))


def simulated_cases(pool_size: int, n_pools: int, seed: int) -> list[Case]:
    """Calibrated and over-confident pools x alphas; pools of one rate share their labels."""
    cases = []
    for i, rate in enumerate(RATES):
        for over in OVERCONFIDENCE:
            pools = []
            for p in range(n_pools):
                # the same generator state per (rate, p): identical labels and logits, only the
                # reported scores differ with the over-confidence
                rng = np.random.default_rng([seed, i, p])
                pools.append(_pool(*calibrated_pool(pool_size, rate, rng, overconfidence=over)))
            group = "calibrated" if over == 1.0 else f"logits x{over:g}"
            for alpha in ALPHAS:
                name = f"{group:<11} {100 * rate:>3g}% pos, {alpha_name(alpha)}"
                cases.append(Case(name, group, alpha, tuple(pools)))
    return cases


def digits_pool(seed: int) -> Pool:
    """Covariate shift on scikit-learn's bundled digits (offline; see the module docstring)."""
    from scipy import ndimage
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng([seed, 99])
    digits = load_digits()
    images = digits.images.astype(np.float64)
    target = (digits.target == 3).astype(np.int8)
    order = rng.permutation(target.size)
    train, test = order[:900], order[900:]
    blurred = ndimage.gaussian_filter(images[train], sigma=(0.0, 0.8, 0.8))
    degraded = np.clip(blurred + rng.normal(0.0, 1.5, blurred.shape), 0.0, 16.0)
    model = LogisticRegression(C=1.0, max_iter=2000)
    model.fit(degraded.reshape(train.size, -1) / 16.0, target[train])
    shifts = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, -1), (1, -1), (-1, 1))
    clean = np.concatenate(
        [np.roll(images[test], (dx, dy), axis=(1, 2)) for dx, dy in shifts], axis=0
    )
    labels = np.tile(target[test], len(shifts))
    keep = (labels == 0) | (rng.random(labels.size) < 1.0 / 3.0)
    clean, labels = clean[keep], labels[keep]
    score = model.predict_proba(clean.reshape(labels.size, -1) / 16.0)[:, 1].astype(np.float64)
    return _pool(score, labels)


def build_cases(pool_size: int, n_pools: int, seed: int, digits: bool = True) -> list[Case]:
    """Every case of the benchmark."""
    cases = simulated_cases(pool_size, n_pools, seed)
    if digits:
        pool = digits_pool(seed)
        for alpha in ALPHAS:
            name = f"{'digits':<11} {100 * pool.label.mean():.1f}% pos, {alpha_name(alpha)}"
            cases.append(Case(name, "digits shift", alpha, (pool,)))
    return cases


def _sample(
    design: str, pool: Pool, q: FloatArray, *, budget: int, pi: FloatArray, u: FloatArray
) -> LabeledSample:
    """The labelled sample of one repetition; the same arrays as ``LabeledSample.poisson`` /
    ``.with_replacement`` build (v = 1/pi, fpc = 1 - pi; v = 1/(n q), fpc = 1), constructed
    directly because pred and label are already validated int8 (their 0/1 check dominated
    the run time)."""
    if design == "poisson":
        take = np.flatnonzero(u < pi)
        p_take = pi[take]
        return LabeledSample(
            pool.score[take], pool.pred[take], pool.label[take], 1.0 / p_take, 1.0 - p_take
        )
    p = q / q.sum()
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    idx = np.searchsorted(cdf, u[:budget], side="right")
    return LabeledSample(
        pool.score[idx],
        pool.pred[idx],
        pool.label[idx],
        1.0 / (budget * p[idx]),
        np.ones(budget, dtype=np.float64),
    )


def evaluate_case(
    case: Case,
    reps: int,
    seed: int,
    *,
    design: str = "poisson",
    budgets: Sequence[int] = BUDGETS,
    methods: Sequence[str] = METHODS,
) -> dict[tuple[str, int], Cell]:
    """MAE, coverage, width and undefined share per (method, budget), over ``reps`` repetitions.

    Repetitions are spread over the case's pools; each pool's truth is its own F_alpha.
    """
    errors: dict[tuple[str, int], list[float]] = {(m, b): [] for m in methods for b in budgets}
    covered = {k: 0 for k in errors}
    widths: dict[tuple[str, int], list[float]] = {k: [] for k in errors}
    labels = {k: 0 for k in errors}
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode()), 7])
    for p, pool in enumerate(case.pools):
        truth = falpha_exact(pool.pred, pool.label, case.alpha)
        weights = {m: selection_weights(m, pool, case.alpha) for m in methods}
        incl = {
            (m, b): inclusion_for_budget(weights[m], min(b, pool.score.size))[0]
            for m in methods
            for b in budgets
        }
        n_reps = reps // len(case.pools) + (p < reps % len(case.pools))
        size = pool.score.size if design == "poisson" else max(budgets)
        for _ in range(n_reps):
            u = rng.random(size)
            for key, pi in incl.items():
                sample = _sample(design, pool, weights[key[0]], budget=key[1], pi=pi, u=u)
                labels[key] += len(sample)
                est = estimate_falpha(sample, case.alpha, LEVEL)
                if not est.defined:
                    continue
                errors[key].append(abs(est.value - truth))
                covered[key] += est.lower <= truth <= est.upper
                widths[key].append(est.upper - est.lower)
    out = {}
    for key, errs in errors.items():
        n = len(errs)
        out[key] = Cell(
            mae=float(np.mean(errs)) if n else math.nan,
            coverage=covered[key] / n if n else math.nan,
            width=float(np.mean(widths[key])) if n else math.nan,
            undefined=1.0 - n / reps if reps else math.nan,
            labels=labels[key] / reps if reps else math.nan,
        )
    return out


@dataclass(frozen=True)
class Savings:
    """A label-savings factor; ``bound`` is ">" (reached at the smallest budget: at least this),
    "~" (not reached on the grid: extrapolated with 1/sqrt(n)) or "" (interpolated)."""

    factor: float
    bound: str = ""

    def __str__(self) -> str:
        return "  -" if math.isnan(self.factor) else f"{self.bound}{self.factor:.2f}x"


_FLOOR = 1e-9  # an MAE of 0 (a census of the relevant stratum) on the log scale


def labels_for_error(budgets: Sequence[int], maes: Sequence[float], target: float) -> Savings:
    """Labels at which the MAE curve first reaches ``target`` (log-log interpolation).

    Returned as a :class:`Savings` holding the number of labels (not yet a factor): with bound
    ">" when the first budget already reaches the target (the true number is at most that
    budget), "~" when even the last budget does not (extrapolated with MAE ~ 1/sqrt(n)).
    """
    if math.isnan(target) or any(math.isnan(e) for e in maes):
        return Savings(math.nan)
    t = math.log(max(target, _FLOOR))
    pts = [(math.log(b), math.log(max(e, _FLOOR))) for b, e in zip(budgets, maes, strict=True)]
    if pts[0][1] <= t:
        return Savings(float(budgets[0]), ">")
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if y1 <= t:
            return Savings(math.exp(x0 + (x1 - x0) * (t - y0) / (y1 - y0)))
    return Savings(math.exp(pts[-1][0] + 2.0 * (pts[-1][1] - t)), "~")


def savings(cells: dict[tuple[str, int], Cell], method: str, budgets: Sequence[int]) -> Savings:
    """Uniform's labels / the method's labels for uniform's MAE at the reference budget."""
    if method == "passive":
        return Savings(1.0)
    target = cells[("passive", REFERENCE_BUDGET)].mae if REFERENCE_BUDGET in budgets else math.nan
    need = labels_for_error(budgets, [cells[(method, b)].mae for b in budgets], target)
    return Savings(REFERENCE_BUDGET / need.factor, need.bound)


def _fmt(x: float, spec: str) -> str:
    return "  -  " if math.isnan(x) else format(x, spec)


def render_case(
    case: Case, cells: dict[tuple[str, int], Cell], budgets: Sequence[int], methods: Sequence[str]
) -> str:
    """One block of the table: a row per method, MAE / coverage / width per budget."""
    pool = case.pools[0]
    truth = falpha_exact(pool.pred, pool.label, case.alpha)
    lines = [
        f"{case.name}  (pool {pool.score.size}, truth {truth:.3f}"
        f"{' in pool 1' if len(case.pools) > 1 else ''})",
        f"  {'method':<15}"
        + "".join(f"{'n=' + str(b) + ' mae cov width':>23}" for b in budgets)
        + f"{'savings':>9}",
    ]
    for m in methods:
        row = f"  {m:<15}"
        for b in budgets:
            c = cells[(m, b)]
            flag = "*" if c.undefined > 0 else " "
            row += (
                f"    {_fmt(c.mae, '.4f')} {_fmt(c.coverage, '.3f')} {_fmt(c.width, '.3f')}{flag}"
            )
        row += f"{savings(cells, m, budgets)!s:>9}"
        lines.append(row)
    return "\n".join(lines)


def _job(args: tuple[Case, int, int, str, tuple[int, ...]]) -> dict[tuple[str, int], Cell]:
    case, reps, seed, design, budgets = args
    return evaluate_case(case, reps, seed, design=design, budgets=budgets)


def run(
    cases: Sequence[Case],
    reps: int,
    seed: int,
    *,
    design: str = "poisson",
    budgets: Sequence[int] = BUDGETS,
    jobs: int = 1,
) -> list[dict[tuple[str, int], Cell]]:
    """Evaluate every case (in ``jobs`` processes); results in the order of ``cases``."""
    work = [(c, reps, seed, design, tuple(budgets)) for c in cases]
    if jobs <= 1:
        return [_job(w) for w in work]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_job, work))


def _status(marks: Sequence[bool]) -> str:
    return "MET " if all(marks) else ("PART" if any(marks) else "MISS")


def summary(
    cases: Sequence[Case], results: Sequence[dict[tuple[str, int], Cell]], budgets: Sequence[int]
) -> list[str]:
    """The goals of the issue, measured, and every case where an active method loses."""
    out = ["", "Label-savings factor (uniform's labels / method's labels at uniform's MAE at 800)"]
    out.append(f"  {'case':<36}" + "".join(f"{m:>16}" for m in METHODS[1:]))
    for case, cells in zip(cases, results, strict=True):
        row = "".join(f"{savings(cells, m, budgets)!s:>16}" for m in METHODS[1:])
        out.append(f"  {case.name:<36}{row}")
    out.append("")
    out.append("Goal 1: active F_alpha needs <= 1/4 of uniform's labels (savings >= 4) for recall")
    out.append(
        "        and F1 at 1-5% positives with calibrated scores   (per lambda: + met, - missed)"
    )
    for case, cells in zip(cases, results, strict=True):
        if case.group == "calibrated" and case.alpha < 1.0 and "20%" not in case.name:
            found = [(m[9:], savings(cells, m, budgets)) for m in METHODS[2:]]
            marks = [s.factor >= 4.0 for _, s in found]
            facts = [
                f"{'+' if ok else '-'}{lam} {s}" for (lam, s), ok in zip(found, marks, strict=True)
            ]
            out.append(f"  {_status(marks)} {case.name:<36} " + ", ".join(facts))
    out.append(
        "Goal 2: coverage >= 0.90 with logits x3 (active F_alpha, lowest over budgets >= 100)"
    )
    for case, cells in zip(cases, results, strict=True):
        if case.group == "logits x3":
            covs = [
                (m[9:], min(cells[(m, b)].coverage for b in budgets if b >= 100))
                for m in METHODS[2:]
            ]
            marks = [c >= 0.90 for _, c in covs]
            facts = [
                f"{'+' if ok else '-'}{lam} {c:.3f}"
                for (lam, c), ok in zip(covs, marks, strict=True)
            ]
            out.append(f"  {_status(marks)} {case.name:<36} " + ", ".join(facts))
    out.append("Where an active method loses to uniform (savings < 1):")
    losses = [
        f"  {case.name:<36} {m}: {savings(cells, m, budgets)}"
        for case, cells in zip(cases, results, strict=True)
        for m in METHODS[1:]
        if savings(cells, m, budgets).factor < 1.0
    ]
    out.extend(losses or ["  none"])
    return out


def main(argv: Sequence[str] | None = None, echo: Callable[[str], None] = print) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.efficiency")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per case (1000)")
    parser.add_argument("--quick", action="store_true", help="40 repetitions, smaller pools")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--seed", type=int, default=2010)
    parser.add_argument("--design", choices=("poisson", "with-replacement"), default="poisson")
    parser.add_argument(
        "--designs", action="store_true", help="compare designs that learn from their labels"
    )
    parser.add_argument(
        "--stream", action="store_true", help="the streaming controller through a drift"
    )
    parser.add_argument(
        "--scenario",
        choices=("over-confident", "one-sided", "calibrated"),
        default="over-confident",
        help="with --stream: over-confident on both sides, on the negative logits only, or "
        "calibrated throughout",
    )
    parser.add_argument(
        "--stream-daemon",
        action="store_true",
        help="the daemon's model-assisted estimate (sampler + estimator) through a drift",
    )
    parser.add_argument(
        "--stream-segments",
        action="store_true",
        help="per-segment calibration maps when one segment of the traffic drifts",
    )
    parser.add_argument(
        "--cells",
        default="",
        metavar="TEXT",
        help="with --stream-daemon: only the cells whose name contains TEXT (e.g. calibrated)",
    )
    parser.add_argument(
        "--no-recalibrate",
        action="store_true",
        help="with --stream-daemon: the model is configured recalibrate: false (q* at raw scores)",
    )
    parser.add_argument(
        "--bucket",
        type=int,
        default=None,
        metavar="B",
        help="with --stream-daemon: only the windows of bucket B (3: the first after the drift)",
    )
    parser.add_argument(
        "--defensive",
        type=float,
        default=0.1,
        metavar="S",
        help="with --stream-daemon: the model's configured defensive share (default 0.1)",
    )
    parser.add_argument(
        "--fit-buckets",
        type=int,
        default=2,
        metavar="K",
        help="with --stream-daemon: fit each map on the last K buckets of labels (default 2, "
        "what the daemon fits on at 150 labels an hour; 10: all of the stream, as 24 h would be)",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        default=10,
        metavar="N",
        help="with --stream-daemon: streams of N hourly buckets (default 10)",
    )
    parser.add_argument(
        "--from-bucket",
        type=int,
        default=None,
        metavar="B",
        help="with --stream-daemon: only the windows of bucket B and later",
    )
    args = parser.parse_args(argv)
    reps = args.reps if args.reps is not None else (40 if args.quick else 1000)
    if args.designs:
        from benchmarks import designs

        return designs.main(reps, args.quick, args.jobs, args.seed, echo)
    if args.stream_segments:
        from benchmarks import segments

        return segments.main(reps, args.seed, echo)
    if args.stream or args.stream_daemon:
        from benchmarks import stream

        if args.stream_daemon:
            return stream.main_daemon(
                reps,
                args.seed,
                echo,
                args.cells,
                recalibrate=not args.no_recalibrate,
                bucket=args.bucket,
                defensive=args.defensive,
                fit_buckets=args.fit_buckets,
                buckets=args.buckets,
                from_bucket=args.from_bucket,
            )
        return stream.main(reps, args.quick, args.seed, echo, args.scenario)
    pool_size, n_pools = (10_000, 2) if args.quick else (20_000, 5)
    start = time.perf_counter()
    cases = build_cases(pool_size, n_pools, args.seed)
    results = run(cases, reps, args.seed, design=args.design, jobs=args.jobs)
    echo(
        f"Efficiency of active F_alpha estimation: {reps} repetitions per case, design "
        f"{args.design}, 95% intervals, simulated pools of {pool_size} ({n_pools} per setting)"
    )
    echo("Cells: MAE, interval coverage, mean interval width; * = some estimates undefined")
    echo("(excluded). savings = 800 / labels needed for uniform's MAE at 800.")
    for case, cells in zip(cases, results, strict=True):
        echo("")
        echo(render_case(case, cells, BUDGETS, METHODS))
    for line in summary(cases, results, BUDGETS):
        echo(line)
    echo(f"\nelapsed {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
