"""Coverage of the offline ratio and model-assisted (``estimate --pool``) intervals, by simulation.

One pool of 10,000 items at 5% positives (``calibrated_pool``, seed 11), calibrated or
over-confident (logits x3); REPS fixed-seed repetitions of the product's offline designs:

* one round: ``make_plan`` with 200 labels (q* at the raw scores, defensive 0.1); the
  model-assisted estimate uses the raw scores (no earlier labels to fit a map on);
* three rounds: 20 labels with defensive 0.5, then 30 and 150 planned with ``--labelled`` (q* at
  the scores recalibrated on the rounds before); the ratio estimate is the mixture of rounds 2 and
  3 (``design.rounds_mixture``), the model-assisted one uses the map fitted on rounds 1 and 2,
  whose round-2 labels the mixture also uses to estimate the rest of the pool.

Both estimates as ``monitor estimate --pool`` reports them (``scores_checked``: the score-type
bounds where the labels reject the pool's scores). Asserted for F1 and recall: the 95% intervals
of both estimators cover the pool's true value in at least 90% of the repetitions (issue 14's
goal), and the model-assisted estimate's mean absolute error is no larger than the ratio
estimate's. One round on the over-confident pool (q* from raw scores) covers 0.993-1.000 (400
repetitions); before those bounds it covered 0.875-0.89 model-assisted and 0.895-0.91 ratio (200
repetitions), a known miss the test left out.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.offline.assisted import assisted_estimate
from monitor.offline.estimate import estimate_plan, plan_sample, scores_checked
from monitor.offline.plan import make_plan
from monitor.offline.poolfile import Plan, Pool
from monitor.offline.rounds import known_labels, rounds_sample
from monitor.sim.simulate import calibrated_pool
from monitor.stats.calibration import IDENTITY
from monitor.stats.design import recalibrate
from monitor.stats.falpha import falpha_exact

REPS = 400
LEVEL = 0.95


def _answer(plan: Plan, truth: dict[str, int]) -> Plan:
    label = np.array([truth[i] for i in plan.ids.tolist()], dtype=np.int8)
    return Plan(
        plan.design,
        plan.ids,
        plan.score,
        plan.pred,
        plan.prob,
        plan.weight,
        plan.draws,
        label,
        np.ones(len(plan), dtype=np.bool_),
        plan.meta,
    )


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.5, 0.0])
@pytest.mark.parametrize(
    ("rounds", "overconfidence"), [(1, 1.0), (1, 3.0), (3, 1.0), (3, 3.0)], ids=str
)
def test_offline_intervals_cover(rounds: int, overconfidence: float, alpha: float) -> None:
    score, y = calibrated_pool(10_000, 0.05, np.random.default_rng(11), overconfidence)
    ids = np.array([f"i{k}" for k in range(score.size)], dtype=np.str_)
    pool = Pool(ids, score, (score >= 0.5).astype(np.int8), False)
    truth = dict(zip(ids.tolist(), y.tolist(), strict=True))
    true_value = falpha_exact(pool.pred, y, alpha)
    covered = {"ratio": 0, "assisted": 0}
    error: dict[str, list[float]] = {"ratio": [], "assisted": []}
    for seed in range(REPS):
        if rounds > 1:
            r1 = _answer(make_plan(pool, alpha=alpha, budget=20, seed=seed, defensive=0.5), truth)
            done = [("r1", r1)]
            for r, budget in ((2, 30), (3, 150)):
                known = known_labels(done)
                nxt = make_plan(pool, alpha=alpha, budget=budget, seed=1000 * r + seed, known=known)
                done.append((f"r{r}", _answer(nxt, truth)))
            audit = rounds_sample(done)
            sample, plan, path = audit.sample, audit.latest, audit.path
            cal_map = recalibrate(known.sample).cal_map
        else:
            plan = _answer(make_plan(pool, alpha=alpha, budget=200, seed=seed), truth)
            sample, path, cal_map = plan_sample(plan), "plan", IDENTITY
        result = estimate_plan(plan, path, None, LEVEL, sample)
        m = result.measures
        both = assisted_estimate(sample, pool, alpha, LEVEL, (m.f, m.precision, m.recall), cal_map)
        result, both = scores_checked(result, sample, pool, both)  # as ``estimate --pool``
        for name, est in (("ratio", result.measures.f), ("assisted", both.f)):
            covered[name] += est.lower <= true_value <= est.upper
            error[name].append(abs(est.value - true_value))
    coverage = {k: v / REPS for k, v in covered.items()}
    mae = {k: float(np.mean(v)) for k, v in error.items()}
    print(f"rounds {rounds}, x{overconfidence:g}, alpha {alpha}: coverage {coverage}, MAE {mae}")
    assert min(coverage.values()) >= 0.90, (coverage, mae)
    assert mae["assisted"] <= mae["ratio"], (coverage, mae)
