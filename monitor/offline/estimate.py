"""The estimate of a labelled offline plan (``monitor estimate``): ratio, and model-assisted.

``estimate_plan`` returns G_hat = sum(v l w) / sum(v w) (seed 000, Eq. 4, v = 1/pi or 1/(n q))
for F_alpha, precision and recall, with confidence intervals (``monitor.stats.interval``), the
model likelihood (seed 002, Sec. 4.1), the effective sample size and the confusion counts of the
pool, post-stratified to the known stratum sizes N1 (``pool_predicted_positives``) and
N0 = pool_size - N1: tp = N1 sum_{f=1}(v y) / sum_{f=1}(v), fn = N0 sum_{f=0}(v y) /
sum_{f=0}(v). With the pool given, the model-assisted (GREG) estimate of
``monitor.offline.assisted`` is reported beside it (``estimate_json``, ``estimate_table``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from monitor.errors import InputFileError
from monitor.offline.assisted import Assisted
from monitor.offline.plan import measure_name
from monitor.offline.poolfile import Plan, Pool, sidecar_path, whole_number
from monitor.offline.rounds import RoundShare, answered_sample
from monitor.stats.estimate import Confusion, Estimate
from monitor.stats.falpha import intrinsic_falpha, intrinsic_falpha_se
from monitor.stats.measures import Measures, measure_all
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import DISAGREE_ERROR, Widening, scores_disagree


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
    assisted: Assisted | None = None
    scores_disagree: bool = False  # the ratio's F_alpha and recall hold the score-type bounds
    rounds: list[RoundShare] | None = None  # how each round's file enters (audits in rounds)


def plan_sample(plan: Plan) -> LabeledSample:
    """The labelled part of a plan as a sample (one row per draw for with-replacement).

    Poisson: pending rows are a second phase of sampling (``rounds.answered_sample``). With
    replacement every draw is already weighted as one of n (fpc 1): the labelled draws are a
    random subsample of them when a row is not pending because of its label; a prediction whose
    rows are all pending has no labelled draw to stand for them (``unanswered_strata``).
    """
    lab = plan.labelled
    if plan.design == "poisson":
        return answered_sample(plan)
    rep = plan.draws[lab]
    sample = LabeledSample.with_replacement(
        np.repeat(plan.score[lab], rep),
        np.repeat(plan.pred[lab], rep),
        np.repeat(plan.label[lab], rep),
        np.repeat(plan.prob[lab], rep),
    )
    silent = frozenset(np.setdiff1d(plan.pred[~lab], plan.pred[lab]).tolist())
    return replace(sample, unanswered_strata=silent)


def _meta_int(plan: Plan, key: str, path: str) -> int | None:
    text = plan.meta.get(key)
    if text is None:
        return None
    value = whole_number(text)
    if value is None:
        msg = f"{path}: plan meta '{key}={text}': expected a whole number >= 0"
        raise InputFileError(msg)
    return value


def plan_alpha(plan: Plan, override: float | None, path: str) -> float:
    """The alpha to estimate: ``--alpha`` if given, else the one recorded in the plan."""
    if override is not None:
        return override
    text = plan.meta.get("alpha")
    if text is None:
        msg = (
            f"{path}: no alpha recorded for this plan (no {sidecar_path(path).name} beside it); "
            "pass --alpha"
        )
        raise InputFileError(msg)
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not 0.0 <= alpha <= 1.0:
        msg = f"{path}: plan meta 'alpha={text}': expected a number in [0, 1]"
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
    if size is not None:
        what = ""
        if size < len(plan):
            what = f"the plan's {len(plan)} rows"
        elif n_pos is not None and n_pos > size:
            what = f"pool_predicted_positives={n_pos}"
        if what:
            msg = (
                f"{path}: plan meta 'pool_size={size}' cannot hold {what}; the sidecar "
                f"{sidecar_path(path).name} was edited or is another plan's: put back the one "
                "monitor plan wrote"
            )
            raise InputFileError(msg)
    confusion = None
    if n_pos is not None and size is not None:
        confusion = post_stratified_confusion(sample, n_pos, size - n_pos)
    warnings = []
    pending = int(np.count_nonzero(~plan.labelled))
    if pending:
        within = (
            "within each prediction and band of selection probability"
            if plan.design == "poisson"
            else "as a random subsample of the draws"
        )
        why = "its label" if plan.design == "poisson" else "its label or its prediction"
        warnings.append(
            f"{pending} of {len(plan)} plan items are still pending; the labelled ones stand "
            f"for them {within}, which assumes an item is not left pending because of {why}"
        )
    for f in sorted(sample.unanswered_strata, reverse=True):
        which, needs = (
            ("positive", "every measure is")
            if f
            else ("negative", "recall and F_alpha (alpha < 1) are")
        )
        warnings.append(
            f"no predicted-{which} row is labelled yet, so none stands for the pending ones: "
            f"{needs} undefined until one is"
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
        # Poisson: one draw per label, of every round; with replacement: one plan, its draws
        "draws": result.labels
        if plan.design == "poisson"
        else int(plan.draws[plan.labelled].sum()),
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
    out["ratio"] = {
        "estimator": "Horvitz-Thompson ratio (Hajek), from the labels alone",
        **_estimate_fields(m.f, m.precision, m.recall),
        "scores_disagree": result.scores_disagree,
    }
    a = result.assisted
    out["model_assisted"] = (
        None
        if a is None
        else {
            "estimator": "GREG: regression on the recalibrated score per prediction stratum, "
            "pool totals from --pool",
            "calibration_map": {
                "family": a.cal_map.family,
                **a.cal_map.params(),
                "labels": a.cal_map.n_labels,
            },
            **_estimate_fields(a.f, a.precision, a.recall),
            "used": dict(zip(("estimate", "precision", "recall"), a.used, strict=True)),
            "ratio_kept_because": a.reason or None,
            "scores_disagree": a.scores_disagree,
        }
    )
    out["rounds"] = (
        None
        if result.rounds is None
        else [
            {"file": r.path, "round": r.round, "labels": r.labels, "share": r.share}
            for r in result.rounds
        ]
    )
    out["warnings"] = result.warnings
    return out


def _estimate_fields(f: Estimate, precision: Estimate, recall: Estimate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "estimate": _num(f.value),
        "ci_low": _num(f.lower),
        "ci_high": _num(f.upper),
        "se": _num(f.se),
    }
    for name, est in (("precision", precision), ("recall", recall)):
        out[name] = _num(est.value)
        out[f"{name}_ci_low"] = _num(est.lower)
        out[f"{name}_ci_high"] = _num(est.upper)
    return out


def _interval(est: Estimate) -> str:
    if not est.defined:
        return "undefined (no label carries weight yet)"
    return f"{est.value:.4f}  [{est.lower:.4f}, {est.upper:.4f}]"


def estimate_table(result: PlanEstimate, plan: Plan, path: str) -> str:
    """The human-readable report of ``monitor estimate``."""
    m = result.measures
    pct = f"{100 * result.level:g}%"
    fname = f"{measure_name(result.alpha)} (alpha={result.alpha:g})"
    lines = [
        f"{path}: {plan.design} design, {result.labels} labels used, {result.pending} pending",
        f"ratio (Horvitz-Thompson) estimate from the labels alone, {pct} interval:",
    ]
    for name, est in ((fname, m.f), ("precision", m.precision), ("recall", m.recall)):
        lines.append(f"  {name:<16} {_interval(est)}")
    a = result.assisted
    if a is not None:
        how = (
            "raw scores"
            if a.cal_map.is_identity
            else f"scores recalibrated ({a.cal_map.family} map) on {a.cal_map.n_labels} "
            "earlier labels"
        )
        lines.append(f"model-assisted (GREG) estimate on the pool's {how}, {pct} interval:")
        for name, est, used in zip(
            (fname, "precision", "recall"), (a.f, a.precision, a.recall), a.used, strict=True
        ):
            lines.append(f"  {name:<16} {_interval(est)}{'' if used else '  (ratio kept)'}")
        if a.reason:
            lines.append(f"  ratio kept: {a.reason}")
    lines.append(f"model likelihood {m.likelihood:.4f}, effective sample size {m.ess:.1f}")
    for r in result.rounds or []:
        how = f"{r.share:.3f} of the estimate" if r.share else "counted exactly"
        lines.append(f"round {r.round}: {r.path}, {r.labels} labels, {how}")
    c = result.confusion
    if c is not None:
        lines.append(
            f"confusion over the pool: tp {c.tp:.1f}  fp {c.fp:.1f}  fn {c.fn:.1f}  tn {c.tn:.1f}"
        )
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def scores_checked(
    result: PlanEstimate, sample: LabeledSample, pool: Pool, assisted: Assisted
) -> tuple[PlanEstimate, Assisted]:
    """Both estimates with the score-type bounds where their labels reject the pool's scores.

    As the daemon's windows (``monitor.stats.score_interval``): the ratio estimate and the
    model-assisted one are each tested against the label-free F of the pool's raw scores, and
    the one whose interval excludes it gets the score-type bounds of F_alpha and recall.
    """
    intrinsic = intrinsic_falpha(pool.score, pool.pred, result.alpha)
    intrinsic_se = intrinsic_falpha_se(pool.score, pool.pred, result.alpha)
    m = result.measures
    ratio_off = scores_disagree(m.f, intrinsic, intrinsic_se)
    assisted_off = scores_disagree(assisted.f, intrinsic, intrinsic_se)
    if not (ratio_off or assisted_off):
        return result, assisted
    wide = Widening.of(sample, result.alpha, m.f, m.recall)
    if ratio_off:
        f, recall = wide.apply(m.f, m.recall)
        result = replace(result, measures=replace(m, f=f, recall=recall), scores_disagree=True)
    if assisted_off:
        f, recall = wide.apply(assisted.f, assisted.recall)
        assisted = replace(assisted, f=f, recall=recall, scores_disagree=True)
    note = (
        f"the labels reject the pool's scores (their label-free {measure_name(result.alpha)} "
        f"{intrinsic:.4f} is outside the interval at {DISAGREE_ERROR:.0%}): the intervals "
        "of recall and of F_alpha with alpha < 1 also allow for false negatives the design "
        "missed"
    )
    return replace(result, warnings=[*result.warnings, note]), assisted
