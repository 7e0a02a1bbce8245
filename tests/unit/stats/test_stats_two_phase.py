"""Jackknife bias over both phases (monitor.stats.two_phase)."""

import numpy as np
import numpy.typing as npt
import pytest

from monitor.stats.falpha import falpha_gain, falpha_weight
from monitor.stats.interval import ratio_jackknife_bias
from monitor.stats.response import answer_classes, response_sample
from monitor.stats.sample import AnswerGroups, LabeledSample
from monitor.stats.two_phase import two_phase_jackknife_bias

FloatArray = npt.NDArray[np.float64]


def _ratio(
    v1: FloatArray,
    cls: npt.NDArray[np.int64],
    ans: npt.NDArray[np.bool_],
    x: tuple[FloatArray, FloatArray],
    *,
    drawn: FloatArray,
    answered: FloatArray,
) -> float:
    """G = sum_c A_c T_c(x_n)/S_c / sum_c A_c T_c(x_d)/S_c with ``x = (x_n, x_d)``.

    Request i's part of A is scaled by ``drawn[i]``, its part of S and T by ``answered[i]``.
    """
    k = int(cls.max()) + 1
    a = np.bincount(cls, weights=drawn * v1, minlength=k)
    on = answered * v1 * ans
    s = np.bincount(cls, weights=on, minlength=k)
    t_n = np.bincount(cls, weights=on * x[0], minlength=k)
    t_d = np.bincount(cls, weights=on * x[1], minlength=k)
    has = s > 0
    n = float(np.dot(a[has], t_n[has] / s[has]))
    d = float(np.dot(a[has], t_d[has] / s[has]))
    return n / d


def _brute_force(
    pi: FloatArray,
    cls: npt.NDArray[np.int64],
    ans: npt.NDArray[np.bool_],
    gain: FloatArray,
    w: FloatArray,
) -> float:
    """The module's sum of second-order parts, each deletion and its derivative done directly."""
    v1 = 1.0 / pi
    x = (w * gain, w)
    ones = np.ones(pi.size)
    g = _ratio(v1, cls, ans, x, drawn=ones, answered=ones)
    eps = 1e-6
    total = 0.0
    for i in range(pi.size):
        same = cls == cls[i]
        if ans[i] and np.count_nonzero(ans & same) == 1:
            continue  # the class's only answer
        rate = np.sum(v1[ans & same]) / np.sum(v1[same])
        # delete the request (weight 1 - pi), then, if answered, only its answer (pi (1 - r))
        for phase_one, share in ((True, 1.0 - pi[i]), (False, pi[i] * (1.0 - rate))):
            if not phase_one and not ans[i]:
                continue
            step = {}
            for size in (1.0, eps):
                drawn, answered = ones.copy(), ones.copy()
                answered[i] -= size
                if phase_one:
                    drawn[i] -= size
                step[size] = _ratio(v1, cls, ans, x, drawn=drawn, answered=answered) - g
            total += share * (step[1.0] - step[eps] / eps)
    return total


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_bias_is_the_sum_of_each_deletions_second_order_part(
    rng: np.random.Generator, alpha: float
) -> None:
    n = 40
    pred = (rng.random(n) < 0.4).astype(np.int64)
    label = np.where(pred == 1, rng.random(n) < 0.7, rng.random(n) < 0.2).astype(np.int64)
    pi = np.where(pred == 1, rng.uniform(0.5, 1.0, n), rng.uniform(0.05, 0.3, n))
    ans = rng.random(n) < np.where(pred == 1, 0.8, 0.6)
    bucket = rng.integers(0, 2, n)
    cls = answer_classes(bucket, pred, pi, ans, 3)
    gain, w = falpha_gain(pred, label), falpha_weight(pred, label, alpha)
    y = np.where(ans, label, -1)
    sample = response_sample(np.full(n, 0.5), pred, y, pi, bucket, min_answers=3)
    assert sample.answers is not None
    got = two_phase_jackknife_bias(gain[ans], w[ans], sample.v, sample.answers)
    want = _brute_force(pi, cls, ans, gain, w)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-9)
    assert abs(got) > 1e-6  # the example is not trivial


def test_everything_answered_is_the_one_phase_jackknife(rng: np.random.Generator) -> None:
    n = 60
    pred = (rng.random(n) < 0.5).astype(np.int64)
    label = (rng.random(n) < 0.5).astype(np.int64)
    pi = rng.uniform(0.05, 1.0, n)
    gain, w = falpha_gain(pred, label), falpha_weight(pred, label, 0.5)
    answers = AnswerGroups(rng.integers(0, 4, n), np.ones(n))
    got = two_phase_jackknife_bias(gain, w, 1.0 / pi, answers)
    assert got == pytest.approx(ratio_jackknife_bias(gain, w, 1.0 / pi, 1.0 - pi), rel=1e-9)


def test_unanswered_requests_of_a_class_without_answers_change_nothing() -> None:
    gain, w, v = np.array([1.0, 0.0, 1.0]), np.ones(3), np.array([2.0, 4.0, 4.0])
    base = AnswerGroups(np.array([0, 0, 0]), np.ones(3))
    with_open = AnswerGroups(np.array([0, 0, 0]), np.ones(3), np.array([7]), np.array([10.0]))
    assert two_phase_jackknife_bias(gain, w, v, with_open) == two_phase_jackknife_bias(
        gain, w, v, base
    )


def test_concat_keeps_the_unanswered_requests_with_their_classes() -> None:
    one = LabeledSample.two_phase(
        [0.5], [1], [1], [0.5], rate=[0.5], group=[3], unanswered_pi=[0.5], unanswered_group=[3]
    )
    two = LabeledSample.poisson([0.5], [0], [0], [0.25])
    both = LabeledSample.concat([one, two])
    assert both.answers is not None
    assert both.answers.group.tolist() == [0, 1]
    assert both.answers.unanswered_group.tolist() == [0]
    assert both.answers.unanswered_v.tolist() == [2.0]
    with pytest.raises(ValueError, match="unanswered_v"):
        AnswerGroups(np.zeros(1, np.int64), np.ones(1), np.zeros(1, np.int64), np.array([0.5]))
