"""Offline audit of a pool from the command line: ``monitor plan``, ``estimate``, ``offline-demo``.

The pool-based mode of seed 000 (Algorithm 1), useful on its own for a one-off evaluation:

1. ``monitor plan`` computes the variance-optimal selection weights for F_alpha from the scores
   alone (seed 000, Corollary 2, with G the intrinsic F of the pool, Sec. 2.2), mixes them with
   uniform (``--defensive`` lambda: q = (1 - lambda) q*/mean(q*) + lambda) and selects items:
   * ``poisson`` (default): pi_i = min(1, kappa q_i) with kappa solved so that sum(pi) = budget,
     item i audited iff hash_uniform(id_i, salt) < pi_i -- deterministic, so planning twice gives
     the same plan; the number of labels is random with mean ``budget``;
   * ``with-replacement``: exactly ``budget`` draws with probability q_i / sum(q) (Algorithm 1),
     one plan row per distinct item with its ``draws`` count (a label counts once per draw).
2. The auditors fill in the ``label`` column (empty = pending).
3. ``monitor estimate`` returns G_hat = sum(v l w) / sum(v w) (seed 000, Eq. 4, v = 1/pi or
   1/(n q)) for F_alpha, precision and recall, with confidence intervals
   (``monitor.stats.interval``), the model likelihood (seed 002, Sec. 4.1), the effective sample
   size and the confusion counts of the pool.

The plan records in its ``# key=value`` header what the estimate needs: design, alpha, budget,
seed and salt, defensive lambda, threshold, ``pool_size`` and ``pool_predicted_positives`` (the
known stratum sizes N1, N0 = pool_size - N1; the confusion counts are post-stratified to them:
tp = N1 sum_{f=1}(v y) / sum_{f=1}(v), fn = N0 sum_{f=0}(v y) / sum_{f=0}(v)), the intrinsic F,
kappa and ``zero_probability_items`` (pool items that could not be selected; estimates that
give them weight are then biased, and ``estimate`` warns).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError
from monitor.offline.poolfile import DESIGNS, Plan, Pool, read_plan, read_pool, write_plan
from monitor.offline.rounds import Known, known_labels, next_round_weights, rounds_sample
from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Confusion, Estimate
from monitor.stats.falpha import falpha_exact, intrinsic_falpha
from monitor.stats.measures import Measures, measure_all
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import (
    defensive_mix,
    draw_with_replacement,
    hash_uniform,
    inclusion_for_budget,
    q_star_falpha,
)

DEFAULT_DEFENSIVE = 0.1


def measure_name(alpha: float) -> str:
    """A readable name of F_alpha: recall (0), F1 (0.5), precision (1), else F_beta."""
    if alpha == 0.0:
        return "recall"
    if alpha == 1.0:
        return "precision"
    beta = math.sqrt(1.0 / alpha - 1.0)
    return f"F{beta:.3g}"


def selection_weights(
    score: npt.NDArray[np.float64], pred: npt.NDArray[np.int8], alpha: float, defensive: float
) -> tuple[npt.NDArray[np.float64], float, bool]:
    """Selection weights q (mean 1 over the pool), the intrinsic F and whether q* was usable.

    q = defensive_mix(q*(s, f, alpha, G_theta), lambda) (seed 000 Corollary 2 and Sec. 2.2).
    When G_theta is undefined or q* is degenerate (all zero, e.g. precision of a pool without a
    predicted positive) the uniform q = 1 is used instead.
    """
    g = intrinsic_falpha(score, pred, alpha)
    if math.isfinite(g):
        q_star = q_star_falpha(score, pred, alpha, g)
        if np.isfinite(q_star).all() and float(q_star.sum()) > 0.0:
            return defensive_mix(q_star, defensive), g, True
    return np.ones_like(score), g, False


def make_plan(
    pool: Pool,
    *,
    alpha: float,
    budget: int,
    seed: int = 0,
    defensive: float = DEFAULT_DEFENSIVE,
    design: str = "poisson",
    threshold: float = 0.5,
    known: Known | None = None,
    pool_path: str = "pool",
) -> Plan:
    """Select the items to audit from ``pool`` (see the module docstring for the designs).

    With ``known`` (the labelled rows of earlier rounds, ``monitor.offline.rounds``) the next
    round is planned: Poisson only, known items excluded, q* at the recalibrated scores.
    """
    q, g, active = selection_weights(pool.score, pool.pred, alpha, defensive)
    extra: dict[str, str] = {}
    if known is not None:
        if design != "poisson":
            msg = "--labelled (planning a next round) needs the poisson design"
            raise InputFileError(msg)
        q, slope, lam = next_round_weights(pool, alpha, defensive, known, pool_path)
        extra = {
            "round": str(known.last_round + 1),
            "known_labels": str(len(known.ids)),
            "calibration_slope": repr(slope),
            "defensive_used": repr(lam),
        }
    salt = f"plan:{seed}"
    meta: dict[str, str] = {
        "design": design,
        "alpha": repr(alpha),
        "budget": str(budget),
        "seed": str(seed),
        "salt": salt,
        "defensive": repr(defensive),
        "selection": "active" if active else "uniform (intrinsic F undefined)",
        "threshold": "pred column" if pool.pred_given else repr(threshold),
        "pool_size": str(len(pool)),
        "pool_predicted_positives": str(int(pool.pred.sum())),
        "intrinsic_f": repr(g),
        "zero_probability_items": str(
            int(np.count_nonzero(q <= 0.0)) - int(extra.get("known_labels", "0"))
        ),
        **extra,
    }
    if design == "poisson":
        pi, kappa = inclusion_for_budget(q, min(budget, len(pool)))
        take = np.flatnonzero(hash_uniform(pool.ids, salt) < pi)
        prob = pi[take]
        weight = 1.0 / prob
        draws = np.ones(take.size, dtype=np.int64)
        meta["kappa"] = repr(float(kappa))
        meta["expected_labels"] = repr(float(pi.sum()))
    else:
        p = q / q.sum()
        drawn = draw_with_replacement(p, budget, np.random.default_rng(seed))
        counts = np.bincount(drawn, minlength=len(pool))
        take = np.flatnonzero(counts)
        prob = p[take]
        weight = 1.0 / (budget * prob)
        draws = counts[take].astype(np.int64)
    n = take.size
    return Plan(
        design,
        pool.ids[take],
        pool.score[take],
        pool.pred[take],
        prob,
        weight,
        draws,
        np.zeros(n, dtype=np.int8),
        np.zeros(n, dtype=np.bool_),
        meta,
    )


@dataclass(frozen=True)
class PlanEstimate:
    """The estimate from a labelled plan, ready to print."""

    alpha: float
    level: float
    measures: Measures
    confusion: Confusion | None
    labels: int
    pending: int
    warnings: list[str]


def plan_sample(plan: Plan) -> LabeledSample:
    """The labelled part of a plan as a sample (one row per draw for with-replacement)."""
    lab = plan.labelled
    if plan.design == "poisson":
        return LabeledSample.poisson(
            plan.score[lab], plan.pred[lab], plan.label[lab], plan.prob[lab]
        )
    rep = plan.draws[lab]
    return LabeledSample.with_replacement(
        np.repeat(plan.score[lab], rep),
        np.repeat(plan.pred[lab], rep),
        np.repeat(plan.label[lab], rep),
        np.repeat(plan.prob[lab], rep),
    )


def _meta_int(plan: Plan, key: str, path: str) -> int | None:
    text = plan.meta.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        msg = f"{path}: header '{key}={text}': expected a whole number >= 0"
        raise InputFileError(msg)
    return value


def plan_alpha(plan: Plan, override: float | None, path: str) -> float:
    """The alpha to estimate: ``--alpha`` if given, else the one recorded in the plan."""
    if override is not None:
        return override
    text = plan.meta.get("alpha")
    if text is None:
        msg = f"{path}: the plan header records no alpha (no '# alpha=...' line); pass --alpha"
        raise InputFileError(msg)
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not 0.0 <= alpha <= 1.0:
        msg = f"{path}: header 'alpha={text}': expected a number in [0, 1]"
        raise InputFileError(msg)
    return alpha


def post_stratified_confusion(sample: LabeledSample, n_pos: int, n_neg: int) -> Confusion:
    """Confusion counts of the pool, scaled to the known numbers of predicted positives/negatives.

    tp = N1 sum_{f=1}(v y) / sum_{f=1}(v), fp = N1 - tp; fn and tn likewise with N0 (NaN for a
    stratum with items but no label).
    """
    cells = []
    for f, size in ((1, n_pos), (0, n_neg)):
        mask = sample.pred == f
        total = float(sample.v[mask].sum())
        if size == 0:
            pos = 0.0
        elif total > 0.0:
            pos = size * float(np.dot(sample.v[mask], sample.label[mask])) / total
        else:
            pos = math.nan
        cells.append((pos, size - pos))
    (tp, fp), (fn, tn) = cells
    return Confusion(tp, fp, fn, tn)


def estimate_plan(
    plan: Plan,
    path: str,
    alpha: float | None,
    level: float,
    sample: LabeledSample | None = None,
) -> PlanEstimate:
    """Estimate F_alpha, precision, recall and the pool's confusion counts from a labelled plan.

    ``sample`` replaces the plan's own labelled rows (rounds: ``rounds.rounds_sample``).
    """
    a = plan_alpha(plan, alpha, path)
    if sample is None:
        sample = plan_sample(plan)
    measures = measure_all(sample, a, level)
    n_pos = _meta_int(plan, "pool_predicted_positives", path)
    size = _meta_int(plan, "pool_size", path)
    confusion = None
    if n_pos is not None and size is not None:
        confusion = post_stratified_confusion(sample, n_pos, size - n_pos)
    warnings = []
    pending = int(np.count_nonzero(~plan.labelled))
    if pending:
        warnings.append(
            f"{pending} of {len(plan)} plan items are still pending; the estimate assumes the "
            "labelled ones are not chosen by their outcome"
        )
    zero = _meta_int(plan, "zero_probability_items", path) or 0
    if zero:
        warnings.append(
            f"{zero} pool items had no chance of selection (defensive=0); an estimate that gives "
            "them weight (recall when they are predicted negative) is biased"
        )
    labels = len(sample) if plan.design == "poisson" else int(np.count_nonzero(plan.labelled))
    return PlanEstimate(a, level, measures, confusion, labels, pending, warnings)


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def estimate_json(result: PlanEstimate, plan: Plan) -> dict[str, Any]:
    """The JSON object printed by ``monitor estimate --format json`` (NaN becomes null)."""
    m = result.measures
    out: dict[str, Any] = {
        "measure": measure_name(result.alpha),
        "alpha": result.alpha,
        "level": result.level,
        "estimate": _num(m.f.value),
        "ci_low": _num(m.f.lower),
        "ci_high": _num(m.f.upper),
        "se": _num(m.f.se),
        "labels": result.labels,
        "pending": result.pending,
        "draws": int(plan.draws[plan.labelled].sum()),
        "design": plan.design,
    }
    for name, est in (("precision", m.precision), ("recall", m.recall)):
        out[name] = _num(est.value)
        out[f"{name}_ci_low"] = _num(est.lower)
        out[f"{name}_ci_high"] = _num(est.upper)
    out["likelihood"] = _num(m.likelihood)
    out["ess"] = _num(m.ess)
    c = result.confusion
    out["confusion"] = (
        None if c is None else {k: _num(getattr(c, k)) for k in ("tp", "fp", "fn", "tn")}
    )
    out["warnings"] = result.warnings
    return out


def _interval(est: Estimate) -> str:
    if not est.defined:
        return "undefined (no label carries weight yet)"
    return f"{est.value:.4f}  [{est.lower:.4f}, {est.upper:.4f}]"


def estimate_table(result: PlanEstimate, plan: Plan, path: str) -> str:
    """The human-readable report of ``monitor estimate``."""
    m = result.measures
    pct = f"{100 * result.level:g}%"
    lines = [
        f"{path}: {plan.design} design, {result.labels} labels used, {result.pending} pending",
        f"{'measure':<16} estimate  {pct} interval",
    ]
    for name, est in (
        (f"{measure_name(result.alpha)} (alpha={result.alpha:g})", m.f),
        ("precision", m.precision),
        ("recall", m.recall),
    ):
        lines.append(f"{name:<16} {_interval(est)}")
    lines.append(f"model likelihood {m.likelihood:.4f}, effective sample size {m.ess:.1f}")
    c = result.confusion
    if c is not None:
        lines.append(
            f"confusion over the pool: tp {c.tp:.1f}  fp {c.fp:.1f}  fn {c.fn:.1f}  tn {c.tn:.1f}"
        )
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def _cmd_plan(args: argparse.Namespace) -> int:
    pool = read_pool(args.pool, args.threshold)
    known = None
    if args.labelled:
        known = known_labels([(p, read_plan(p)) for p in args.labelled])
    plan = make_plan(
        pool,
        alpha=args.alpha,
        budget=args.budget,
        seed=args.seed,
        defensive=args.defensive,
        design=args.design,
        threshold=args.threshold,
        known=known,
        pool_path=args.pool,
    )
    write_plan(args.out, plan, ["fill in label with 0 or 1; leave it empty while pending"])
    if plan.design == "poisson":
        what = f"{len(plan)} items to audit (expected {args.budget})"
    else:
        what = f"{len(plan)} distinct items to audit for {args.budget} draws"
    print(f"{args.out}: {what} out of {len(pool)} in {args.pool}")
    if plan.meta["selection"] != "active":
        print(
            f"note: the intrinsic {measure_name(args.alpha)} of the pool is undefined; "
            "items were selected uniformly"
        )
    return 0


def _cmd_estimate(args: argparse.Namespace) -> int:
    plans = [(p, read_plan(p)) for p in args.labels]
    if len(plans) == 1 and plans[0][1].meta.get("known_labels", "0") == "0":
        path, plan = plans[0]
        result = estimate_plan(plan, path, args.alpha, args.level)
    else:  # rounds; a later round alone is refused (its earlier labels are part of the total)
        sample, plan, path = rounds_sample(plans)
        result = estimate_plan(plan, path, args.alpha, args.level, sample)
    if args.format == "json":
        print(json.dumps(estimate_json(result, plan), allow_nan=False))
    else:
        print(estimate_table(result, plan, path))
    return 0


@dataclass(frozen=True)
class DemoResult:
    """One run of the offline demo: truth and both samples' measures per alpha."""

    truth: dict[float, float]
    active: dict[float, Estimate]
    uniform: dict[float, Estimate]
    active_labels: int
    uniform_labels: int
    pool: Pool
    positives: int
    plan: Plan


def fill_labels(plan: Plan, pool: Pool, truth: npt.NDArray[np.int8]) -> Plan:
    """The plan with every label answered from ``truth`` (aligned with ``pool``)."""
    index = {str(k): i for i, k in enumerate(pool.ids)}
    rows = np.fromiter((index[str(k)] for k in plan.ids), dtype=np.int64, count=len(plan))
    return replace(plan, label=truth[rows].astype(np.int8), labelled=np.ones(len(plan), np.bool_))


def run_demo(
    *,
    seed: int,
    budget: int,
    positive_rate: float,
    pool_size: int,
    alpha: float = 0.5,
    defensive: float = DEFAULT_DEFENSIVE,
    level: float = 0.95,
) -> DemoResult:
    """Simulate a calibrated skewed pool, audit it actively and uniformly, estimate both.

    Uniform sampling is the same Poisson design with q = 1 (pi = budget / pool size) and an
    independent hash salt; the truth is F_alpha of the whole pool with its true labels.
    """
    rng = np.random.default_rng(seed)
    score, truth = calibrated_pool(pool_size, positive_rate, rng)
    truth = np.asarray(truth, dtype=np.int8)
    ids = np.char.add("item-", np.arange(pool_size).astype(np.str_))
    pool = Pool(ids, score, (score >= 0.5).astype(np.int8), False)
    active = fill_labels(
        make_plan(pool, alpha=alpha, budget=budget, seed=seed, defensive=defensive), pool, truth
    )
    uniform = fill_labels(
        make_plan(pool, alpha=alpha, budget=budget, seed=seed + 1, defensive=1.0), pool, truth
    )
    alphas = (alpha, 1.0, 0.0)
    est: list[dict[float, Estimate]] = []
    for plan in (active, uniform):
        m = measure_all(plan_sample(plan), alpha, level)
        est.append({alpha: m.f, 1.0: m.precision, 0.0: m.recall})
    return DemoResult(
        truth={a: falpha_exact(pool.pred, truth, a) for a in alphas},
        active=est[0],
        uniform=est[1],
        active_labels=len(active),
        uniform_labels=len(uniform),
        pool=pool,
        positives=int(truth.sum()),
        plan=active,
    )


def _demo_cell(est: Estimate, truth: float) -> str:
    if not est.defined:
        return f"{'undefined':<34}"
    miss = "" if est.lower <= truth <= est.upper else " (misses)"
    return (
        f"{est.value:.3f} [{est.lower:.3f}, {est.upper:.3f}] err {abs(est.value - truth):.3f}{miss}"
    )


def demo_report(r: DemoResult, args: argparse.Namespace) -> str:
    """The table printed by ``monitor offline-demo``."""
    n = len(r.pool)
    lines = [
        f"offline audit demo (seed {args.seed}): pool of {n} items, {r.positives} true positives "
        f"({100 * r.positives / n:.1f}%), {int(r.pool.pred.sum())} predicted positive",
        f"budget {args.budget} labels; active plan for {measure_name(args.alpha)} with "
        f"defensive lambda {args.defensive:g}; 95% intervals",
        "",
        f"{'measure':<10} {'truth':>6}   {'active: ' + str(r.active_labels) + ' labels':<40} "
        f"uniform: {r.uniform_labels} labels",
    ]
    for a, name in ((args.alpha, measure_name(args.alpha)), (1.0, "precision"), (0.0, "recall")):
        t = r.truth[a]
        lines.append(
            f"{name:<10} {t:>6.3f}   {_demo_cell(r.active[a], t):<40} {_demo_cell(r.uniform[a], t)}"
        )
    lines.append("(a 95% interval misses the truth about one run in twenty; try other --seed)")
    fa, fu = r.active[args.alpha], r.uniform[args.alpha]
    if fa.defined and fu.defined and fa.upper > fa.lower:
        ratio = (fu.upper - fu.lower) / (fa.upper - fa.lower)
        lines.append(
            f"\nthe {measure_name(args.alpha)} interval of active sampling is {ratio:.1f} times "
            "narrower than uniform's with the same budget"
        )
    return "\n".join(lines)


def _write_pool(path: Path, pool: Pool) -> None:
    try:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["id", "score"])
            writer.writerows(zip(pool.ids.tolist(), map(repr, pool.score.tolist()), strict=True))
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputFileError(msg) from exc


def _cmd_demo(args: argparse.Namespace) -> int:
    r = run_demo(
        seed=args.seed,
        budget=args.budget,
        positive_rate=args.positive_rate,
        pool_size=args.pool_size,
        alpha=args.alpha,
        defensive=args.defensive,
    )
    print(demo_report(r, args))
    if args.out_dir is not None:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        _write_pool(out / "pool.csv", r.pool)
        unlabelled = replace(r.plan, labelled=np.zeros(len(r.plan), np.bool_))
        write_plan(out / "plan.csv", unlabelled)
        write_plan(out / "plan_labelled.csv", r.plan)
        print(f"\nwrote {out}/pool.csv, plan.csv and plan_labelled.csv; try:")
        print(f"  monitor estimate --labels {out}/plan_labelled.csv")
    return 0


def unit_interval(text: str) -> float:
    """Argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        msg = f"expected a number in [0, 1], got '{text}'"
        raise argparse.ArgumentTypeError(msg)
    return value


def open_unit_interval(text: str) -> float:
    """Argparse type: a number strictly between 0 and 1 (a confidence level, a rate)."""
    value = unit_interval(text)
    if value in (0.0, 1.0):
        msg = f"expected a number strictly between 0 and 1, got '{text}'"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive_int(text: str) -> int:
    """Argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a whole number >= 1, got '{text}'"
        raise argparse.ArgumentTypeError(msg)
    return value


def register(sub: Any) -> None:
    """Add ``plan``, ``estimate`` and ``offline-demo`` to the ``monitor`` command line."""
    p = sub.add_parser(
        "plan",
        help="choose the items of a pool to audit (active estimation)",
        description="Choose which items of a pool to send for audit so that F_alpha is "
        "estimated with the least variance (Sawade et al., Algorithm 1).",
    )
    p.add_argument("--pool", required=True, help="pool CSV with columns id,score[,pred]")
    p.add_argument("--budget", required=True, type=positive_int, help="number of labels to buy")
    p.add_argument(
        "--alpha",
        required=True,
        type=unit_interval,
        help="F_alpha to optimise for: 0 recall, 0.5 F1, 1 precision",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the selection (default 0)")
    p.add_argument(
        "--defensive",
        type=unit_interval,
        default=DEFAULT_DEFENSIVE,
        help=f"lambda of the mix with uniform sampling (default {DEFAULT_DEFENSIVE})",
    )
    p.add_argument(
        "--threshold",
        type=unit_interval,
        default=0.5,
        help="pred = score >= threshold when the pool has no pred column (default 0.5)",
    )
    p.add_argument("--design", choices=DESIGNS, default="poisson", help="default poisson")
    p.add_argument(
        "--labelled",
        nargs="+",
        default=[],
        metavar="DONE.csv",
        help="labelled plans of earlier rounds: plan the next round (not chosen again, "
        "q* at the scores recalibrated on their labels)",
    )
    p.add_argument("--out", required=True, help="plan CSV to write")
    p.set_defaults(func=_cmd_plan)

    e = sub.add_parser(
        "estimate",
        help="estimate F_alpha, precision and recall from a labelled plan",
        description="Estimate F_alpha, precision and recall with confidence intervals from "
        "the labelled plan (empty labels are pending).",
    )
    e.add_argument(
        "--labels",
        required=True,
        nargs="+",
        metavar="PLAN.csv",
        help="the plan CSV with its label column filled; for rounds, every round's plan",
    )
    e.add_argument(
        "--alpha", type=unit_interval, default=None, help="default: the alpha of the plan"
    )
    e.add_argument(
        "--level", type=open_unit_interval, default=0.95, help="confidence level (default 0.95)"
    )
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.set_defaults(func=_cmd_estimate)
    d = sub.add_parser(
        "offline-demo",
        help="plan, label from a simulated truth and estimate: active against uniform sampling",
        description="Simulate a skewed pool with known truth, plan an active audit, answer it "
        "from the truth and print the estimates beside the truth and beside uniform sampling "
        "with the same budget.",
    )
    d.add_argument("--seed", type=int, default=0, help="seed of the pool and the plan")
    d.add_argument("--budget", type=positive_int, default=200, help="labels (default 200)")
    d.add_argument(
        "--positive-rate",
        type=open_unit_interval,
        default=0.02,
        help="share of true positives in the pool (default 0.02)",
    )
    d.add_argument(
        "--pool-size", type=positive_int, default=20_000, help="pool size (default 20000)"
    )
    d.add_argument(
        "--alpha", type=unit_interval, default=0.5, help="F_alpha to plan for (default 0.5: F1)"
    )
    d.add_argument(
        "--defensive",
        type=unit_interval,
        default=DEFAULT_DEFENSIVE,
        help=f"lambda of the mix with uniform (default {DEFAULT_DEFENSIVE})",
    )
    d.add_argument(
        "--out-dir",
        default=None,
        help="also write pool.csv, plan.csv and plan_labelled.csv there (for monitor estimate)",
    )
    d.set_defaults(func=_cmd_demo)
