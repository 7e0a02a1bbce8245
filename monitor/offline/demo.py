"""``monitor offline-demo``: a simulated pool audited actively and uniformly, beside the truth."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from monitor.offline.estimate import plan_sample
from monitor.offline.plan import DEFAULT_DEFENSIVE, make_plan, measure_name
from monitor.offline.poolfile import Plan, Pool
from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import falpha_exact
from monitor.stats.measures import measure_all


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


def run_offline_demo(
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
    rows = {args.alpha: measure_name(args.alpha), 1.0: "precision", 0.0: "recall"}
    for a, name in rows.items():  # once each: alpha 1 is precision, alpha 0 recall
        t = r.truth[a]
        lines.append(
            f"{name:<10} {t:>6.3f}   {_demo_cell(r.active[a], t):<40} {_demo_cell(r.uniform[a], t)}"
        )
    lines.append("(a 95% interval misses the truth about one run in twenty; try other --seed)")
    zero = int(r.plan.meta.get("zero_probability_items", "0"))
    if zero:
        lines.append(
            f"note: {zero} pool items had no chance of selection (--defensive 0): the active "
            "estimates that give them weight (recall, where they are predicted negatives) are "
            "biased and their intervals do not cover them"
        )
    fa, fu = r.active[args.alpha], r.uniform[args.alpha]
    if fa.defined and fu.defined and fa.upper > fa.lower:
        ratio = (fu.upper - fu.lower) / (fa.upper - fa.lower)
        lines.append(
            f"\nthe {measure_name(args.alpha)} interval of active sampling is {ratio:.1f} times "
            "narrower than uniform's with the same budget"
        )
    return "\n".join(lines)
