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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Int8Array = npt.NDArray[np.int8]
Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class AnswerGroups:
    """The second phase of a two-phase sample: per labeled item, its answer class and rate.

    Attributes:
        group: Class of requests the item's answer rate was estimated on (int64 ids).
        rate: The class's answer rate r_c in (0, 1] (float64), the same for every item of a class.
    """

    group: Int64Array
    rate: FloatArray

    def __post_init__(self) -> None:
        if self.group.shape != self.rate.shape:
            msg = f"AnswerGroups: group {self.group.shape} and rate {self.rate.shape} differ"
            raise ValueError(msg)
        if self.rate.size and not ((self.rate > 0.0).all() and (self.rate <= 1.0).all()):
            msg = "AnswerGroups.rate must be in (0, 1]"
            raise ValueError(msg)


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
    """

    score: FloatArray
    pred: Int8Array
    label: Int8Array
    v: FloatArray
    fpc: FloatArray
    answers: AnswerGroups | None = None

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

        Returns:
            The sample, with :attr:`answers` set.
        """
        p = _floats(pi)
        if p.size and not ((p > 0.0).all() and (p <= 1.0).all()):
            msg = "inclusion probabilities pi must be in (0, 1]"
            raise ValueError(msg)
        r = _floats(rate)
        answers = AnswerGroups(np.asarray(group, dtype=np.int64).reshape(-1), r)
        base = cls.create(score, pred, label, 1.0 / (p * r), 1.0 - p * r)
        return cls(base.score, base.pred, base.label, base.v, base.fpc, answers)

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
            groups, rates, offset = [], [], 0
            for s in samples:
                a = s.answers or AnswerGroups(np.zeros(len(s), np.int64), np.ones(len(s)))
                groups.append(a.group - (int(a.group.min()) if a.group.size else 0) + offset)
                rates.append(a.rate)
                offset = int(groups[-1].max()) + 1 if a.group.size else offset
            answers = AnswerGroups(np.concatenate(groups), np.concatenate(rates))
        return cls(
            np.concatenate([s.score for s in samples]),
            np.concatenate([s.pred for s in samples]),
            np.concatenate([s.label for s in samples]),
            np.concatenate([s.v for s in samples]),
            np.concatenate([s.fpc for s in samples]),
            answers,
        )

    def __len__(self) -> int:
        return int(self.score.shape[0])
