"""Offline audits in rounds: plan the next batch from the labels so far, estimate from all rounds.

Round r + 1 (``monitor plan --labelled A.csv [B.csv ...]``, Poisson design):

* the labelled rows of the earlier plans are **known**: they are never chosen again;
* the calibration map is fitted on them (Platt, or beta where it fits better; each label counted
  once, ``monitor.stats.design.recalibrate``), and q* (seed 000, Cor. 2) is evaluated at the
  recalibrated p_hat over the pool, with G from the pool's recalibrated expected counts and the
  defensive share of ``monitor.stats.selection.defensive_share`` (``monitor.stats.design``);
* pi = min(1, kappa q) over the rest of the pool, kappa solved for the budget.

Estimate (``monitor estimate --labels A.csv B.csv``): the known rows counted exactly and the
latest round by Horvitz-Thompson over the rest of the pool
(``monitor.stats.design.known_and_latest``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError
from monitor.offline.poolfile import Plan, Pool
from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.design import known_and_latest, recalibrate, recalibrated_weights
from monitor.stats.sample import LabeledSample


@dataclass(frozen=True)
class Known:
    """The labelled rows of earlier rounds: ids, their sample (v as drawn) and the last round."""

    ids: npt.NDArray[np.str_]
    sample: LabeledSample
    last_round: int


def plan_round(plan: Plan, path: str) -> int:
    """The round a plan belongs to (``round`` in its header; 1 when absent)."""
    text = plan.meta.get("round", "1")
    if not text.isdigit() or int(text) < 1:
        msg = f"{path}: header 'round={text}': expected a whole number >= 1"
        raise InputFileError(msg)
    return int(text)


def known_labels(plans: Sequence[tuple[str, Plan]]) -> Known:
    """Collect the labelled rows of earlier Poisson plans (each id once)."""
    ids: list[npt.NDArray[np.str_]] = []
    samples: list[LabeledSample] = []
    seen: set[str] = set()
    last = 0
    for path, plan in plans:
        if plan.design != "poisson":
            msg = f"{path}: rounds need Poisson plans, this one is {plan.design}"
            raise InputFileError(msg)
        lab = plan.labelled
        for rid in plan.ids[lab].tolist():
            if rid in seen:
                msg = f"{path}: item '{rid}' is labelled in two of the given plans"
                raise InputFileError(msg)
            seen.add(rid)
        ids.append(plan.ids[lab])
        samples.append(
            LabeledSample.poisson(plan.score[lab], plan.pred[lab], plan.label[lab], plan.prob[lab])
        )
        last = max(last, plan_round(plan, path))
    all_ids = np.concatenate(ids) if ids else np.array([], dtype=np.str_)
    return Known(all_ids, LabeledSample.concat(samples), last)


def next_round_weights(
    pool: Pool, alpha: float, defensive: float, known: Known, pool_path: str
) -> tuple[npt.NDArray[np.float64], CalibrationMap, float]:
    """Selection weights over the pool for the next round (0 for known items), map and lam."""
    in_pool = np.isin(known.ids, pool.ids)
    if not in_pool.all():
        rid = str(known.ids[~in_pool][0])
        msg = f"{pool_path}: labelled item '{rid}' of an earlier round is not in the pool"
        raise InputFileError(msg)
    recal = recalibrate(known.sample)
    q = recalibrated_weights(pool.score, pool.pred, alpha, recal, defensive)
    q = np.where(np.isin(pool.ids, known.ids), 0.0, q)
    return q, recal.cal_map, recal.defensive(defensive)


def split_rounds(plans: Sequence[tuple[str, Plan]]) -> tuple[str, Plan, Known]:
    """The latest plan (highest ``round``, exactly one), its path and the earlier rounds' labels."""
    rounds = [(plan_round(p, path), path, p) for path, p in plans]
    top = max(r for r, _, _ in rounds)
    latest = [(path, p) for r, path, p in rounds if r == top]
    if len(latest) != 1:
        names = ", ".join(path for path, _ in latest)
        msg = f"{names}: two plans of the same round {top}; give one plan per round"
        raise InputFileError(msg)
    path, plan = latest[0]
    return path, plan, known_labels([(pa, p) for r, pa, p in rounds if r != top])


def rounds_sample(plans: Sequence[tuple[str, Plan]]) -> tuple[LabeledSample, Plan, str]:
    """The sample of all rounds: earlier labelled rows known (v = 1, fpc = 0), the latest HT.

    The latest plan (highest ``round``) must have been planned with exactly the labelled rows
    of the others (its ``known_labels`` header), else the estimate would not be unbiased.
    """
    path, plan, known = split_rounds(plans)
    want = plan.meta.get("known_labels", "0")
    have = len(known.ids)
    if str(have) != want:
        msg = (
            f"{path}: planned with {want} labelled items of earlier rounds, but the other files "
            f"given hold {have}; pass exactly the files it was planned from"
        )
        if want.isdigit() and have > int(want):
            msg += (
                ", with the labels they held then (a label added to an earlier round after this "
                "round was planned cannot count: clear it, or plan a further round from all the "
                "labels)"
            )
        raise InputFileError(msg)
    overlap = np.isin(plan.ids, known.ids)
    if overlap.any():
        msg = f"{path}: item '{plan.ids[overlap][0]}' was labelled in an earlier round"
        raise InputFileError(msg)
    lab = plan.labelled
    now = LabeledSample.poisson(plan.score[lab], plan.pred[lab], plan.label[lab], plan.prob[lab])
    return known_and_latest(known.sample, now), plan, path
