"""The simulated audit team's answering policy (pure: no broker)."""

import pytest

from monitor.sim.auditors import AuditPolicy


def test_drop_rate_by_prediction_skips_one_stratum_only() -> None:
    policy = AuditPolicy(drop_rate_by_pred=(0.0, 0.3), seed=5)
    ids = [f"r{i}" for i in range(4000)]
    assert not any(policy.drops(r, 0) for r in ids)
    share = sum(policy.drops(r, 1) for r in ids) / len(ids)
    assert 0.27 < share < 0.33
    # deterministic per request, and None when dropped
    dropped = next(r for r in ids if policy.drops(r, 1))
    assert policy.answer(dropped, 1, 1) is None
    assert policy.answer(dropped, 1, 0) == 1
    # a request without a prediction falls back to drop_rate (0 here)
    assert policy.answer(dropped, 1) == 1


def test_drop_rates_by_prediction_are_validated() -> None:
    with pytest.raises(ValueError, match=r"drop_rate_by_pred\[1\]"):
        AuditPolicy(drop_rate_by_pred=(0.0, 1.5))
