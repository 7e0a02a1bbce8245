"""Variance-optimal q*, defensive mixing, budget inclusion and the hash decision."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from monitor.stats.selection import (
    defensive_mix,
    draw_with_replacement,
    hash_uniform,
    inclusion_for_budget,
    q_star_falpha,
    q_star_zero_one,
)


@pytest.fixture
def pool(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    score = rng.random(2000)
    pred = (score >= 0.5).astype(np.int8)
    return score, pred


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("g", [0.0, 0.3, 0.7, 1.0])
def test_q_star_is_corollary_2(pool: tuple[np.ndarray, np.ndarray], alpha: float, g: float) -> None:
    score, pred = pool
    q = q_star_falpha(score, pred, alpha, g)
    # seed 000 Eq. 12 with p(f|x) = s for f = 1, 1 - s for f = 0
    p_f = np.where(pred == 1, score, 1 - score)
    expected = np.where(
        pred == 1,
        np.sqrt(p_f * (1 - g) ** 2 + alpha**2 * (1 - p_f) * g**2),
        (1 - alpha) * np.sqrt((1 - p_f) * g**2),
    )
    np.testing.assert_allclose(q, expected, rtol=1e-12, atol=1e-15)
    # and Theorem 1 (Eq. 11) directly: sqrt(sum_y w^2 (l - G)^2 p(y|x))
    theorem = np.zeros_like(score)
    for y, p_y in ((1, score), (0, 1 - score)):
        w = alpha * pred + (1 - alpha) * y
        gain = (pred == y).astype(float)
        theorem += w**2 * (gain - g) ** 2 * p_y
    np.testing.assert_allclose(q, np.sqrt(theorem), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("g", [0.1, 0.5, 0.9])
def test_q_star_recall_is_corollary_3(pool: tuple[np.ndarray, np.ndarray], g: float) -> None:
    score, pred = pool
    q = q_star_falpha(score, pred, 0.0, g)
    p_f = np.where(pred == 1, score, 1 - score)
    expected = np.where(pred == 1, np.sqrt(p_f * (1 - g) ** 2), np.sqrt((1 - p_f) * g**2))
    np.testing.assert_allclose(q, expected, rtol=1e-12)


@pytest.mark.parametrize("g", [0.1, 0.5, 0.9])
def test_q_star_precision_is_corollary_4(pool: tuple[np.ndarray, np.ndarray], g: float) -> None:
    score, pred = pool
    q = q_star_falpha(score, pred, 1.0, g)
    p_f = np.where(pred == 1, score, 1 - score)
    expected = pred * np.sqrt((1 - 2 * g) * p_f + g**2)
    np.testing.assert_allclose(q, expected, rtol=1e-12, atol=1e-15)
    assert np.all(q[pred == 0] == 0.0)  # precision puts no mass on predicted negatives
    assert np.all(q[pred == 1] > 0.0)


@pytest.mark.parametrize("risk", [0.05, 0.2, 0.5])
def test_q_star_zero_one_is_derivation_1(pool: tuple[np.ndarray, np.ndarray], risk: float) -> None:
    score, pred = pool
    q = q_star_zero_one(score, pred, risk)
    p_f = np.where(pred == 1, score, 1 - score)
    np.testing.assert_allclose(q, np.sqrt((1 - 2 * risk) * (1 - p_f) + risk**2), rtol=1e-12)
    if risk == 0.5:  # "active risk estimation degenerates to uniform sampling"
        np.testing.assert_allclose(q, 0.5)


def test_q_star_rejects_bad_g(pool: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="g must be"):
        q_star_falpha(pool[0], pool[1], 0.5, float("nan"))


def test_defensive_mix(pool: tuple[np.ndarray, np.ndarray]) -> None:
    score, pred = pool
    q = q_star_falpha(score, pred, 1.0, 0.6)
    mixed = defensive_mix(q, 0.1)
    assert mixed.mean() == pytest.approx(1.0)
    assert mixed.min() == pytest.approx(0.1)  # the predicted negatives keep lambda
    np.testing.assert_allclose(mixed, 0.9 * q / q.mean() + 0.1)
    np.testing.assert_allclose(defensive_mix(q, 0.3, mean_q=2.0), 0.7 * q / 2.0 + 0.3)
    np.testing.assert_allclose(defensive_mix(q, 1.0), 1.0)
    np.testing.assert_allclose(defensive_mix(np.zeros(5), 0.0), 1.0)  # no information: uniform
    with pytest.raises(ValueError, match="lam"):
        defensive_mix(q, 1.5)


def test_inclusion_for_budget_with_caps(rng: np.random.Generator) -> None:
    q = rng.pareto(1.0, 5000) + 0.01  # heavy tail: many caps bind
    for budget in (10.0, 100.0, 400.0, 2500.0, 4999.0):
        pi, kappa = inclusion_for_budget(q, budget)
        assert pi.sum() == pytest.approx(budget, rel=1e-9)
        assert np.all((pi > 0) & (pi <= 1))
        np.testing.assert_allclose(pi, np.minimum(1.0, kappa * q))
        naive = np.minimum(1.0, budget / q.sum() * q).sum()
        if budget >= 100.0:  # caps bind: a single proportional kappa falls short of the budget
            assert np.any(pi == 1.0)
            assert naive < 0.99 * budget
    capped, _ = inclusion_for_budget(q, 400.0)
    uncapped = capped < 1.0
    ratio = capped[uncapped] / q[uncapped]
    np.testing.assert_allclose(ratio, ratio[0])  # proportional to q below the cap


def test_inclusion_for_budget_edge_cases() -> None:
    q = np.array([0.0, 1.0, 2.0, 3.0])
    pi, _ = inclusion_for_budget(q, 10.0)  # budget covers everything with q > 0
    np.testing.assert_array_equal(pi, [0.0, 1.0, 1.0, 1.0])
    pi, kappa = inclusion_for_budget(q, 0.0)
    assert kappa == 0.0 and not pi.any()
    pi, _ = inclusion_for_budget(np.ones(10), 2.5)
    np.testing.assert_allclose(pi, 0.25)
    with pytest.raises(ValueError, match="budget"):
        inclusion_for_budget(q, -1.0)
    with pytest.raises(ValueError, match="q must"):
        inclusion_for_budget(np.array([1.0, -1.0]), 1.0)


def test_draw_with_replacement(rng: np.random.Generator) -> None:
    q = np.array([1.0, 0.0, 3.0, 6.0])
    idx = draw_with_replacement(q, 100_000, rng)
    assert idx.dtype == np.int64
    freq = np.bincount(idx, minlength=4) / idx.size
    np.testing.assert_allclose(freq, q / q.sum(), atol=0.01)
    assert freq[1] == 0.0
    with pytest.raises(ValueError, match="mass"):
        draw_with_replacement(np.zeros(3), 5, rng)


def _fnv_reference(salt: str, record_id: str) -> float:
    """Plain-Python reference of the documented hash (one id at a time)."""
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    data = (
        salt.encode("utf-8", "surrogatepass") + b"\xff" + record_id.encode("utf-8", "surrogatepass")
    )
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & mask
    h ^= (len(record_id.encode("utf-8", "surrogatepass")) * 0x9E3779B97F4A7C15) & mask
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
    h ^= h >> 31
    return (h >> 11) / 2.0**53


ODD_IDS = ["", "a", "é", "日本語-ид-🙂", "x" * 5000, "a\x00", "a", "\ud800lone", "id with space"]


def test_hash_matches_the_documented_algorithm() -> None:
    got = hash_uniform(ODD_IDS, "salt|model")
    expected = [_fnv_reference("salt|model", i) for i in ODD_IDS]
    assert got.tolist() == expected
    assert got[1] == got[6]  # same id, same number
    assert got[1] != got[5]  # a trailing NUL is part of the id
    assert np.all((got >= 0.0) & (got < 1.0))


def test_hash_accepts_numpy_strings_and_empty_input() -> None:
    ids = np.array(["r1", "r2", "record-3"])
    np.testing.assert_array_equal(hash_uniform(ids, "s"), hash_uniform(list(ids), "s"))
    assert hash_uniform([], "s").shape == (0,)


def test_hash_is_salt_sensitive() -> None:
    ids = [f"rec-{i}" for i in range(2000)]
    a = hash_uniform(ids, "salt-a")
    b = hash_uniform(ids, "salt-b")
    assert not np.any(a == b)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.1
    # the salt/id boundary is unambiguous
    assert hash_uniform(["bc"], "a")[0] != hash_uniform(["c"], "ab")[0]


def test_hash_is_deterministic_in_a_fresh_process() -> None:
    ids = ["rec-1", "ünïcode", "", "z" * 300]
    code = (
        "import json, sys; from monitor.stats.selection import hash_uniform; "
        "print(json.dumps(hash_uniform(json.loads(sys.argv[1]), 'salt').tolist()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(ids)],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    assert json.loads(out.stdout) == hash_uniform(ids, "salt").tolist()


def test_hash_is_uniform() -> None:
    ids = [f"order-{i:08d}" for i in range(100_000)]  # fixed, highly regular ids
    u = hash_uniform(ids, "prod|fraud-v3")
    assert stats.kstest(u, "uniform").pvalue > 0.001
    assert len(np.unique(u)) == len(u)
    # consecutive ids are not correlated
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02


def test_hash_of_mixed_lengths_matches_reference(rng: np.random.Generator) -> None:
    lengths = np.concatenate([rng.integers(0, 120, 300), [700, 701, 1500, 4000, 4000, 9000]])
    alphabet = np.array(list("abcXYZ019-_é日🙂"))
    ids = ["".join(rng.choice(alphabet, n)) for n in lengths]
    got = hash_uniform(ids, "mix")
    assert got.tolist() == [_fnv_reference("mix", i) for i in ids]
