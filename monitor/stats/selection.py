"""Which items to audit: variance-optimal q*, defensive mixing, inclusion probabilities, hashing.

* q* for F_alpha: seed 000 Corollary 2 (Corollaries 3 and 4 for alpha = 0 and 1), with the
  model's score s standing in for p(y=1|x) and the intrinsic G_theta for G (seed 000 Sec. 2.2).
* q* for the zero-one risk: seed 002 Derivation 1.
* Defensive mixing with uniform (DESIGN.md): every item keeps a positive probability.
* Poisson sampling: pi = min(1, kappa q) with kappa set by the label budget; or draws with
  replacement from a fixed pool (seed 000 Algorithm 1).
* A deterministic uniform number per record id, so a replay makes the same decisions.
* Selection from recalibrated probabilities (DESIGN.md, "Learning from the labels"): q* at
  p_hat = m(s) (``monitor.stats.calibration``), G from the recalibrated expected counts, and a
  defensive share that grows when the labels show the probabilities are poor.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def q_star_falpha(score: npt.ArrayLike, pred: npt.ArrayLike, alpha: float, g: float) -> FloatArray:
    """Variance-optimal sampling weights for F_alpha, unnormalised (seed 000, Corollary 2, Eq. 12).

    With s = p(y=1|x; theta) (so p(f|x) = s for f = 1 and 1 - s for f = 0) and p(x) = 1/m:

        f = 1:  q* ∝ sqrt( s (1 - G)^2 + alpha^2 (1 - s) G^2 )
        f = 0:  q* ∝ (1 - alpha) G sqrt(s)

    alpha = 0 gives Corollary 3 (recall), alpha = 1 Corollary 4 (precision, zero mass on f = 0).

    Args:
        score: Scores s in [0, 1].
        pred: Predictions f in {0, 1}.
        alpha: F_alpha trade-off in [0, 1].
        g: The intrinsic F_alpha G_theta in [0, 1] (see ``falpha.intrinsic_falpha``).

    Returns:
        Non-negative weights proportional to q*; normalise with :func:`defensive_mix`.
    """
    if not 0.0 <= g <= 1.0:
        msg = f"g must be in [0, 1], got {g}"
        raise ValueError(msg)
    s = np.asarray(score, dtype=np.float64)
    f = np.asarray(pred).astype(bool)
    positive = np.sqrt(s * (1.0 - g) ** 2 + alpha**2 * (1.0 - s) * g**2)
    negative = (1.0 - alpha) * g * np.sqrt(s)
    return np.where(f, positive, negative)


def q_star_zero_one(score: npt.ArrayLike, pred: npt.ArrayLike, risk: float) -> FloatArray:
    """Variance-optimal sampling weights for the zero-one risk (seed 002, Derivation 1, Eq. 12).

        q* ∝ sqrt( (1 - 2R) (1 - p(f|x; theta)) + R^2 ),

    with p(f|x) = s for f = 1 and 1 - s for f = 0, and R the intrinsic zero-one risk.
    Unnormalised.
    """
    s = np.asarray(score, dtype=np.float64)
    f = np.asarray(pred).astype(bool)
    p_wrong = np.where(f, 1.0 - s, s)
    return np.sqrt(np.maximum((1.0 - 2.0 * risk) * p_wrong + risk**2, 0.0))


def defensive_mix(q: npt.ArrayLike, lam: float, mean_q: float | None = None) -> FloatArray:
    """Mix q* with uniform: q = (1 - lam) q*/mean_q + lam (DESIGN.md, "Defensive mixing").

    With ``mean_q=None`` the mean of q over the given pool is used, so the result has mean 1
    there; a stream passes the mean of q* over an earlier bucket. If ``mean_q`` is not positive
    (q* is 0 everywhere), q* is replaced by uniform. With lam > 0 every item gets q >= lam.

    Args:
        q: Unnormalised q* (>= 0).
        lam: Share of uniform sampling in [0, 1].
        mean_q: Normaliser of q*; None for the mean of ``q``.

    Returns:
        The mixed weights (mean 1 over the pool when ``mean_q`` is None).
    """
    if not 0.0 <= lam <= 1.0:
        msg = f"lam must be in [0, 1], got {lam}"
        raise ValueError(msg)
    qq = np.asarray(q, dtype=np.float64)
    m = float(qq.mean()) if mean_q is None and qq.size else mean_q
    if m is None or not m > 0.0 or not np.isfinite(m):
        return np.ones_like(qq)
    return (1.0 - lam) * qq / m + lam


#: Model likelihood above which active selection pays off (seed 002, Sec. 4.1).
LIKELIHOOD_FLOOR = 0.6
#: Largest defensive share the labels can ask for (q keeps half of q*'s shape at worst).
MAX_DEFENSIVE = 0.5
#: Model mistakes among the labels at which the evidence term of the defensive share halves.
PRIOR_ERRORS = 10.0


def defensive_share(
    lam0: float,
    likelihood: float,
    calibration_error: float = 0.0,
    errors: float = math.inf,
    *,
    floor: float = LIKELIHOOD_FLOOR,
    lam_max: float = MAX_DEFENSIVE,
    prior_errors: float = PRIOR_ERRORS,
) -> float:
    """The defensive share from the labels' verdict on the (recalibrated) probabilities.

        lam = max( min(lam_max, lam0 + max(0, floor - L) + ECE),
                   lam0 + (lam_max - lam0) k0 / (k0 + k) )

    with L the design-weighted model likelihood of the probabilities that q* is evaluated at
    (seed 002, Sec. 4.1: below about 0.6 active selection stops paying off), ECE their
    design-weighted calibration error (``monitor.stats.calibration``; DESIGN.md, "Learning from
    the labels"), and k the number of the model's mistakes (f != y) among the labels so far: a
    map is only as good as the mistakes it was fitted on (an over-confident model hides its false
    negatives where q* at its own scores never looks), so while few were seen the design stays
    close to uniform (``k0 = prior_errors``). NaN inputs (no labels yet) add nothing; no labels
    at all (k = 0) give lam_max. Bounded: ``lam0 <= lam <= max(lam0, lam_max)``, so lam > 0
    whenever lam0 > 0 (every record keeps a positive probability).

    Examples:
        >>> defensive_share(0.1, 0.9)
        0.1
        >>> round(defensive_share(0.1, 0.45, 0.05), 6)
        0.3
        >>> defensive_share(0.1, 0.1, 0.3)
        0.5
        >>> round(defensive_share(0.1, 0.9, 0.0, errors=10), 6)
        0.3
    """
    if not 0.0 < lam0 <= 1.0:
        msg = f"lam0 must be in (0, 1], got {lam0}"
        raise ValueError(msg)
    grow = 0.0
    if math.isfinite(likelihood):
        grow += max(0.0, floor - likelihood)
    if math.isfinite(calibration_error):
        grow += max(0.0, calibration_error)
    evidence = 0.0
    if errors < math.inf:
        evidence = (lam_max - lam0) * prior_errors / (prior_errors + max(errors, 0.0))
    return max(lam0, min(lam_max, lam0 + grow), lam0 + evidence)


def inclusion_for_budget(q: npt.ArrayLike, budget: float) -> tuple[FloatArray, float]:
    """Solve kappa so that sum(min(1, kappa q)) = budget (Poisson sampling with caps).

    Items whose kappa q would exceed 1 are capped at pi = 1 and the rest of the budget is spread
    over the others; this is solved exactly by sorting q in decreasing order: with the k largest
    items capped, kappa_k = (budget - k) / sum(q over the rest), and the answer is the smallest
    k with kappa_k q_(k+1) <= 1. If the budget covers every item with q > 0, all of them get
    pi = 1 (and the expected count is below the budget).

    Args:
        q: Non-negative selection weights.
        budget: Expected number of labels, >= 0.

    Returns:
        ``(pi, kappa)`` with ``pi = min(1, kappa q)`` (computed on q / max(q), so no overflow;
        ``kappa`` may be ``inf`` for denormal q).
    """
    qq = np.asarray(q, dtype=np.float64)
    if budget < 0.0 or not np.isfinite(budget):
        msg = f"budget must be finite and >= 0, got {budget}"
        raise ValueError(msg)
    if qq.size and (qq.min() < 0.0 or not np.isfinite(qq).all()):
        msg = "q must be finite and >= 0"
        raise ValueError(msg)
    positive = qq[qq > 0.0]
    if budget == 0.0 or positive.size == 0:
        return np.zeros_like(qq), 0.0
    top = float(positive.max())
    with np.errstate(over="ignore", divide="ignore"):
        if budget >= positive.size:
            kappa = float(np.float64(1.0) / positive.min())
            return (qq > 0.0).astype(np.float64), kappa
    desc = np.sort(positive)[::-1] / top  # scale-free: kappa is rescaled at the end
    # tail[k] = sum of desc[k:], the mass left after capping the k largest
    tail = np.cumsum(desc[::-1])[::-1]
    k = np.arange(desc.size)
    # kappa_k desc[k] <= 1, multiplied out: kappa_k itself overflows when the tail is denormal
    ok = (budget - k) * desc <= tail * (1.0 + 1e-12)
    first = int(np.argmax(ok))  # exists: at k = ceil(budget) - 1 < size the check holds
    with np.errstate(over="ignore", divide="ignore"):
        pi = np.minimum(1.0, (budget - first) * (qq / top) / tail[first])
        kappa = float(np.float64(budget - first) / tail[first] / top)
    return pi, kappa


def draw_with_replacement(q: npt.ArrayLike, n: int, rng: np.random.Generator) -> IntArray:
    """Draw n pool indices with replacement, item i with probability q_i / sum(q) (seed 000 Alg. 1).

    Args:
        q: Non-negative selection weights over the pool.
        n: Number of draws.
        rng: The random generator.

    Returns:
        The indices of the draws (int64); the per-draw probability of draw j is
        ``q[idx[j]] / q.sum()`` (pass it to ``LabeledSample.with_replacement``).
    """
    qq = np.asarray(q, dtype=np.float64)
    total = float(qq.sum())
    if not total > 0.0:
        msg = "q must have positive mass"
        raise ValueError(msg)
    cdf = np.cumsum(qq / total)
    cdf[-1] = 1.0
    return np.searchsorted(cdf, rng.random(n), side="right").astype(np.int64)


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_SALT_END = 0xFF  # never a byte of UTF-8, so (salt, id) pairs cannot alias
_SCALAR_TAIL = 4  # at most this many ids still active: finish them in plain Python


def _fnv1a_scalar(data: bytes, h: int = _FNV_OFFSET) -> int:
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


def _splitmix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_uniform(ids: npt.NDArray[np.str_] | Sequence[str], salt: str) -> FloatArray:
    r"""A uniform number in [0, 1) per record id, from a salted 64-bit hash; vectorised.

    Algorithm (deterministic across processes, platforms and numpy versions; only unsigned
    64-bit integer arithmetic with wraparound):

    1. h0 = FNV-1a-64 over ``utf8(salt) + b"\xff"`` (0xFF never occurs in UTF-8);
    2. for each id, h = FNV-1a-64 continued from h0 over ``utf8(id)`` (lone surrogates are
       encoded with ``surrogatepass``): ``h = (h ^ byte) * 0x100000001b3 mod 2^64``. The loop runs
       over byte *positions*, vectorised across ids (ids sorted by length so each step touches a
       contiguous prefix), so the cost is the total number of bytes, not records x longest id
       (the last few very long ids are finished with the same arithmetic on Python ints);
    3. h ^= len(utf8(id)) * 0x9e3779b97f4a7c15; then the splitmix64 finaliser (avalanche);
    4. u = (h >> 11) / 2^53, the top 53 bits: exactly representable, in [0, 1).

    The per-record work in Python is only ``str.encode`` through ``map`` (no hashing).

    Args:
        ids: Record ids.
        salt: The deployment's salt (e.g. ``salt + "|" + model``).

    Returns:
        float64 array of the same length, each in [0, 1).
    """
    id_list = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    count = len(id_list)
    h0 = _fnv1a_scalar(salt.encode("utf-8", "surrogatepass") + bytes([_SALT_END]))
    if count == 0:
        return np.zeros(0, dtype=np.float64)
    encode = functools.partial(str.encode, encoding="utf-8", errors="surrogatepass")
    encoded = list(map(encode, map(str, id_list)))
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=count)
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    starts = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    order = np.argsort(-lengths, kind="stable")
    sorted_len = lengths[order]
    sorted_start = starts[order]
    h = np.full(count, h0, dtype=np.uint64)
    prime = np.uint64(_FNV_PRIME)
    # active[j] = number of ids longer than j (a prefix of the length-sorted order)
    max_len = int(sorted_len[0])
    active = np.searchsorted(-sorted_len, -np.arange(max_len), side="left")
    for j in range(max_len):
        k = int(active[j])
        if k <= _SCALAR_TAIL and max_len - j > 64:
            # a few very long ids left: finish them byte by byte (same arithmetic)
            for row in range(k):
                start = int(sorted_start[row])
                rest = flat[start + j : start + int(sorted_len[row])].tobytes()
                h[row] = np.uint64(_fnv1a_scalar(rest, int(h[row])))
            break
        byte = flat[sorted_start[:k] + j].astype(np.uint64)
        h[:k] = (h[:k] ^ byte) * prime
    h ^= sorted_len.astype(np.uint64) * np.uint64(_GOLDEN)
    h = _splitmix64(h)
    u = np.empty(count, dtype=np.float64)
    u[order] = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u
