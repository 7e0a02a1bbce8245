"""Forged labels: only requests this monitor issued, and that are still open, take a label.

A deployment with a token secret (tokens are then required: no other switch) and two models
runs a stream; an auditor answers 60% of the requests. 1,000 forged labels are mixed in: for
records that were never sampled, for expired requests (with the right token), replayed for
another model or another record, with guessed request ids, without or with a wrong token, and
replays of answered labels with the other value. Each is rejected and counted by reason, and
no estimate moves.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from monitor.config.schema import Config, ModelConfig
from monitor.sim.workload import WorkloadSpec, generate
from tests.property.test_daemon_fuzz import _run
from tests.unit.test_daemon_loop import TOPICS

SECRET = "forgery-test-secret-42"
DEADLINE_S = 4 * 3600.0  # of the 8 h stream, the first half of the requests expire


def _cfg(data_dir: Path) -> Config:
    model = ModelConfig(name="default", labels_per_hour=40.0, expected_records_per_hour=500.0)
    return Config(
        models={"default": model, "other": dataclasses.replace(model, name="other")},
        default_model="default",
        data_dir=data_dir,
        label_park_grace_s=0.0,
        label_deadline_s=DEADLINE_S,
        label_token_secret=SECRET,
    )


def _enc(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def test_a_thousand_forged_labels_change_no_estimate(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    w = generate(WorkloadSpec(n=4000, hours=8.0, seed=3))
    scored = [_enc(r) for r in w.records()]
    truth = dict(w.truth_rows())
    log, engine, _ = _run(_cfg(tmp_path / "probe"), scored, [], [])
    engine.store.close()
    reqs = [json.loads(v) for _, v in log.records(TOPICS.requests)]
    assert all(r["token"] for r in reqs)  # on by default once a secret is configured
    answered = [r for i, r in enumerate(reqs) if i % 5 < 3]
    unanswered = [r for i, r in enumerate(reqs) if i % 5 >= 3]
    end = float(np.max(w.ts))
    expired = [r for r in unanswered if r["deadline"] < end]
    still_open = [r for r in unanswered if r["deadline"] >= end]
    assert len(expired) > 10 and len(still_open) > 10
    legit = [
        _enc({"request_id": r["request_id"], "label": truth[r["id"]], "token": r["token"]})
        for r in answered
    ]
    sampled = {r["id"] for r in reqs}
    unsampled = [i for i in truth if i not in sampled]

    def pick(items: list[Any], n: int) -> list[Any]:
        return [items[int(k)] for k in rng.integers(0, len(items), n)]

    def hexid() -> str:
        return bytes(rng.integers(0, 256, 16, dtype=np.uint8)).hex()

    forged: dict[str, list[bytes]] = {
        "unsampled record": [
            _enc({"id": i, "label": 1, "token": hexid()[:32]}) for i in pick(unsampled, 200)
        ],
        "expired request": [
            _enc({"request_id": r["request_id"], "label": 1, "token": r["token"]})
            for r in pick(expired, 150)
        ],
        "record of another model": [
            _enc({"id": r["id"], "model": "other", "label": 0}) for r in pick(reqs, 150)
        ],
        "request id with another model": [
            _enc({**_label(r, 1), "model": "other"}) for r in pick(still_open, 100)
        ],
        "guessed request id": [
            _enc({"request_id": hexid(), "label": 1, "token": hexid()[:32]}) for _ in range(150)
        ],
        "no or wrong token": [
            _enc({"request_id": r["request_id"], "label": 1, **({"token": hexid()} if k else {})})
            for k, r in enumerate(pick(still_open, 150))
        ],
    }
    accepted = [r for r in answered if r["deadline"] >= end]  # labelled in time
    replays = [_enc(_label(r, 1 - truth[r["id"]])) for r in pick(accepted, 100)]
    mixed = [v for vs in forged.values() for v in vs]
    order = rng.permutation(len(legit) + len(mixed))
    labels = [[*legit, *mixed][k] for k in order] + replays
    assert len(mixed) + len(replays) == 1000

    log_c, clean, reg_c = _run(_cfg(tmp_path / "clean"), scored, [], legit)
    log_f, forged_run, reg_f = _run(_cfg(tmp_path / "forged"), scored, [], labels)
    dead_clean = [json.loads(v)["reason"] for _, v in log_c.records(TOPICS.deadletter)]
    dead = collections.Counter(json.loads(v)["reason"] for _, v in log_f.records(TOPICS.deadletter))
    dead.subtract(dead_clean)  # legitimate labels that came too late count in both runs
    print(f"forged labels rejected by reason: {dict(dead)}")
    assert +dead == {  # a token is checked first: it is the HMAC of the request id alone
        "unknown_request": 100,  # the request id of a known request, named with another model
        "expired_request": 150,
        "bad_token": 150 + 200 + 150 + 150,  # no or wrong token, unsampled, other model, guessed
        "conflicting_label": 100,
    }
    assert sum(dead.values()) == 1000
    assert repr(forged_run.estimator.snapshot().windows) == repr(clean.estimator.snapshot().windows)
    for name in ("monitor_labels_received_total",):
        assert reg_f.get_sample_value(name, {"model": "default"}) == reg_c.get_sample_value(
            name, {"model": "default"}
        )
    clean.store.close()
    forged_run.store.close()


def _label(r: dict[str, Any], y: int) -> dict[str, Any]:
    return {"request_id": r["request_id"], "label": y, "token": r["token"]}
