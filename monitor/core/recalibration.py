"""The calibration map new controls take, refitted from a model's labels (DESIGN.md, round 2).

From the answered requests of the model's last ``k`` buckets (those that hold about ``FIT_LABELS`` =
300 labels at the model's budget, at most ``FIT_WINDOW_S`` = 24 h of event time, at least one
bucket: :func:`label_window_buckets`; v = 1/pi, the pi each was drawn with), fit the Platt map with
its ridge toward the identity, or the beta map where ``monitor.stats.beta_calibration.choose_map``
takes it (a likelihood-ratio test rejects the Platt form, a <= b), each label counted once
(``monitor.stats.design.recalibrate``), judge it (design-weighted likelihood and calibration error,
mistakes seen) and derive the defensive share (``monitor.stats.selection.defensive_share``), at
least ``HIDDEN_SHARE`` where the labels of the last ``FIT_WINDOW_S`` find positives among the low
scores that the map does not expect (``monitor.stats.hidden_positives``). Where a
likelihood-ratio test of the fit against the scores themselves does not reject them at
``SCORES_LEVEL``, the identity is kept, with the configured share grown by the likelihood and
calibration error alone (``monitor.stats.design``, ``scores_kept``): on a calibrated model a fitted
map's noise moved q* where nothing needed moving, and the evidence term of the share, which guards a
fitted map while few of the model's mistakes are seen, spent up to 0.4 of the budget uniformly.
Measured on the daemon path (``python -m benchmarks.efficiency --stream-daemon --reps 60 --seed
14``): calibrated 1% positives MAE 0.0822 -> 0.0693, coverage 0.907 -> 0.928; calibrated 5% 0.0580
-> 0.0553, 0.931 -> 0.943; the over-confident cells, whose labels reject the scores, within three
windows of their coverage. Offline rounds fit on 10-80 labels, too few for the test to reject an
over-confident model (measured: logits x3 at 1% positives covered 0.907 instead of 0.930), so they
fit a map whatever the test says. A fit that changes the decisions materially
(``monitor.stats.map_change``) gets the next version of its model; any other keeps the calibration
in force. Segments whose labels reject the model's map get their own maps in the same calibration
(``monitor.stats.segment_maps``). The caller makes it durable before the sampler uses it: it is
fitted from labels, whose arrival is not a function of the scored stream, so a replay must read it
back rather than fit it again (DESIGN.md, "Why it stays deterministic").

Why a window of labels, not of hours: the daemon path's tables were measured with maps fitted on
the last two buckets of 150 labels (``benchmarks.stream``); fitted on 24 h instead (all of the
10-bucket stream, ``--fit-buckets 10``, seed 14, 100 streams) the calibrated cells read the same
(1%: coverage 0.942 against 0.938, MAE 0.0680 against 0.0678) but after a drift a map fitted
mostly on labels from before it held the defensive share up for the rest of the stream: the
drifted cells' MAE rose 17-46% (x3 1% 0.1252 against 0.0857) and the second bucket after the
drift at 1% positives covered 0.840 (x3) and 0.790 (x10) against 0.905 and 0.935 (200 streams).
A fixed number of labels keeps a map as recent as the budget allows; at the default budget of 10
labels an hour it is the 24 h as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.budget import NO_CALIBRATION, Calibration
from monitor.stats.calibration import DEFAULT_TAU
from monitor.stats.design import recalibrate
from monitor.stats.hidden_positives import HIDDEN_LEVEL, HIDDEN_SHARE, hidden_positives_p
from monitor.stats.map_change import is_material
from monitor.stats.sample import LabeledSample
from monitor.stats.segment_maps import segment_maps

STORE_KEY = "calibration"
#: The longest window of labels a map is fitted on (the estimator keeps it whatever its windows).
FIT_WINDOW_S = 86_400
#: Labels a map is fitted on, at the model's budget (module docstring).
FIT_LABELS = 300.0
#: Level of the likelihood-ratio test of a fitted map against the scores (``keep_scores``).
SCORES_LEVEL = 0.05


def label_window_buckets(
    bucket_s: int, labels_per_hour: float = 0.0, window_s: int = FIT_WINDOW_S
) -> int:
    """Buckets of labels a map is fitted on: those that hold ``FIT_LABELS`` labels at the budget.

    ``ceil(3600 FIT_LABELS / (labels_per_hour bucket_s))``, at most ``ceil(window_s / bucket_s)``
    (the longest, which the estimator keeps), at least 1; without a budget (``labels_per_hour``
    0) the longest.

    Examples:
        >>> label_window_buckets(3600)
        24
        >>> label_window_buckets(3600, 150.0), label_window_buckets(3600, 10.0)
        (2, 24)
    """
    longest = max(1, math.ceil(window_s / bucket_s))
    if not labels_per_hour > 0.0:
        return longest
    hours = FIT_LABELS / labels_per_hour
    return min(longest, max(1, math.ceil(hours * 3600.0 / bucket_s)))


def refit(
    previous: Calibration,
    sample: LabeledSample,
    lam0: float,
    tau: float = DEFAULT_TAU,
    *,
    beta: bool = True,
    segment: npt.NDArray[np.str_] | None = None,
    keep_scores: bool = True,
    reference: Sequence[int] = (),
    history: LabeledSample | None = None,
    history_segment: npt.NDArray[np.str_] | None = None,
) -> Calibration:
    """The next calibration from ``sample``; ``previous`` unless the new one is material.

    ``previous`` (the calibration in force) stays when there is no label or when the refit
    changes neither the map, the defensive share, the family nor a segment's map materially
    (``monitor.stats.map_change.is_material``: log-odds of p_hat by more than 0.1 somewhere,
    the share by more than 10%), so labels trickling in every poll do not make a new version
    (and a control refresh) at every poll. ``beta=False`` keeps to Platt maps
    (``monitor.stats.design.recalibrate``). ``segment``: the segment of each labelled item
    (aligned with ``sample``); the segments whose labels reject the model's map get their own
    (``monitor.stats.segment_maps``). None: the model's map alone. ``keep_scores``
    (``models.NAME.keep_calibrated_scores``): keep the identity where the labels do not reject
    the scores at ``SCORES_LEVEL`` (module docstring); False fits a map at every refit.
    ``reference``: the score histogram of the traffic the labels were drawn from
    (``EstimatorService.score_histogram`` over the same buckets), recorded with a new map
    (``Calibration.reference``). ``history``: the labels of the longest window (``FIT_WINDOW_S``,
    ``sample``'s among them) and ``history_segment`` their segments; where they find positives
    among the low scores that the new calibration does not expect
    (``monitor.stats.hidden_positives``, below ``HIDDEN_LEVEL``), its defensive share is at least
    ``HIDDEN_SHARE``. None: no such test (the offline rounds' plans).
    """
    if len(sample) == 0:
        return previous
    recal = recalibrate(sample, tau, beta=beta, scores_level=SCORES_LEVEL if keep_scores else None)
    segments = (
        ()
        if segment is None
        else segment_maps(recal.cal_map, sample.score, sample.label, segment, tau=tau, beta=beta)
    )
    cand = Calibration(
        previous.version + 1,
        _as_recorded(recal.cal_map),
        recal.defensive(lam0),
        tuple((g, _as_recorded(m)) for g, m in segments),
        tuple(reference),
    )
    if history is not None:
        p_hat = cand.p_hat(history.score, history_segment)
        if hidden_positives_p(p_hat, history.pred, history.label) < HIDDEN_LEVEL:
            cand = replace(cand, lam=max(cand.lam, HIDDEN_SHARE))
    return cand if is_material(previous, cand, lam0) else previous


def _as_recorded(m: CalibrationMap) -> CalibrationMap:
    """The map as a control records it (without the fit's label count and ESS)."""
    return replace(m, n_labels=0, ess=0.0)


def recover(
    stored: Mapping[str, Calibration], published: Mapping[str, Calibration]
) -> dict[str, Calibration]:
    """The calibrations in force after a start: per model, the higher version of the two.

    ``stored``: the state store's (``STORE_KEY``); ``published``: the newest map per model on
    the aggregates topic (``monitor.core.aggregates.newest_maps``). Samplers ignore a map whose
    version is at or below the one they hold, so an estimator whose store lost its maps (a new
    data directory, a restored backup) must continue from the highest version it, or an earlier
    incarnation, ever published, or nothing it fits would be taken until its count caught up.
    Taking the published map itself (not only its version) keeps the refits judged against the
    map the samplers use. A stored map wins a tie (it may be the one not yet published).

    Examples:
        >>> from monitor.stats.calibration import PlattMap
        >>> old = Calibration(7, PlattMap(0.1, 0.9), 0.2)
        >>> recover({}, {"m": old})["m"].version
        7
        >>> recover({"m": Calibration(8, PlattMap(0.0, 1.0), 0.2)}, {"m": old})["m"].version
        8
    """
    out = dict(stored)
    for model, cal in published.items():
        if cal.version > out.get(model, NO_CALIBRATION).version:
            out[model] = cal
    return out


def encode(calibrations: Mapping[str, Calibration]) -> dict[str, list[object]]:
    """The JSON document of the calibrations per model (``decode`` reads it back)."""
    return {m: c.to_list() for m, c in sorted(calibrations.items())}


def decode(doc: object) -> dict[str, Calibration]:
    """Calibrations per model from ``encode``'s document (None: none yet); ``ValueError``."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        msg = "the stored calibrations must be a JSON object"
        raise ValueError(msg)
    return {str(m): Calibration.from_list(v) for m, v in doc.items()}


__all__ = [
    "NO_CALIBRATION",
    "STORE_KEY",
    "decode",
    "encode",
    "label_window_buckets",
    "recover",
    "refit",
]
