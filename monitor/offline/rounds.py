"""Offline audits in rounds: plan the next batch from the labels so far, estimate from all rounds.

Round r + 1 (``monitor plan --labelled A.csv [B.csv ...]``, Poisson design):

* the labelled rows of the earlier plans are **known**: they are never chosen again;
* the calibration map is fitted on them (Platt, or beta where it fits better; each label counted
  once, ``monitor.stats.design.recalibrate``), and q* (seed 000, Cor. 2) is evaluated at the
  recalibrated p_hat over the pool, with G from the pool's recalibrated expected counts and the
  defensive share of ``monitor.stats.selection.defensive_share`` (``monitor.stats.design``);
* pi = min(1, kappa q) over the rest of the pool, kappa solved for the budget.

Estimate (``monitor estimate --labels A.csv B.csv ...``): the mixture of the rounds'
Horvitz-Thompson sums, each over the items not labelled before it and the earlier labels counted
exactly, every round after the first weighted by its expected number of labels and the first
(drawn at the raw scores, before any label) counted exactly
(``monitor.stats.design.rounds_mixture``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError
from monitor.offline.poolfile import Plan, Pool, ids_digest, sidecar_path, whole_number
from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.design import recalibrate, recalibrated_weights, rounds_mixture
from monitor.stats.response import response_sample
from monitor.stats.sample import LabeledSample


@dataclass(frozen=True)
class Known:
    """The labelled rows of earlier rounds.

    Their ids, their sample (v as drawn), the last round and the ``threshold`` header they share
    ("" when there is no earlier round).
    """

    ids: npt.NDArray[np.str_]
    sample: LabeledSample
    last_round: int
    threshold: str = ""


def answered_sample(plan: Plan) -> LabeledSample:
    """The labelled rows of a Poisson plan, its pending rows taken as a second phase.

    Within each answer class (prediction x band of pi, pooled when sparse:
    ``monitor.stats.response``) the labelled rows stand for the pending ones: a label carries
    ``1 / (pi r_c)`` with finite-population correction ``1 - pi r_c``, r_c the class's labelled
    share of its weight. Leaving the pending rows out instead made a plan whose predicted
    positives all had pi = 1 a census of its labelled half (a point interval) and, in rounds,
    pulled the estimate toward the earlier rounds' exact labels. With every row labelled this is
    ``LabeledSample.poisson`` of them. It assumes a row is not pending because of its label.
    """
    label = np.where(plan.labelled, plan.label, -1)
    return response_sample(plan.score, plan.pred, label, plan.prob, np.zeros(len(plan), np.int64))


def require_sidecar(plan: Plan, path: str) -> None:
    """Refuse a plan of an audit in rounds without its sidecar (its round, budget and pool)."""
    if "pool_size" not in plan.meta:
        msg = (
            f"{path}: no sidecar {sidecar_path(path)} beside it (monitor plan writes one next "
            "to every plan); rounds need each plan's round, budget and pool: copy the plan's "
            "sidecar beside the file, named after it"
        )
        raise InputFileError(msg)


def plan_round(plan: Plan, path: str) -> int:
    """The round a plan belongs to (``round`` in its header; 1 when absent)."""
    text = plan.meta.get("round", "1")
    value = whole_number(text)  # "2", or 2.0 as a JSON tool may write it
    if value is None or value < 1:
        msg = f"{path}: plan meta 'round={text}': expected a whole number >= 1"
        raise InputFileError(msg)
    return value


def planned_known(plan: Plan, path: str) -> int:
    """How many labelled items of earlier rounds a plan was planned from (``known_labels``; 0)."""
    text = plan.meta.get("known_labels", "0")
    value = whole_number(text)  # "43", or 43.0 as a JSON tool may write it
    if value is None:
        msg = f"{path}: plan meta 'known_labels={text}': expected a whole number >= 0"
        raise InputFileError(msg)
    return value


def known_labels(plans: Sequence[tuple[str, Plan]]) -> Known:
    """Collect the labelled rows of earlier Poisson plans (each id once)."""
    ids: list[npt.NDArray[np.str_]] = []
    samples: list[LabeledSample] = []
    seen: set[str] = set()
    last = 0
    for path, plan in plans:
        require_sidecar(plan, path)
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
    return Known(all_ids, LabeledSample.concat(samples), last, shared_threshold(plans))


def shared_threshold(plans: Sequence[tuple[str, Plan]]) -> str:
    """The ``threshold`` header of every plan ("" for none); refused when two differ."""
    seen: dict[str, str] = {}
    for path, plan in plans:
        seen.setdefault(plan.meta.get("threshold", ""), path)
    if len(seen) > 1:
        (a, pa), (b, pb) = list(seen.items())[:2]
        msg = (
            f"{pa}, {pb}: planned with threshold {a} and {b}; every round of an audit needs "
            "the same predictions: plan them with the same --threshold (or a pool with a pred "
            "column)"
        )
        raise InputFileError(msg)
    return next(iter(seen), "")


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


def _listed(numbers: Sequence[int]) -> str:
    return ", ".join(map(str, numbers))


def _planned_labels(plan: Plan, path: str) -> float:
    """The round's expected number of labels (``expected_labels``, else ``budget``, header)."""
    text = plan.meta.get("expected_labels", plan.meta.get("budget", ""))
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0.0:
        msg = (
            f"{path}: plan meta 'expected_labels' or 'budget' missing or not a number > 0; the "
            f"rounds' estimate weights each round by it: copy {path}'s sidecar beside it"
        )
        raise InputFileError(msg)
    return value


def _planned_from(plan: Plan, path: str, known: Known | None) -> tuple[str, bool]:
    """Why ``plan`` was not planned from exactly ``known`` ("" when it was), and whether late.

    Late: the files given hold more labels than it was planned from (a label added since).
    """
    want = planned_known(plan, path)
    have = 0 if known is None else len(known.ids)
    if have == want:
        digest = plan.meta.get("known_ids_sha256")  # absent in plans of earlier versions
        ids = known.ids if known is not None else np.array([], dtype=np.str_)
        if digest is None or digest == ids_digest(ids):
            return "", False
        why = (
            f"{path}: planned from {want} labelled items of earlier rounds, and the other files "
            "given hold as many but not the same items (a round of another audit, or a label "
            "moved to another item since)"
        )
        return why, False
    msg = (
        f"{path}: planned with {want} labelled items of earlier rounds, but the other files "
        f"given hold {have}"
    )
    if have > want:
        msg += (
            ", with the labels they held then (a label added to an earlier round after this "
            "round was planned)"
        )
    elif known is not None:
        msg += " (a label cleared from an earlier round since it was planned, or a round left out)"
    return msg, have > want


@dataclass(frozen=True)
class RoundShare:
    """How one round's file enters the estimate: its labels and its share of the mixture.

    Share 0: its labels are counted exactly, for themselves.
    """

    path: str
    round: int
    labels: int
    share: float


@dataclass(frozen=True)
class Rounds:
    """Every round of an audit, ready to estimate.

    The mixture's sample, the latest plan and its file, the labels of the rounds before it (on
    which the map that chose it was fitted), each round's share (in round order) and the warnings.
    """

    sample: LabeledSample
    latest: Plan
    path: str
    earlier: Known
    shares: list[RoundShare]
    warnings: list[str]


@dataclass(frozen=True)
class _Round:
    """One round of an audit, checked.

    Its number, file and plan, the labels of the rounds before it and why it was not planned
    from exactly those ("" when it was).
    """

    number: int
    path: str
    plan: Plan
    known: Known | None
    why: str


def _checked_rounds(plans: Sequence[tuple[str, Plan]], late_label_ok: bool) -> list[_Round]:
    """The plans in round order, each checked against the rounds before it.

    Each needs its sidecar, all one threshold, one plan per round, no item labelled in a round
    before the one that planned it. The latest must have been planned from exactly the labels
    of the others (``known_labels``, and ``known_ids_sha256`` where recorded): else a round is
    missing or belongs to another audit, refused with the reason. With ``late_label_ok`` (a next
    round planned from them) a label added to an earlier round since is accepted: the next round
    is planned from it, and the estimate counts the latest given round exactly.
    """
    for pa, p in plans:
        require_sidecar(p, pa)
    shared_threshold(plans)
    ordered = sorted(((plan_round(p, pa), pa, p) for pa, p in plans), key=lambda t: t[0])
    numbers = [r for r, _, _ in ordered]
    if len(set(numbers)) != len(numbers):
        twice = next(r for r in numbers if numbers.count(r) > 1)
        names = ", ".join(pa for r, pa, _ in ordered if r == twice)
        msg = f"{names}: two plans of the same round {twice}; give one plan per round"
        raise InputFileError(msg)
    out: list[_Round] = []
    for i, (r, pa, p) in enumerate(ordered):
        known = known_labels([(q, o) for _, q, o in ordered[:i]]) if i else None
        why, late = _planned_from(p, pa, known)
        if why and i == len(ordered) - 1 and not (late and late_label_ok):
            hint = "; pass exactly the files it was planned from"
            if numbers != list(range(1, len(numbers) + 1)):
                absent = sorted(set(range(1, numbers[-1])) - set(numbers))
                hint += f" (rounds given: {_listed(numbers)}; missing: {_listed(absent)})"
            if late:
                again = np.intersect1d(p.ids[p.labelled], known.ids if known else [])
                hint += (
                    f" (clear the late label of item '{again[0]}': this round chose it again, "
                    "as it was pending then)"
                    if again.size
                    else " (clear the late label, or plan a further round from all the labels)"
                )
            raise InputFileError(why + hint)
        if known is not None:
            overlap = np.isin(p.ids, known.ids)
            if overlap.any():
                msg = f"{pa}: item '{p.ids[overlap][0]}' was labelled in an earlier round"
                raise InputFileError(msg)
        out.append(_Round(r, pa, p, known, why))
    return out


def check_earlier_rounds(plans: Sequence[tuple[str, Plan]]) -> None:
    """Refuse labelled rounds to plan the next one from that ``estimate`` would refuse.

    The checks of ``rounds_sample`` (a round missing, one of another audit, ...), with a label
    added to an earlier round since accepted: the next round is planned from every label.
    """
    _checked_rounds(plans, late_label_ok=True)


def rounds_sample(plans: Sequence[tuple[str, Plan]]) -> Rounds:
    """The sample of all rounds (``rounds_mixture``), with the latest plan and each round's share.

    One plan per round. The latest must have been planned with exactly the labelled rows of the
    others (its ``known_labels`` header, and ``known_ids_sha256`` where recorded), else the
    estimate would not be unbiased. An earlier round after the first that was not (a label added
    to a round before it afterwards) cannot estimate the rest of the pool: it is counted exactly,
    with a warning.
    """
    rounds = _checked_rounds(plans, late_label_ok=False)
    latest = rounds[-1]
    if not latest.plan.labelled.any():
        msg = (
            f"{latest.path}: round {latest.number} has no label yet, so it cannot estimate the "
            "rest of the pool: label some of its rows, or estimate from the earlier rounds alone "
            "(leave this file out)"
        )
        raise InputFileError(msg)
    samples: list[LabeledSample] = []
    shares: list[float] = []
    warnings: list[str] = []
    for i, rnd in enumerate(rounds):
        if rnd.why:
            warnings.append(
                f"{rnd.why}: its labels are counted exactly, not used to estimate the rest"
            )
        samples.append(answered_sample(rnd.plan))
        first = i == 0 and len(rounds) > 1
        shares.append(0.0 if first or rnd.why else _planned_labels(rnd.plan, rnd.path))
    total = sum(shares)
    parts = [
        RoundShare(rnd.path, rnd.number, len(x), w / total)
        for rnd, x, w in zip(rounds, samples, shares, strict=True)
    ]
    earlier = latest.known if latest.known is not None else known_labels([])
    return Rounds(
        rounds_mixture(samples, shares), latest.plan, latest.path, earlier, parts, warnings
    )
