"""Planning an offline audit of a pool (``monitor plan``; the command line is ``offline.cli``).

The pool-based mode of seed 000 (Algorithm 1), useful on its own for a one-off evaluation:
``make_plan`` computes the variance-optimal selection weights for F_alpha from the scores alone
(seed 000, Corollary 2, with G the intrinsic F of the pool, Sec. 2.2), mixes them with uniform
(``--defensive`` lambda: q = (1 - lambda) q*/mean(q*) + lambda) and selects items:

* ``poisson`` (default): pi_i = min(1, kappa q_i) with kappa solved so that sum(pi) = budget,
  item i audited iff hash_uniform(id_i, salt) < pi_i -- deterministic, so planning twice gives
  the same plan; the number of labels is random with mean ``budget``;
* ``with-replacement``: exactly ``budget`` draws with probability q_i / sum(q) (Algorithm 1),
  one plan row per distinct item with its ``draws`` count (a label counts once per draw).

The plan's ``meta`` (written to the sidecar ``PLAN.meta.json``, ``monitor.offline.poolfile``)
records what the estimate needs: design, alpha, budget, seed and salt (``plan:SEED``, and
``plan:SEED:round:R`` for round R > 1, so that no two rounds share their uniforms), defensive
lambda, threshold, ``pool_size`` and ``pool_predicted_positives`` (the known stratum sizes, see
``offline.estimate``), the intrinsic F, kappa and ``zero_probability_items`` (pool items that
could not be selected; estimates that give them weight are then biased, and ``estimate`` warns);
for a next round also ``round``, ``known_labels`` and ``known_ids_sha256`` (how many labelled
items of earlier rounds it was planned from, and the digest of their sorted ids),
``calibration_map`` (the map the round's q* was evaluated at, e.g. ``platt a=-0.2 b=0.31``) and
``defensive_used``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError
from monitor.offline.poolfile import Plan, Pool, ids_digest
from monitor.offline.rounds import Known, next_round_weights
from monitor.stats.falpha import intrinsic_falpha
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


def pool_selection_weights(
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
    q, g, active = pool_selection_weights(pool.score, pool.pred, alpha, defensive)
    extra: dict[str, str] = {}
    if known is not None:
        if design != "poisson":
            msg = "--labelled (planning a next round) needs the poisson design"
            raise InputFileError(msg)
        q, cal_map, lam = next_round_weights(pool, alpha, defensive, known, pool_path)
        threshold_meta = "pred column" if pool.pred_given else repr(threshold)
        if known.threshold not in ("", threshold_meta):
            msg = (
                f"the earlier rounds were planned with threshold {known.threshold}, this one "
                f"with {threshold_meta}: plan every round with the same --threshold (or the "
                "same pool with its pred column)"
            )
            raise InputFileError(msg)
        extra = {
            "round": str(known.last_round + 1),
            "known_labels": str(len(known.ids)),
            "known_ids_sha256": ids_digest(known.ids),
            "calibration_map": " ".join(
                [cal_map.family, *(f"{k}={v!r}" for k, v in cal_map.params().items())]
            ),
            "defensive_used": repr(lam),
        }
    # every round draws its own uniforms: with round 1's, an item round 1 skipped (u >= pi_1)
    # would be chosen again with probability (pi_2 - pi_1) / (1 - pi_1), not the pi_2 it records;
    # and every pool its own: a pool of a plan's rows (u < pi_1) planned with the same seed
    # chose an item with probability min(1, pi / pi_1), not pi (32 items for a budget of 10)
    salt = f"plan:{seed}:pool:{ids_digest(pool.ids)[:16]}"
    if known is not None:
        salt += f":round:{extra['round']}"
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
        if take.size == 0:
            msg = f"no item drawn (expected {float(pi.sum()):.3g}): raise --budget"
            raise InputFileError(msg)
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
