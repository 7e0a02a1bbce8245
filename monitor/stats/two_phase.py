"""Jackknife bias of the ratio when the answer rates are estimated (two-phase sampling; pure).

The two-phase estimate of :mod:`monitor.stats.response` weights an answered request i of class
c by ``1 / (pi_i r_c)`` with the *estimated* answer rate ``r_c = S_c / A_c``, where
``A_c = sum(1/pi)`` over the class's requests and ``S_c`` the same over its answered ones. With
``T_c(x) = sum(x/pi)`` over the answered requests the ratio is a function of class totals,

    G = N / D,  N = sum_c A_c T_c(w l) / S_c,  D = sum_c A_c T_c(w) / S_c,

and its O(1/n) bias comes from both phases: from which requests were drawn (A, S and T move
together) and from which of them were answered (S and T move, A does not). The one-phase
jackknife of :func:`monitor.stats.interval.ratio_jackknife_bias` with the rates held fixed sees
only raw values ``w / (pi r)``, not their deviations from the class means that the estimated
rate leaves, and over-corrects. Measured on the grid of ``benchmarks.delays`` (3,000 audits
over 150 windows per case, answer classes of 5): with half of the predicted negatives answered,
recall at 5% positives read -0.049 +- 0.019 standard errors (F1 -0.046), and with half of the
predicted positives answered recall at 1% read -0.080 +- 0.017 (F1 -0.053); the same ratio with
the true answer probabilities as a one-phase design, +0.031 and -0.010. The correction below
gives +0.013 / +0.026 and -0.030 / -0.001 on the same samples; coverage moved by at most
0.001 (recall / F1 0.944 / 0.926 -> 0.943 / 0.925; 0.963 / 0.953 unchanged).

Let request i contribute ``a_i`` to the A totals when drawn and ``t_i`` to S and T when also
answered (I_i ~ Bernoulli(pi_i), J_i ~ Bernoulli(r_i) given I_i). A second-order expansion of G
in the totals gives ``bias ~ 1/2 sum_i tr(H Cov(z_i))`` with ``z_i = I a_i + I J t_i`` and
``Cov(z_i) = pi(1 - pi) aa' + pi r (1 - pi r) tt' + pi r (1 - pi) (at' + ta')`` (H: the Hessian
of G). Its unbiased estimate from the sample is reached by deletions: with Q the change of G by a
deletion minus its linear part (the second-order part ``1/2 x'Hx`` of removing x),

    bias_J = sum_{answered} [ (1 - pi_i) Q_i(delete) + pi_i (1 - r_c) Q_i(unanswer) ]
           + sum_{unanswered} (1 - pi_k) Q_k(delete),

"delete" removing the request (a + t), "unanswer" only its answer (t): the terms weigh
``(1 - pi) aHa / 2``, ``(1 - pi r) tHt / 2`` and ``(1 - pi) aHt`` as the expansion asks. Each
deleted G is recomputed exactly, the answer rate of the class with it (the replicate repeats the
non-response adjustment: Rao and Shao 1992, "Jackknife variance estimation with survey data
under hot deck imputation", Biometrika 79; Valliant, Dever and Kreuter 2013, Practical Tools for
Designing and Weighting Survey Samples, Sec. 15.4), so a heavy item keeps G_(-i) from being
pulled towards its own gain as in the one-phase form. With every rate 1 and nothing unanswered
only the first term is left and it is exactly the one-phase jackknife
``sum(fpc v^2 w^2 (G_(-i) - l)) / (sum v w)^2``. A class with one answer has no replicate without
it (its term is left out); an unanswered request of a class without answers carries no weight.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.stats.sample import AnswerGroups

FloatArray = npt.NDArray[np.float64]


def _second_order(
    n_new: FloatArray, d_new: FloatArray, dn: FloatArray, dd: FloatArray, *, g: float, d: float
) -> FloatArray:
    """``N'/D' - G - (dN - G dD)/D`` where defined (D' > 0), else 0."""
    ok = d_new > 0.0
    ratio = np.divide(n_new, d_new, out=np.full_like(n_new, g), where=ok)
    out: FloatArray = np.where(ok, ratio - g - (dn - g * dd) / d, 0.0)
    return out


def two_phase_jackknife_bias(
    gain: FloatArray, weight: FloatArray, v: FloatArray, answers: AnswerGroups
) -> float:
    """Jackknife estimate of E[G_hat] - G over both phases (module docstring).

    Args:
        gain: Gains ``l_i`` of the answered requests.
        weight: Their measure weights ``w_i >= 0``.
        v: Their weights ``1/(pi_i r_c)``, unscaled, as ``LabeledSample.two_phase`` sets them
            (1/pi is recovered as ``v r``).
        answers: Class and rate of each answered request, and the unanswered requests' classes
            and weights 1/pi (without them, their deletions are left out).

    Returns:
        The estimated bias; 0 when no answered request carries weight.
    """
    v1 = v * answers.rate  # 1 / pi
    pi = np.minimum(1.0 / v1, 1.0)
    open_v = answers.unanswered_v
    ids, inv = np.unique(
        np.concatenate([answers.group, answers.unanswered_group]), return_inverse=True
    )
    c, c_open = inv[: v1.size], inv[v1.size :]
    k = ids.size
    s_c = np.bincount(c, weights=v1, minlength=k)
    t_n = np.bincount(c, weights=v1 * weight * gain, minlength=k)
    t_d = np.bincount(c, weights=v1 * weight, minlength=k)
    has = s_c > 0.0
    m_n = np.divide(t_n, s_c, out=np.zeros(k), where=has)
    m_d = np.divide(t_d, s_c, out=np.zeros(k), where=has)
    r_c = np.ones(k)
    r_c[c] = answers.rate
    a_c = s_c / r_c
    n_tot, d_tot = float(np.dot(a_c, m_n)), float(np.dot(a_c, m_d))
    if not d_tot > 0.0:
        return 0.0
    g = n_tot / d_tot
    wl = weight * gain
    ac, sc, mn, md, rc = a_c[c], s_c[c], m_n[c], m_d[c], r_c[c]
    rest = sc - v1
    alone = rest <= 1e-12 * sc  # the class's only answer: no replicate without it
    rest = np.where(alone, 1.0, rest)
    sn, sd = t_n[c] - v1 * wl, t_d[c] - v1 * weight  # the class's answered sums without i
    # delete request i: A, S and T of its class lose it (the rate is re-estimated)
    q_del = _second_order(
        n_tot - ac * mn + (ac - v1) * sn / rest,
        d_tot - ac * md + (ac - v1) * sd / rest,
        -v1 * mn - v1 / rc * (wl - mn),
        -v1 * md - v1 / rc * (weight - md),
        g=g,
        d=d_tot,
    )
    # unanswer request i: S and T lose it, A keeps it
    q_un = _second_order(
        n_tot - ac * mn + ac * sn / rest,
        d_tot - ac * md + ac * sd / rest,
        -v1 / rc * (wl - mn),
        -v1 / rc * (weight - md),
        g=g,
        d=d_tot,
    )
    q_del[alone] = 0.0
    q_un[alone] = 0.0
    bias = float(np.dot(1.0 - pi, q_del) + np.dot(pi * (1.0 - rc), q_un))
    if open_v.size:  # delete unanswered request k: only A of its class loses it
        on, od = m_n[c_open], m_d[c_open]
        q_open = _second_order(
            n_tot - open_v * on, d_tot - open_v * od, -open_v * on, -open_v * od, g=g, d=d_tot
        )
        bias += float(np.dot(1.0 - np.minimum(1.0 / open_v, 1.0), q_open))
    return bias
