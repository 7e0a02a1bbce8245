"""A labeled audit sample: the labeled items with their sampling weights.

Two designs produce one :class:`LabeledSample`:

* Poisson sampling from a stream (DESIGN.md, "From a pool to a stream"): item i is audited
  independently with probability pi_i; its Horvitz-Thompson weight is v_i = 1/pi_i and its
  finite-population correction fpc_i = 1 - pi_i.
* Sampling with replacement from a pool (seed 000, Algorithm 1): one row per draw with
  per-draw selection probability q_i (summing to 1 over the pool); v_i = 1/(n q_i) for n draws,
  so that sum(v) is the Hansen-Hurwitz estimate of the pool size, and fpc_i = 1.

* Two-phase sampling (:meth:`LabeledSample.two_phase`): the Poisson sample of audit requests,
  of which only some were answered. Answers are a second phase of sampling with answer rate r_c
  per class of requests (:mod:`monitor.stats.response`); a label carries v_i = 1/(pi_i r_c) and
  fpc_i = 1 - pi_i r_c, and :attr:`LabeledSample.answers` keeps the class and rate of each item
  for the second phase's variance (:func:`monitor.stats.interval.ratio_estimate`).

Ratio estimators (seed 000, Eq. 4) do not depend on the scale of v; totals (confusion counts)
do, and are unbiased for the traffic (or pool) totals under both designs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Int8Array = npt.NDArray[np.int8]
Int64Array = npt.NDArray[np.int64]


def _no_ints() -> Int64Array:
    return np.zeros(0, dtype=np.int64)


def _no_floats() -> FloatArray:
    return np.zeros(0, dtype=np.float64)


@dataclass(frozen=True)
class AnswerGroups:
    """The second phase of a two-phase sample: per labeled item, its answer class and rate.

    Attributes:
        group: Class of requests the item's answer rate was estimated on (int64 ids).
        rate: The class's answer rate r_c in (0, 1] (float64), the same for every item of a class.
        unanswered_group: Class of each request of the sample without a label (pending, missing
            or skipped); empty when not known.
        unanswered_v: Its first-phase weight 1/pi (>= 1). With ``unanswered_group`` it lets the
            jackknife delete unanswered requests too
            (:func:`monitor.stats.two_phase.two_phase_jackknife_bias`).
    """

    group: Int64Array
    rate: FloatArray
    unanswered_group: Int64Array = field(default_factory=_no_ints)
    unanswered_v: FloatArray = field(default_factory=_no_floats)

    def __post_init__(self) -> None:
        if self.group.shape != self.rate.shape:
            msg = f"AnswerGroups: group {self.group.shape} and rate {self.rate.shape} differ"
            raise ValueError(msg)
        if self.rate.size and not ((self.rate > 0.0).all() and (self.rate <= 1.0).all()):
            msg = "AnswerGroups.rate must be in (0, 1]"
            raise ValueError(msg)
        if self.unanswered_group.shape != self.unanswered_v.shape:
            msg = (
                f"AnswerGroups: unanswered_group {self.unanswered_group.shape} and "
                f"unanswered_v {self.unanswered_v.shape} differ"
            )
            raise ValueError(msg)
        u = self.unanswered_v
        if u.size and not (np.isfinite(u).all() and (u >= 1.0).all()):
            msg = "AnswerGroups.unanswered_v must be finite and >= 1 (it is 1/pi)"
            raise ValueError(msg)

    @property
    def complete(self) -> bool:
        """Every request answered (rates all 1, none unanswered): the one-phase sample."""
        return self.unanswered_v.size == 0 and bool((self.rate == 1.0).all())


def _binary(name: str, values: npt.ArrayLike) -> Int8Array:
    arr = np.asarray(values)
    if arr.size and not np.isin(arr, (0, 1)).all():
        msg = f"{name} must be 0/1"
        raise ValueError(msg)
    return arr.astype(np.int8).reshape(-1)


def _floats(values: npt.ArrayLike) -> FloatArray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


@dataclass(frozen=True)
class LabeledSample:
    """Labeled items: score s, prediction f, label y, weight v = 1/pi and fpc = 1 - pi.

    Attributes:
        score: Model scores p(y=1|x; theta) in [0, 1] (float64).
        pred: Predictions f in {0, 1} (int8).
        label: Audited labels y in {0, 1} (int8).
        v: Sampling weights > 0 (float64).
        fpc: Finite-population corrections in [0, 1] (float64).
        answers: For a two-phase sample, the answer class and rate of each item (None: every
            request was answered, a one-phase sample).
        unanswered_strata: Predictions (0, 1) with requests of which none in their answer
            class was answered (every audit request of the predicted negatives still pending):
            no label carries those requests' weight, so a measure that counts their stratum is
            missing (NaN), as before any label (:func:`monitor.stats.falpha.estimate_falpha`),
            not the value of the other stratum alone (recall 1 with every predicted negative
            pending).
    """

    score: FloatArray
    pred: Int8Array
    label: Int8Array
    v: FloatArray
    fpc: FloatArray
    answers: AnswerGroups | None = None
    unanswered_strata: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        n = self.score.shape[0]
        for name in ("pred", "label", "v", "fpc"):
            if getattr(self, name).shape != (n,):
                msg = (
                    f"LabeledSample.{name} must have shape ({n},), got {getattr(self, name).shape}"
                )
                raise ValueError(msg)
        if n and not (np.isfinite(self.v).all() and (self.v > 0.0).all()):
            msg = "LabeledSample.v must be finite and > 0"
            raise ValueError(msg)
        if n and not ((self.fpc >= 0.0).all() and (self.fpc <= 1.0).all()):
            msg = "LabeledSample.fpc must be in [0, 1]"
            raise ValueError(msg)
        if self.answers is not None and self.answers.group.shape != (n,):
            msg = f"LabeledSample.answers must have shape ({n},), got {self.answers.group.shape}"
            raise ValueError(msg)

    @classmethod
    def create(
        cls,
        score: npt.ArrayLike,
        pred: npt.ArrayLike,
        label: npt.ArrayLike,
        v: npt.ArrayLike,
        fpc: npt.ArrayLike,
    ) -> LabeledSample:
        """Build a sample from array-likes, converting dtypes and checking 0/1 values."""
        return cls(
            _floats(score), _binary("pred", pred), _binary("label", label), _floats(v), _floats(fpc)
        )

    @classmethod
    def poisson(
        cls,
        score: npt.ArrayLike,
        pred: npt.ArrayLike,
        label: npt.ArrayLike,
        pi: npt.ArrayLike,
    ) -> LabeledSample:
        """Items audited independently with probability pi: v = 1/pi, fpc = 1 - pi.

        Args:
            score: Scores of the labeled items.
            pred: Predictions of the labeled items.
            label: Their audited labels.
            pi: Their inclusion probabilities in (0, 1].

        Returns:
            The sample.
        """
        p = _floats(pi)
        if p.size and not ((p > 0.0).all() and (p <= 1.0).all()):
            msg = "inclusion probabilities pi must be in (0, 1]"
            raise ValueError(msg)
        return cls.create(score, pred, label, 1.0 / p, 1.0 - p)

    @classmethod
    def two_phase(
        cls,
        score: npt.ArrayLike,
        pred: npt.ArrayLike,
        label: npt.ArrayLike,
        pi: npt.ArrayLike,
        *,
        rate: npt.ArrayLike,
        group: npt.ArrayLike,
        unanswered_pi: npt.ArrayLike = (),
        unanswered_group: npt.ArrayLike = (),
        unanswered_strata: frozenset[int] = frozenset(),
    ) -> LabeledSample:
        """Answered requests of a Poisson sample: v = 1/(pi r), fpc = 1 - pi r.

        The second phase (which requests were answered) is taken as Bernoulli sampling at rate
        r_c within each class c of requests, the response homogeneity group model of Saerndal,
        Swensson and Wretman (1992, Model Assisted Survey Sampling, Sec. 15.6), see
        :mod:`monitor.stats.response`.

        Args:
            score: Scores of the answered requests.
            pred: Their predictions.
            label: Their labels.
            pi: Their inclusion probabilities in (0, 1].
            rate: Answer rate of each one's class, in (0, 1].
            group: Each one's class id.
            unanswered_pi: Inclusion probabilities of the sample's requests without a label
                (for the jackknife of :mod:`monitor.stats.two_phase`; optional).
            unanswered_group: Their class ids.
            unanswered_strata: The predictions of the classes without an answer
                (:attr:`LabeledSample.unanswered_strata`).

        Returns:
            The sample, with :attr:`answers` set.
        """
        p = _floats(pi)
        q = _floats(unanswered_pi)
        for probs in (p, q):
            if probs.size and not ((probs > 0.0).all() and (probs <= 1.0).all()):
                msg = "inclusion probabilities pi must be in (0, 1]"
                raise ValueError(msg)
        r = _floats(rate)
        if r.shape != p.shape:
            msg = f"LabeledSample.two_phase: rate {r.shape} and pi {p.shape} differ"
            raise ValueError(msg)
        answers = AnswerGroups(
            np.asarray(group, dtype=np.int64).reshape(-1),
            r,
            np.asarray(unanswered_group, dtype=np.int64).reshape(-1),
            1.0 / q,
        )
        base = cls.create(score, pred, label, 1.0 / (p * r), 1.0 - p * r)
        return cls(base.score, base.pred, base.label, base.v, base.fpc, answers, unanswered_strata)

    @classmethod
    def with_replacement(
        cls,
        score: npt.ArrayLike,
        pred: npt.ArrayLike,
        label: npt.ArrayLike,
        q: npt.ArrayLike,
    ) -> LabeledSample:
        """Draws with replacement (seed 000, Algorithm 1): one row per draw, v = 1/(n q), fpc = 1.

        Args:
            score: Score of the item of each draw.
            pred: Prediction of the item of each draw.
            label: Label of the item of each draw.
            q: Per-draw selection probability of that item (q sums to 1 over the pool).

        Returns:
            The sample. The factor 1/n does not change any ratio estimate; it makes sum(v) the
            Hansen-Hurwitz estimate of the pool size.
        """
        qq = _floats(q)
        if qq.size and not ((qq > 0.0).all() and (qq <= 1.0).all()):
            msg = "per-draw probabilities q must be in (0, 1]"
            raise ValueError(msg)
        return cls.create(score, pred, label, 1.0 / (qq.size * qq), np.ones_like(qq))

    @classmethod
    def concat(cls, samples: Sequence[LabeledSample]) -> LabeledSample:
        """Concatenate samples (e.g. the buckets of a window); an empty sequence gives n = 0."""
        if not samples:
            return cls.create([], [], [], [], [])
        answers = None
        if any(s.answers is not None for s in samples):
            # classes of different samples stay apart; a one-phase part has rate 1 (no phase 2)
            groups, rates, open_groups, open_v, offset = [], [], [], [], 0
            for s in samples:
                a = s.answers or AnswerGroups(np.zeros(len(s), np.int64), np.ones(len(s)))
                ids = np.concatenate([a.group, a.unanswered_group])
                shift = offset - (int(ids.min()) if ids.size else 0)
                groups.append(a.group + shift)
                open_groups.append(a.unanswered_group + shift)
                rates.append(a.rate)
                open_v.append(a.unanswered_v)
                offset = int(ids.max()) + shift + 1 if ids.size else offset
            answers = AnswerGroups(
                np.concatenate(groups),
                np.concatenate(rates),
                np.concatenate(open_groups),
                np.concatenate(open_v),
            )
        return cls(
            np.concatenate([s.score for s in samples]),
            np.concatenate([s.pred for s in samples]),
            np.concatenate([s.label for s in samples]),
            np.concatenate([s.v for s in samples]),
            np.concatenate([s.fpc for s in samples]),
            answers,
            frozenset().union(*(s.unanswered_strata for s in samples)),
        )

    def __len__(self) -> int:
        return int(self.score.shape[0])
