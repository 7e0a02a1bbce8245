"""The label-budget controller: the frozen per-bucket control of the audit decisions.

Stream version of seed 000 (Sawade et al., Cor. 2) with Poisson sampling: record i is audited
with probability ``pi_i = min(1, kappa q_i)`` where
``q_i = (1 - lam) q*_i / mean_q* + lam`` (defensive mixing, seed 002 Sec. 4.1) and q* is the
variance-optimal F_alpha proposal evaluated at ``g``, the intrinsic F of earlier traffic.

For bucket b on one partition the control is computed once, from that partition's aggregate of
the latest earlier bucket only (so it depends on the stream, not on batch boundaries):

- ``g = G_theta = sum(f s) / (alpha sum(f) + (1 - alpha) sum(s))`` of that bucket,
- ``mean_qstar`` = mean of q* over that bucket,
- ``kappa = (labels_per_hour * bucket_s / 3600 * share) / N_hat`` where ``N_hat`` is the
  bucket's record count scaled to a whole bucket when the partition only started during it
  (``N_hat = n * bucket_s / covered_s``, ``covered_s`` at least a quarter of the bucket when
  ``n`` is under ``MIN_EXTRAPOLATED_RECORDS``), divided by that bucket's share of
  uncapped requests when caps at pi = 1 bound there (``cap_ratio``).
- ``share`` is the partition's share of the budget. A partition cannot see the other partitions'
  traffic deterministically (they are consumed by other samplers, at other times), so it
  measures its own rate against the configured total ``E = expected_records_per_hour``:
  ``share = min(1, N_hat / E_bucket)`` when the model's traffic has several partitions (with one,
  ``share = 1``: the measured rate alone). Every partition then gets the same kappa, about
  ``labels / E`` (Poisson sampling's optimum has one kappa for all records), and a cold
  partition no longer holds budget it cannot spend. The price: the budget is spent in the
  proportion ``traffic / E``, so ``E`` must be the model's total traffic (an equal split, the
  alternative, spends the budget whatever ``E`` but gives each partition its own kappa and
  under-spends when a partition has fewer records than its share of labels).

Without history (first records of a partition) q = 1 (uniform) and
``kappa = labels_per_hour / expected_records_per_hour``. Controls also refresh inside a bucket
(``monitor.core.sampler``, :class:`Refresh`): at the partition's ``N``-th, ``2N``-th, ``4N``-th ...
record of the bucket a new control is computed by the same formula from the latest earlier bucket
plus the bucket's records so far (``covered_s`` then the time they span), so a new deployment
leaves uniform sampling after ``N`` records; and at the record after the bucket's event time
passes a quarter of a bucket beyond the latest stage (:func:`stage_due`), so a bucket too quiet
to reach its next record point is refreshed too. In a surge or a lull (:func:`pace_change`: the
bucket's current rate, that of its records since the latest refresh (:func:`rate_origin`), more
than ``PACE_RATIO`` times that blend or less than its ``1 / PACE_RATIO``) a refresh takes the
current rate and spreads what is left of its budget over the records that rate expects in the
rest of the bucket; so does a refresh at the record after the bucket's spend crosses an
overspend point (:func:`overspend_point`), whatever the rate. Any kappa keeps the
Horvitz-Thompson estimate unbiased; the controller only decides how many labels are spent.

Recalibration (DESIGN.md, "Learning from the labels"): a control may carry a versioned calibration
map (:class:`Calibration`: the Platt map of ``monitor.stats.calibration`` or the beta map of
``monitor.stats.beta_calibration``, fitted from labels, and the defensive share the labels ask for,
``selection.defensive_share``). Then q* is evaluated at p_hat = m(s) instead of s, ``g`` comes from
the earlier bucket's recalibrated expected counts ``sum(f p_hat) / (alpha N1 + (1 - alpha)
sum(p_hat))`` (p_hat under the map that was in force there), and ``lam`` is the calibration's. The
map is not a function of the scored stream, so the control records it: a replay reads the stored
control and decides the same.

Map changes (an honest budget): ``mean_q*`` must be the mean of q* under the map the control
decides with, or the spend ``kappa sum(q)`` is off by their ratio (a map that undoes logits x10
raises q* about tenfold: the bucket after it used to spend 3-6x its budget). So a control never
takes a map no record has q* summed under. A new map is first *pending*
(``Control.accumulate``): the stage decides with the map it had while the traffic aggregate sums
q* under the new one; the next control takes the new map once the records summed under it are
the whole traffic it learns from or at least ``refresh_records`` of them, and normalises by
their mean q*; until then the latest stage's map, ``g`` and ``mean_q*`` stay. A pending stage is
followed by a refresh ``refresh_records`` records later (not at the next power of two), so a map
is taken within ``refresh_records`` records of the point it was first pending. To count those
records each refresh records the bucket's ``(n, sum q*, sum pi, sum kappa q)`` just before it
(:class:`Refresh` ``base``): a stage's records are the bucket's aggregate minus its base. The cap
re-solve (``cap_ratio``) counts the trailing records decided under the map in force, whose
``sum pi`` and ``sum kappa q`` are exact whatever their q* is summed under; when the new control
takes another map those caps are a guess at the new map's, so they raise kappa at most
``1 / OTHER_MAP_CAP_RATIO`` (a map refitted every few hundred labels is nearly every control's
new map: at 1% positives the budget was spent 0.95x while the re-solve waited for a control
decided under the map it takes). Everything here is a function of the stream, the durable maps
and the stored controls (pending map and bases included), so a replay still decides the same.
Known limit: q* is also evaluated at ``g``, and ``g`` of the first controls under a new map still
comes from p_hat summed under the old one; when the new map moves ``g`` far (0.9 -> 0.1 on the
unit test's stream) the next buckets' normaliser holds q* at the earlier ``g``, too large: they
under-spend (0.3-0.5x, then 0.6-1.0x).

Score shift (before any label): a map is fitted on the labels of earlier traffic, so when the
scores a control decides on no longer look like the earlier traffic's the map, and q* at it, is
suspect: after a drift the old map puts q* where the drifted model's false negatives are not, and
the few sampled carry huge weights. Each control records ``shift``, the defensive share
``monitor.stats.drift.shift_share`` asks for from the PSI of the score histograms (the aggregates'
``hist``) beyond its sampling noise, up to ``drift.SHIFT_MAX`` (0.8): at a refresh the bucket's
records so far against the latest earlier bucket, at a bucket's start that bucket against the one
before it (when still held), and, for a map that records it (``Calibration.reference``), the
same scores against the traffic whose labels the map was fitted on; the larger share wins. While
the map a raised control decided with stays in force (version > 0) the next controls keep at
least its share, so the raise outlives the first drifted bucket (whose successor no longer
differs from it) until a map fitted since is taken, and a map refitted on labels drawn mostly
before the drift raises it again (measured: ``benchmarks/stream.py``, the second bucket after a
drift at 1% positives); without a map only consecutive traffic is compared. The control
decides with ``max(calibration's share, shift)`` (:meth:`Control.share`). A function of the
scored stream, the durable maps and the stored controls, and stored with the control, so a
replay decides the same. Blind to a concept drift that leaves the score distribution as it was
(p(y | s) moves, the scores do not), and to moves inside one of the 20 bins of one logit unit
(``monitor.stats.drift``). The first records of the first drifted bucket (up to its first
refresh, ``refresh_records``) are decided before the rule can see them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from monitor.stats.beta_calibration import BetaMap, CalibrationMap
from monitor.stats.calibration import IDENTITY, PlattMap
from monitor.stats.drift import SCORE_BINS
from monitor.stats.falpha import intrinsic_falpha_from_sums
from monitor.stats.selection import defensive_mix, q_star_falpha

# G used to accumulate q* while no intrinsic F is known yet (first bucket of a partition)
G_PRIOR = 0.5
# a partially observed bucket of fewer than MIN_EXTRAPOLATED_RECORDS records is extrapolated from
# at least this share of the bucket (a handful of records says little about a rate); with more,
# from the time they cover (a partition that started 3 minutes before the hour's end with 50
# records was read as 200 records an hour where it had 1,000, and spent 4.8x the next hour's
# budget)
MIN_COVERAGE = 0.25
MIN_EXTRAPOLATED_RECORDS = 30
# cap ratios this close to 1 are rounding, not caps; kappa is raised at most 1 / MIN_CAP_RATIO
CAP_TOLERANCE = 1e-3
MIN_CAP_RATIO = 0.01
# a cap ratio measured under the map a new control replaces, or at a kappa more than PACE_RATIO
# times the re-solved one (``control_for_bucket``'s ``cap_kappa``), is a guess at the new
# control's caps: it raises kappa at most 1 / OTHER_MAP_CAP_RATIO
OTHER_MAP_CAP_RATIO = 0.8
# the span of records a refresh extrapolates from is at least this long (seconds)
MIN_REFRESH_SPAN_S = 1.0
# a surge (a lull): at a refresh the bucket's current rate is more than PACE_RATIO times (less
# than 1 / PACE_RATIO of) the rate of the earlier bucket and the bucket together
# (``pace_change``); the bucket's budget then follows what is left of it, at least
# PACE_MIN_BUDGET of it per refresh, over at least MIN_COVERAGE of a bucket still to come
PACE_RATIO = 1.25
PACE_MIN_BUDGET = 0.1
# the current rate is that of the records since the latest refresh at least this much event time
# (seconds) back (``rate_origin``); without one, that of the bucket's records so far. Event times
# are only roughly in log order (producers' clocks and batches), so a shorter stretch says little
# about a rate, and one whose records all precede the refresh's time (a late batch) spans none
MIN_STAGE_SPAN_S = 60.0
# a bucket whose partition has spent OVERSPEND_RATIO times the most budget it can be given (the
# model's, or its equal share without expected_records_per_hour) is refreshed at once, and again
# at each doubling of that point (``overspend_point``): no steady stream at 5% positives reaches
# it; at 1%, where an hour's spend varies most, its largest hours do (benchmarks/README.md,
# "Budget pacing": 1.43x -> 1.33x, coverage unchanged)
OVERSPEND_RATIO = 1.25
# a stage decided REFRESH_AGE of a bucket ago in event time (its ``at``; the bucket's start for
# the first) is refreshed at the next record once MIN_EXTRAPOLATED_RECORDS records have come
# since it (``stage_due``): an hour 5 times quieter than the one before it, whose 1,000 records
# never reached the first refresh point, spent 0.18x its budget at the busy hour's rate
REFRESH_AGE = 0.25


@dataclass(frozen=True)
class Calibration:
    """A versioned calibration map and the defensive share to use with it.

    ``version`` 0 is "no map" (the identity; the configured defensive share applies); every
    map fitted from labels gets the next version of its model. ``segments`` are the maps of
    the segments whose labels reject the model's map (``monitor.stats.segment_maps``), by
    segment name, sorted: a record of such a segment is recalibrated by its segment's map, any
    other by ``cal_map`` (:meth:`p_hat`). They share the model's version and defensive share.
    ``reference`` counts the scores (``monitor.stats.drift.score_histogram``'s bins) of the
    traffic of the buckets whose labels the map was fitted on; the score shift compares the
    scores a control decides on with it (module docstring, "Score shift"). Empty: not known (a
    map written before it was recorded).

    Serialised as ``[version, a, b, lam]`` for a Platt map p_hat = expit(a + b logit(s)) (the
    only shape before beta maps existed, so stored and published ones still load) and as
    ``[version, c, a, b, lam]`` for a beta map p_hat = expit(c + a ln s - b ln(1 - s)): the
    intercept first in both, so the Platt list ``[v, a, b, lam]`` and the beta list
    ``[v, a, b, b, lam]`` are the same map. The reference follows as a list of counts when
    known, then the segment maps as one trailing object ``{segment: [a, b] or [c, a, b]}``
    when there are some (a calibration without them serialises as before).
    """

    version: int = 0
    cal_map: CalibrationMap = IDENTITY
    lam: float = math.nan
    segments: tuple[tuple[str, CalibrationMap], ...] = ()
    reference: tuple[int, ...] = ()

    def share(self, lam0: float) -> float:
        """The defensive share decisions under this calibration use (``lam0``: the configured).

        The map's (at least the configured one it was fitted with), or ``lam0`` when that is
        larger (the configuration raised it since: in force at once, not at the next refit);
        ``lam0`` without a map.

        Examples:
            >>> fitted = Calibration(version=3, lam=0.25)
            >>> fitted.share(0.1), fitted.share(0.5), NO_CALIBRATION.share(0.1)
            (0.25, 0.5, 0.1)
        """
        return max(lam0, self.lam) if self.version > 0 else lam0

    def map_of(self, segment: str) -> CalibrationMap:
        """The map a record of ``segment`` is recalibrated by: its own, else the model's."""
        return dict(self.segments).get(segment, self.cal_map)

    def p_hat(
        self, score: npt.NDArray[np.float64], segment: npt.NDArray[np.str_] | None = None
    ) -> npt.NDArray[np.float64]:
        """p_hat of each record: ``m_g(s)`` when its segment g has a map, ``m(s)`` otherwise.

        ``segment`` (the records' segments, aligned with ``score``) None: the model's map for
        every record.
        """
        out = np.array(self.cal_map.apply(score), dtype=np.float64)
        if segment is not None:
            for name, m in self.segments:
                own = segment == name
                if own.any():
                    out[own] = m.apply(score[own])
        return out

    def to_list(self) -> list[object]:
        """``[version, a, b, lam]`` or ``[version, c, a, b, lam]``, then extras if any.

        The extras: the reference's counts, then the segment maps.
        """
        out: list[object] = [self.version, *_map_params(self.cal_map), self.lam]
        if self.reference:
            out.append(list(self.reference))
        if self.segments:
            out.append({name: _map_params(m) for name, m in self.segments})
        return out

    @classmethod
    def from_list(cls, v: object) -> Calibration:
        """The calibration written by ``to_list``; ``ValueError`` when ``v`` is not one."""
        if isinstance(v, list | tuple) and v and isinstance(v[-1], dict):
            seg_doc, v = v[-1], v[:-1]
        else:
            seg_doc = {}
        reference: object = ()
        if isinstance(v, list | tuple) and v and isinstance(v[-1], list | tuple):
            reference, v = v[-1], v[:-1]
        if not isinstance(v, list | tuple) or len(v) not in (4, 5) or type(v[0]) is not int:
            msg = (
                "a control's calibration is [version, a, b, lam] (Platt) or "
                f"[version, c, a, b, lam] (beta), then optionally [counts] and {{segment: map}}, "
                f"got {v!r:.80}"
            )
            raise ValueError(msg)
        lam = float(v[-1])
        if v[0] < 0 or not 0.0 < lam <= 1.0:
            msg = f"a control's calibration needs version >= 0 and lam in (0, 1], got {list(v)!r}"
            raise ValueError(msg)
        model_map = _map_from(v[1:-1], f"a control's calibration, got {list(v)!r}")
        segments = tuple(
            (str(k), _map_from(seg_doc[k], f"segment {k!r}'s map, got {seg_doc[k]!r:.80}"))
            for k in sorted(seg_doc)
        )
        return cls(v[0], model_map, lam, segments, _reference_from(reference))


def _reference_from(counts: object) -> tuple[int, ...]:
    """The reference histogram ``to_list`` wrote (empty or ``SCORE_BINS`` counts >= 0)."""
    if not isinstance(counts, list | tuple) or (
        counts and (len(counts) != SCORE_BINS or not all(type(c) is int and c >= 0 for c in counts))
    ):
        msg = (
            f"a calibration's reference is {SCORE_BINS} score counts (integers >= 0), "
            f"got {counts!r:.80}"
        )
        raise ValueError(msg)
    return tuple(counts)


def _map_params(m: CalibrationMap) -> list[float]:
    """``[a, b]`` of a Platt map, ``[c, a, b]`` of a beta map (the intercept first)."""
    if isinstance(m, BetaMap):
        return [m.c, m.a, m.b]
    return [m.a, m.b]


def _map_from(params: object, where: str) -> CalibrationMap:
    """The map ``_map_params`` wrote; ``ValueError`` naming ``where`` when it is not one."""
    if not isinstance(params, list | tuple) or len(params) not in (2, 3):
        msg = f"a calibration map is [a, b] (Platt) or [c, a, b] (beta) in {where}"
        raise ValueError(msg)
    intercept, *slopes = (float(x) for x in params)
    if not (math.isfinite(intercept) and all(math.isfinite(x) and x >= 0.0 for x in slopes)):
        msg = f"a calibration map needs a finite intercept and finite slopes >= 0 in {where}"
        raise ValueError(msg)
    if len(slopes) == 2:
        return BetaMap(slopes[0], slopes[1], intercept)
    return PlattMap(intercept, slopes[0])


NO_CALIBRATION = Calibration()


@dataclass(frozen=True)
class Control:
    """The inputs of every audit decision in one (model, partition, bucket).

    ``mean_qstar`` is NaN for the uniform control (no history): then q = 1 for every record.
    ``calibration`` is the map q* is evaluated at (version 0: the raw scores). ``accumulate``,
    when set, is a newer map the records' q* is summed under in the traffic aggregate while
    the decisions still use ``calibration`` (a pending map, module docstring "Map changes");
    None: q* is summed under ``calibration``. ``refreshes`` are the controls that replaced it
    later in the bucket, in log order: a record at offset ``o`` is decided under the last
    refresh with ``offset <= o`` (:meth:`in_force`). ``shift`` is the defensive share the
    score shift asked for when the control was computed (module docstring, "Score shift"; 0:
    none); the control decides with the larger of it and the calibration's (:meth:`share`).
    """

    g: float
    kappa: float
    mean_qstar: float
    calibration: Calibration = NO_CALIBRATION
    refreshes: tuple[Refresh, ...] = ()
    accumulate: Calibration | None = None
    shift: float = 0.0

    def share(self, lam0: float) -> float:
        """The defensive share this control decides with (``lam0``: the configured one).

        The calibration's share (:meth:`Calibration.share`), raised to ``shift`` when that is
        larger.
        """
        return max(self.calibration.share(lam0), self.shift)

    @property
    def summed(self) -> Calibration:
        """The map the q* of the records decided under this control is summed under."""
        return self.calibration if self.accumulate is None else self.accumulate

    @property
    def pending(self) -> bool:
        """Whether the records' q* is summed under a newer map than the decisions use."""
        return self.summed.version != self.calibration.version

    @property
    def uniform(self) -> bool:
        """Whether this control samples uniformly (no earlier bucket to learn from)."""
        return math.isnan(self.mean_qstar)

    @property
    def latest(self) -> Control:
        """The control in force after the last refresh (itself without refreshes)."""
        return self.refreshes[-1].control if self.refreshes else self

    def in_force(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Per offset, 0 for this control or ``j`` for ``refreshes[j - 1]``."""
        starts = np.array([r.offset for r in self.refreshes], dtype=np.int64)
        return np.searchsorted(starts, offsets, side="right").astype(np.intp)

    def stage(self, j: int) -> Control:
        """The control :meth:`in_force` numbers ``j``."""
        return self if j == 0 else self.refreshes[j - 1].control

    def refreshed(
        self, offset: int, control: Control, base: Base | None = None, at: float | None = None
    ) -> Control:
        """This control with ``control`` in force from ``offset`` on (``base``, ``at``: Refresh).

        Refreshes at ``offset`` or beyond are dropped first: the partition's log restarted
        below them (a topic deleted and recreated, or truncated), so they no longer mark
        positions of it, and the refreshes stay in increasing offset order (``in_force``).
        """
        kept = tuple(r for r in self.refreshes if r.offset < offset)
        return replace(self, refreshes=(*kept, Refresh(offset, control, base, at)))


#: ``(n, sum_qstar, sum_pi, sum_uncapped)`` of a bucket's aggregate (fixed point,
#: ``monitor.core.windows``)
Base = tuple[int, int, int, int]
ZERO_BASE: Base = (0, 0, 0, 0)


@dataclass(frozen=True)
class Refresh:
    """A control computed inside a bucket, in force from the record at ``offset`` on.

    ``base`` is the bucket's ``(n, sum_qstar, sum_pi, sum_uncapped)`` on the partition just before
    ``offset`` (None in a store written before it existed): the records decided under this
    stage are the bucket's aggregate minus ``base`` (up to the next refresh's base). ``at`` is
    the event time the bucket had reached there (its records' latest ``ts``, at least the
    bucket's start; None where it was not recorded): later refreshes measure the current rate
    from it (``rate_origin``).
    """

    offset: int
    control: Control
    base: Base | None = None
    at: float | None = None


def stage_bases(ctl: Control) -> list[tuple[Control, Base | None]]:
    """The stages of a bucket's control in log order, each with its base (``ZERO_BASE`` first)."""
    return [(ctl, ZERO_BASE), *((r.control, r.base) for r in ctl.refreshes)]


def control_to_list(ctl: Control, base: Base | None = None) -> list[object]:
    """``[g, kappa, mean_q* | None(, calibration | None(, extra))]`` (refreshes not included).

    ``extra`` is a dict written only when needed: ``"acc"`` the pending map
    (``Control.accumulate``), ``"base"`` a refresh's base, ``"shift"`` the score shift's share
    (``Control.shift``); the calibration slot is None then when the control has no map.
    """
    out: list[object] = [ctl.g, ctl.kappa, None if math.isnan(ctl.mean_qstar) else ctl.mean_qstar]
    extra: dict[str, object] = {}
    if ctl.accumulate is not None:
        extra["acc"] = ctl.accumulate.to_list()
    if base is not None:  # sum_uncapped only where a cap bound (as the aggregate writes it)
        extra["base"] = list(base if base[3] != base[2] else base[:3])
    if ctl.shift > 0.0:
        extra["shift"] = ctl.shift
    if ctl.calibration.version > 0 or extra:
        out.append(ctl.calibration.to_list() if ctl.calibration.version > 0 else None)
    if extra:
        out.append(extra)
    return out


def _base_from(v: object) -> Base:
    if not (isinstance(v, list) and len(v) in (3, 4) and all(type(x) is int and x >= 0 for x in v)):
        msg = "a refresh's base is [n, sum_qstar, sum_pi(, sum_uncapped)], integers >= 0"
        raise ValueError(msg)
    return (v[0], v[1], v[2], v[3] if len(v) == 4 else v[2])


def _control_and_base(ctl: object) -> tuple[Control, Base | None]:
    if not isinstance(ctl, list) or len(ctl) not in (3, 4, 5):
        msg = "a control is [g, kappa, mean_q*(, calibration | None(, extra))]"
        raise ValueError(msg)
    g, kappa, mq = (math.nan if x is None else float(x) for x in ctl[:3])
    cal = NO_CALIBRATION
    if len(ctl) == 4 or (len(ctl) == 5 and ctl[3] is not None):
        cal = Calibration.from_list(ctl[3])
    extra = ctl[4] if len(ctl) == 5 else {}
    if not isinstance(extra, dict) or not set(extra) <= {"acc", "base", "shift"}:
        msg = 'a control\'s extra is a dict with "acc", "base" and/or "shift"'
        raise ValueError(msg)
    acc = Calibration.from_list(extra["acc"]) if "acc" in extra else None
    base = _base_from(extra["base"]) if "base" in extra else None
    shift = _shift_from(extra["shift"]) if "shift" in extra else 0.0
    return Control(g, kappa, mq, calibration=cal, accumulate=acc, shift=shift), base


def _shift_from(v: object) -> float:
    if not (isinstance(v, int | float) and not isinstance(v, bool) and 0.0 < v <= 1.0):
        msg = f"a control's shift share is a number in (0, 1], got {v!r:.40}"
        raise ValueError(msg)
    return float(v)


def control_from_list(ctl: object) -> Control:
    """The control written by :func:`control_to_list`; ``ValueError`` when ``ctl`` is not one."""
    return _control_and_base(ctl)[0]


def maps_to_list(ctl: Control) -> object | None:
    """A control's maps for a store column (:func:`with_maps` reads it back).

    The calibration, or ``[calibration | None, acc]`` with a pending map; None for neither.
    With a score shift share, ``{"maps": <that>, "shift": share}``.
    """
    cal = ctl.calibration.to_list() if ctl.calibration.version > 0 else None
    maps = cal if ctl.accumulate is None else [cal, ctl.accumulate.to_list()]
    return {"maps": maps, "shift": ctl.shift} if ctl.shift > 0.0 else maps


def with_maps(ctl: Control, v: object) -> Control:
    """``ctl`` with the maps written by :func:`maps_to_list`; ``ValueError`` when bad."""
    if isinstance(v, dict):
        if set(v) != {"maps", "shift"}:
            msg = 'a control\'s maps with a shift share are {"maps": ..., "shift": share}'
            raise ValueError(msg)
        out = replace(ctl, shift=_shift_from(v["shift"]))
        return out if v["maps"] is None else with_maps(out, v["maps"])
    if isinstance(v, list) and len(v) == 2:
        cal = NO_CALIBRATION if v[0] is None else Calibration.from_list(v[0])
        return replace(ctl, calibration=cal, accumulate=Calibration.from_list(v[1]))
    return replace(ctl, calibration=Calibration.from_list(v))


def refreshes_to_list(ctl: Control) -> list[object]:
    """``[[offset, g, kappa, mean_q*(, calibration(, extra))], ...]`` of the refreshes."""
    return [[r.offset, *control_to_list(r.control, r.base)] for r in ctl.refreshes]


def refresh_times(ctl: Control) -> list[float | None]:
    """The refreshes' ``at`` (``Refresh``), in the order of :func:`refreshes_to_list`.

    Kept beside that list, not in it, so that a release that does not know them still reads the
    refreshes (the aggregates topic's states and the store carry the two side by side).
    """
    return [r.at for r in ctl.refreshes]


def with_refreshes(ctl: Control, v: object, at: object = None) -> Control:
    """``ctl`` with the refreshes written by :func:`refreshes_to_list`; ``ValueError`` if bad.

    ``at``: their times as :func:`refresh_times` wrote them (None: not recorded, each refresh's
    ``at`` None). A list out of offset order (a recreated topic's, as earlier versions stored
    it) reads as it is written now: each refresh replaces those at or beyond its offset
    (``Control.refreshed``).
    """
    if not isinstance(v, list):
        msg = "a control's refreshes are a list of [offset, g, kappa, mean_q*(, ...)]"
        raise ValueError(msg)
    times = [None] * len(v) if at is None else at
    if not (
        isinstance(times, list)
        and len(times) == len(v)
        and all(t is None or (type(t) in (int, float) and math.isfinite(t)) for t in times)
    ):
        msg = f"a control's refresh times are a list of {len(v)} numbers or nulls, got {at!r:.80}"
        raise ValueError(msg)
    out = ctl
    for r, t in zip(v, times, strict=True):
        if not isinstance(r, list) or not r or type(r[0]) is not int:
            msg = "a refresh is [offset, g, kappa, mean_q*(, calibration(, extra))]"
            raise ValueError(msg)
        control, base = _control_and_base(r[1:])
        out = out.refreshed(r[0], control, base, None if t is None else float(t))
    return out


def rate_origin(ctl: Control, offset: int, *, opened: float, now: float) -> tuple[int, float]:
    """Where a refresh at ``offset`` measures the bucket's current rate from: ``(n, ts)``.

    The base record count and ``at`` (``Refresh``) of the latest earlier refresh whose records
    span at least ``MIN_STAGE_SPAN_S`` of event time by ``now``; ``(0, opened)``, the bucket's
    records from the time they start (``pace_change``), when none does or a later one did not
    record them (written before they were). A rate over all of the bucket's records lags a
    surge that starts late in it: one 45 times as fast from minute 45 of an hour spent 2.8x
    its budget that way, 1.3x measured from the latest refresh (``tests/unit/test_refresh.py``).

    Examples:
        >>> plain = Control(g=0.5, kappa=0.01, mean_qstar=0.2)
        >>> ctl = plain.refreshed(1000, plain, (1000, 0, 0, 0), at=2000.0)
        >>> rate_origin(ctl, 2000, opened=0.0, now=2100.0)
        (1000, 2000.0)
        >>> rate_origin(ctl, 2000, opened=0.0, now=2030.0)  # 30 s: too short a span
        (0, 0.0)
        >>> ctl = ctl.refreshed(2000, plain, (2000, 0, 0, 0), at=2090.0)
        >>> rate_origin(ctl, 4000, opened=0.0, now=2100.0)  # from the refresh before it
        (1000, 2000.0)
    """
    for r in reversed([r for r in ctl.refreshes if r.offset < offset]):
        if r.base is None or r.at is None:
            break
        if now - r.at >= MIN_STAGE_SPAN_S:
            return r.base[0], r.at
    return 0, opened


class Pace(NamedTuple):
    """A bucket whose traffic is off the traffic a refresh blends it with (``pace_change``)."""

    n_hat: float  # the bucket's current rate, extrapolated to a whole bucket
    spent: float  # the bucket's expected requests so far (its sum of pi)
    remaining_s: float  # the time left in the bucket, at least MIN_COVERAGE of one


def pace_change(
    *,
    n: int,
    covered_s: float,
    blended_n: int,
    blended_s: float,
    spent: float,
    remaining_s: float,
    bucket_s: int,
    force: bool = False,
) -> Pace | None:
    """The bucket's current pace at a refresh, when it is off the blend by over ``PACE_RATIO``.

    A refresh extrapolates the rate from the earlier bucket and the bucket's records so far
    together (``blended_n`` over ``blended_s``), which smooths the rate of a steady stream but
    lags a change of pace: a stream 45 times as fast from the hour's start spent 6x its budget
    in that hour, each doubling of its records spending about the budget again, and the hour
    after an hour of such a surge spent 0.03x its budget (the blend still held the surge).
    When the bucket's current rate (``n`` records over the ``covered_s`` they span: those since
    a recent refresh, or all of the bucket's, :func:`rate_origin`) is more than
    ``PACE_RATIO`` times the blend or less than its ``1 / PACE_RATIO`` (a steady stream's rates
    differ by their noise, a few percent at ``refresh_records`` records), the control spends
    what is left of the bucket's budget over the records that rate expects in the
    ``remaining_s`` still to come (``control_for_bucket``). None otherwise, unless ``force``
    (a refresh at an overspend point, :func:`overspend_point`: the budget is spent whatever the
    rate).

    Examples:
        An earlier hour of 2,000 records, then 1,000 in the first half of this one (steady),
        in its first 6 minutes (a surge) or in its first 50 minutes after an hour of 20,000 (a
        lull):

        >>> pace_change(n=1000, covered_s=1800.0, blended_n=3000, blended_s=5400.0,
        ...             spent=50.0, remaining_s=1800.0, bucket_s=3600) is None
        True
        >>> pace_change(n=1000, covered_s=360.0, blended_n=3000, blended_s=3960.0,
        ...             spent=50.0, remaining_s=3240.0, bucket_s=3600)
        Pace(n_hat=10000.0, spent=50.0, remaining_s=3240.0)
        >>> pace_change(n=1000, covered_s=3000.0, blended_n=21000, blended_s=6600.0,
        ...             spent=5.0, remaining_s=600.0, bucket_s=3600)
        Pace(n_hat=1200.0, spent=5.0, remaining_s=900.0)
    """
    own = n / max(covered_s, MIN_REFRESH_SPAN_S)
    blended = blended_n / max(blended_s, MIN_REFRESH_SPAN_S)
    if not force and blended / PACE_RATIO <= own <= PACE_RATIO * blended:
        return None
    return Pace(own * bucket_s, spent, max(remaining_s, MIN_COVERAGE * bucket_s))


def stage_due(ctl: Control, start: float, bucket_s: int) -> float | None:
    """The event time after which the latest stage of a bucket's control is due for a refresh.

    ``REFRESH_AGE`` of a bucket after the stage's ``at`` (the bucket's ``start`` for the control
    frozen at its first record); None when the latest refresh did not record its ``at`` (a
    store written before it existed).

    Examples:
        >>> plain = Control(g=0.5, kappa=0.01, mean_qstar=0.2)
        >>> stage_due(plain, 7200.0, 3600)
        8100.0
        >>> stage_due(plain.refreshed(50, plain, (50, 0, 0, 0), at=8150.0), 7200.0, 3600)
        9050.0
        >>> stage_due(plain.refreshed(50, plain), 7200.0, 3600) is None
        True
    """
    at = ctl.refreshes[-1].at if ctl.refreshes else start
    return None if at is None else at + REFRESH_AGE * bucket_s


def most_budget(
    labels_per_hour: float,
    bucket_s: int,
    n_partitions: int,
    expected_records_per_hour: float | None,
) -> float:
    """The largest budget one partition's bucket can be given (``control_for_bucket``).

    The model's (its traffic's share, capped at 1, with ``expected_records_per_hour``; a single
    partition), else its equal share ``1 / n_partitions``.
    """
    shared = n_partitions > 1 and not (expected_records_per_hour and expected_records_per_hour > 0)
    return labels_per_hour * bucket_s / 3600.0 / (n_partitions if shared else 1)


def overspend_point(most: float, spent: float) -> float:
    """The first overspend point above ``spent``: ``most * OVERSPEND_RATIO * 2^k``, k >= 0.

    A stage is decided with the rate it expects; where the traffic outran it (an hour that
    starts 100 times as busy as the quiet one before it, whose first ``refresh_records``
    records spent 4.7x the budget), the bucket's spend crossing a point refreshes its control,
    which then finds the budget spent (``pace_change`` with ``force``). Points of the
    bucket's whole spend, so an overspending bucket refreshes a few times, not at every record.

    Examples:
        >>> overspend_point(100.0, 0.0), overspend_point(100.0, 125.0), overspend_point(8.0, 31.0)
        (125.0, 250.0, 40.0)
        >>> overspend_point(0.0, 3.0)
        inf
    """
    if not most > 0.0:
        return math.inf  # no budget to overspend
    point = most * OVERSPEND_RATIO
    while point <= spent:
        point *= 2.0
    return point


def uniform_control(labels_per_hour: float, expected_records_per_hour: float) -> Control:
    """The control of a partition's first bucket: q = 1, kappa = budget rate / traffic rate."""
    kappa = labels_per_hour / expected_records_per_hour if expected_records_per_hour > 0 else 1.0
    return Control(g=G_PRIOR, kappa=kappa, mean_qstar=math.nan)


def control_for_bucket(
    *,
    n: int,
    n_pred: int,
    pred_score_total: float,
    score_total: float,
    mean_qstar: float,
    ts_min: float,
    prev_bucket: int,
    alpha: float,
    labels_per_hour: float,
    bucket_s: int,
    n_partitions: int,
    calibration: Calibration = NO_CALIBRATION,
    cap_ratio: float = 1.0,
    cap_kappa: float | None = None,
    covered_s: float | None = None,
    expected_records_per_hour: float | None = None,
    pace: Pace | None = None,
) -> Control:
    """The control of the next bucket from the aggregate of the latest earlier bucket.

    ``g`` falls back to ``G_PRIOR`` when the intrinsic F is undefined (e.g. no predicted
    positive and zero scores). An intrinsic F of 1 (every score exactly 0 or 1 and equal to the
    prediction: a model that claims to be right about each record) or a ``mean_qstar`` that is
    not positive gives a uniform control: q* (seed 000, Cor. 2) is 0 for every record at G = 1,
    and mixing it in left q = lam, a tenth of the budget. With a calibration
    map, pass the recalibrated sums (``sum f p_hat``, ``sum p_hat``) as ``pred_score_total`` and
    ``score_total``.

    ``cap_ratio`` re-solves kappa when caps at pi = 1 bind: the latest records' expected
    requests ``sum min(1, kappa q)`` over their uncapped ``sum kappa q`` (:func:`cap_ratio`).
    kappa is divided by it, so the budget the caps left unspent is spread over the uncapped
    records; a feedback step per bucket (deterministic: a function of the stream and the
    stored controls). Ratios above ``1 - CAP_TOLERANCE`` count as 1 (no cap bound).
    ``cap_kappa``, the largest kappa the ratio was measured at: caps bind less as kappa falls,
    so where the re-solved kappa would be more than ``PACE_RATIO`` times below it, the ratio is
    a guess and raises kappa at most ``1 / OTHER_MAP_CAP_RATIO`` (a lull's control audited
    every record of a quiet hour at kappa 2.8, and the busy hour after it, re-solved by that
    stage's ratio, spent 3.5x its budget). Where it would be above, the caps bind at least as
    much and the next refresh measures them.

    ``covered_s``, when given, is the time the ``n`` records span (a refresh inside a bucket);
    otherwise the span of ``prev_bucket`` from ``max(start, ts_min)`` to its end, at least
    ``MIN_COVERAGE`` of a bucket when it holds fewer than ``MIN_EXTRAPOLATED_RECORDS`` records.
    ``expected_records_per_hour``, when given, lets the budget follow the partition's measured
    share of the traffic (module docstring); otherwise it is split equally over
    ``n_partitions``.

    ``pace`` (a refresh in a surge or a lull, :func:`pace_change`): the rate is the bucket's
    current one, and
    ``kappa = max(budget - spent, PACE_MIN_BUDGET budget) / (n_hat remaining_s / bucket_s)``,
    the budget left over the records still expected.
    """
    g = intrinsic_falpha_from_sums(pred_score_total, float(n_pred), score_total, alpha)
    if not math.isfinite(g):
        g = G_PRIOR
    degenerate = g >= 1.0 or not (math.isfinite(mean_qstar) and mean_qstar > 0)
    mq = math.nan if degenerate else mean_qstar
    if covered_s is None:
        start = prev_bucket * bucket_s
        covered = start + bucket_s - max(float(start), ts_min)
        few = n < MIN_EXTRAPOLATED_RECORDS
        covered = max(covered, MIN_COVERAGE * bucket_s if few else MIN_REFRESH_SPAN_S)
    else:
        covered = max(covered_s, MIN_REFRESH_SPAN_S)
    n_hat = n * bucket_s / covered if pace is None else pace.n_hat
    share = 1.0 / max(1, n_partitions)
    if n_partitions > 1 and expected_records_per_hour is not None and expected_records_per_hour > 0:
        share = min(1.0, n_hat / (expected_records_per_hour * bucket_s / 3600.0))
    budget = labels_per_hour * bucket_s / 3600.0 * share
    if pace is not None:
        left = max(budget - pace.spent, PACE_MIN_BUDGET * budget)
        budget, n_hat = left, n_hat * pace.remaining_s / bucket_s
    kappa = budget / n_hat if n_hat > 0 else 1.0
    if math.isfinite(cap_ratio) and 0.0 < cap_ratio < 1.0 - CAP_TOLERANCE:
        ratio = max(cap_ratio, MIN_CAP_RATIO)
        if cap_kappa is not None and kappa / ratio * PACE_RATIO < cap_kappa:
            ratio = max(ratio, OTHER_MAP_CAP_RATIO)  # caps bind less at a far lower kappa
        kappa /= ratio
    return Control(g=float(g), kappa=float(kappa), mean_qstar=float(mq), calibration=calibration)


def cap_ratio(pi_total: float, uncapped_total: float) -> float:
    """Expected requests over uncapped ones: ``sum(min(1, kappa q)) / sum(kappa q)``.

    Summed over the records the latest controls decided (the aggregates' ``sum_pi`` and
    ``sum_uncapped``), whatever map they decided with; 1 when nothing was expected.

    Examples:
        >>> cap_ratio(90.0, 100.0)
        0.9
        >>> cap_ratio(0.0, 0.0)
        1.0
    """
    return min(1.0, pi_total / uncapped_total) if uncapped_total > 0.0 else 1.0


class Selection(NamedTuple):
    """The decision arrays of records under one control (:func:`selection_weights`)."""

    qstar: npt.NDArray[np.float64]
    pi: npt.NDArray[np.float64]
    p_hat: npt.NDArray[np.float64]
    uncapped: npt.NDArray[np.float64]


def selection_weights(
    score: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    alpha: float,
    lam: float,
    control: Control,
    *,
    segment: npt.NDArray[np.str_] | None = None,
) -> Selection:
    """Return ``(q*, pi, p_hat, kappa q)`` for records under one control.

    ``p_hat`` is the control's calibration applied to the scores (:meth:`Calibration.p_hat`:
    a record's segment map where ``segment`` names one, else the model's; the scores
    themselves without a map); ``pi = min(1, kappa q)`` with
    ``q = defensive_mix(q*, share, mean_qstar)``
    (q* undefended, seed 000 Cor. 2 at p_hat and ``g``; ``share = control.share(lam)``: the
    calibration's share when it has one, raised by a score shift), or q = 1 when uniform;
    ``kappa q`` is pi before the cap (what :func:`cap_ratio` compares pi with). The
    returned q*, which feeds the aggregate of this bucket, is evaluated at the map the control
    sums under (``Control.summed``: a pending map, else the same p_hat).
    """
    cal = control.calibration
    p_hat = cal.p_hat(score, segment)
    qstar = np.asarray(q_star_falpha(p_hat, pred, alpha, control.g), dtype=np.float64)
    if control.uniform:
        q = np.ones_like(score, dtype=np.float64)
    else:
        q = np.asarray(
            defensive_mix(qstar, control.share(lam), control.mean_qstar), dtype=np.float64
        )
    uncapped = control.kappa * q
    pi = np.minimum(1.0, uncapped)
    if control.pending:
        summed = control.summed.p_hat(score, segment)
        qstar = np.asarray(q_star_falpha(summed, pred, alpha, control.g), dtype=np.float64)
    return Selection(qstar, pi, p_hat, uncapped)
