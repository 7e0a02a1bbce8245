"""The simulated audit team against the real broker: requests in, labels out."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from monitor.config.schema import TopicsConfig
from monitor.errors import InputFileError
from monitor.sim.auditors import (
    AuditPolicy,
    SimulatedAuditTeam,
    load_truth,
    request_uniform,
    write_truth,
)
from monitor.sim.embedded_broker import EmbeddedBroker

pytestmark = pytest.mark.integration

FAST_GROUP = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}  # tests only (Tansu)


def _request(i: int, record_id: str) -> dict[str, Any]:
    return {
        "request_id": f"req-{i:05d}",
        "id": record_id,
        "model": "default",
        "segment": "",
        "score": 0.5,
        "pred": 1,
        "pi": 0.1,
        "ts": 1_767_225_600.0 + i,
        "bucket": 490_896,
        "deadline": 1_767_225_600.0 + 86_400,
        "payload": None,
    }


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for value in values:
            producer.send(topic, value=value)
        producer.flush(10)
    finally:
        producer.close(5)
    return time.monotonic()


def _consume(bootstrap: str, topic: str, want: int, timeout_s: float) -> list[tuple[float, Any]]:
    """(arrival monotonic time, decoded value, key) of up to ``want`` records."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    out: list[tuple[float, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                for m in messages:
                    value = json.loads(m.value)
                    assert m.key == value["request_id"].encode()
                    out.append((time.monotonic(), value))
    finally:
        consumer.close()
    return out


def test_answers_follow_truth_delay_drop_and_error_rates(
    broker: EmbeddedBroker, make_topics: Callable[..., TopicsConfig]
) -> None:
    topics = make_topics()
    n = 600
    truth = {f"rec-{i}": i % 3 == 0 for i in range(n)}
    policy = AuditPolicy(delay_s=1.0, drop_rate=0.2, error_rate=0.1, seed=11, labeler="ann")
    requests = [json.dumps(_request(i, f"rec-{i}")).encode() for i in range(n)]
    requests += [json.dumps(_request(n + i, f"ghost-{i}")).encode() for i in range(7)]
    requests[1] = json.dumps({**_request(1, "rec-1"), "token": "tok-1"}).encode()
    requests += [b"not json", b'{"request_id": 5, "id": "rec-1"}', requests[0]]  # bad x2, replay
    with SimulatedAuditTeam(
        {k: int(v) for k, v in truth.items()},
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=policy,
    ) as team:
        sent_at = _produce(broker.bootstrap, topics.requests, requests)
        expected_dropped = {f"req-{i:05d}" for i in range(n) if policy.drops(f"req-{i:05d}")}
        want = n - len(expected_dropped)
        labels = _consume(broker.bootstrap, topics.labels, want, timeout_s=30)
        time.sleep(0.5)  # nothing more may come (dropped stay dropped, replay not re-answered)
        extra = _consume(broker.bootstrap, topics.labels, want + 1, timeout_s=1.5)
        stats = team.stats

    assert len(labels) == want and len(extra) == want
    answered = {v["request_id"]: v for _, v in labels}
    assert len(answered) == want, "each request answered once"
    assert set(answered).isdisjoint(expected_dropped)
    # drop rate honoured approximately (binomial: 600 x 0.2 = 120 +/- ~30)
    assert 90 <= len(expected_dropped) <= 150
    wrong = {rid for rid, v in answered.items() if v["label"] != int(truth[f"rec-{int(rid[4:])}"])}
    assert wrong == {rid for rid in answered if policy.errs(rid)}, "flips are the seeded ones"
    assert 0.05 * want <= len(wrong) <= 0.15 * want
    assert "req-00001" not in expected_dropped
    assert answered["req-00001"]["token"] == "tok-1", "the request's token is echoed"
    assert sum("token" in v for v in answered.values()) == 1
    for arrived, v in labels:
        assert v["labeler"] == "ann" and v["label"] in (0, 1) and isinstance(v["ts"], float)
        assert arrived >= sent_at + policy.delay_s - 0.8  # never answered before the delay
    assert stats.requests == n + 7
    assert stats.answered == want and stats.dropped == len(expected_dropped)
    assert stats.flipped == len(wrong)
    assert stats.unknown_id == 7 and stats.malformed == 2 and stats.repeated == 1
    assert stats.waiting == 0 and stats.abandoned == 0


def test_same_seed_same_answers_and_group_mode(
    broker: EmbeddedBroker, make_topics: Callable[..., TopicsConfig]
) -> None:
    topics = make_topics()
    truth = {f"rec-{i}": i % 2 for i in range(200)}
    requests = [json.dumps(_request(i, f"rec-{i}")).encode() for i in range(200)]
    _produce(broker.bootstrap, topics.requests, requests)
    policy = AuditPolicy(delay_s=0.0, drop_rate=0.3, error_rate=0.3, seed=5)
    expected = {
        f"req-{i:05d}": policy.answer(f"req-{i:05d}", truth[f"rec-{i}"]) for i in range(200)
    }
    want = sum(v is not None for v in expected.values())
    with SimulatedAuditTeam(
        truth,
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=policy,
        group_id=f"auditors-{topics.requests}",
        consumer_config=FAST_GROUP,
    ):
        first = _consume(broker.bootstrap, topics.labels, want, timeout_s=20)
    answers = {v["request_id"]: v["label"] for _, v in first}
    assert answers == {k: v for k, v in expected.items() if v is not None}
    # a different seed makes different (but equally rated) decisions
    other = AuditPolicy(delay_s=0.0, drop_rate=0.3, error_rate=0.3, seed=6)
    assert {k for k in expected if other.drops(k)} != {k for k in expected if policy.drops(k)}
    assert 0.0 <= request_uniform(5, "drop", "x") < 1.0


def test_abandons_answers_still_waiting_on_stop(
    broker: EmbeddedBroker, make_topics: Callable[..., TopicsConfig]
) -> None:
    topics = make_topics()
    team = SimulatedAuditTeam(
        {"a": 1, "b": 0},
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=AuditPolicy(delay_s=60.0),
    ).start()
    _produce(broker.bootstrap, topics.requests, [json.dumps(_request(1, "a")).encode()])
    deadline = time.monotonic() + 10
    while team.stats.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    team.stop()
    assert team.stats.abandoned == 1 and team.stats.answered == 0 and team.error is None


def test_truth_file_formats(tmp_path: Path) -> None:
    csv_path = tmp_path / "truth.csv"
    assert write_truth(csv_path, [("a", 1), ("b,c", 0)]) == 2
    assert load_truth(csv_path) == {"a": 1, "b,c": 0}
    bare = tmp_path / "bare.csv"
    bare.write_text("# comment\nx,1\n\ny,0\n")
    assert load_truth(bare) == {"x": 1, "y": 0}
    jsonl = tmp_path / "truth.jsonl"
    jsonl.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": 0}\n')
    assert load_truth(jsonl) == {"a": 1, "b": 0}
    bad = tmp_path / "bad.csv"
    bad.write_text("id,label\na,1\nb,2\n")
    with pytest.raises(InputFileError, match=r"bad\.csv:3: 'label' must be 0 or 1"):
        load_truth(bad)
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": true}\n')
    with pytest.raises(InputFileError, match=r"bad\.jsonl:2"):
        load_truth(bad_json)
    with pytest.raises(InputFileError, match="cannot read"):
        load_truth(tmp_path / "missing.csv")


def test_command_line_answers_then_exits_0_on_sigterm(
    broker: EmbeddedBroker, make_topics: Callable[..., TopicsConfig], tmp_path: Path
) -> None:
    topics = make_topics()
    truth = tmp_path / "truth.jsonl"
    truth.write_text("".join(f'{{"id": "rec-{i}", "label": {i % 2}}}\n' for i in range(20)))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "auditors",
            "--truth",
            str(truth),
            "--bootstrap-servers",
            broker.bootstrap,
            "--requests-topic",
            topics.requests,
            "--labels-topic",
            topics.labels,
            "--delay-s",
            "0",
            "--group-id",
            "",
            "--stats-every-s",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _produce(
            broker.bootstrap,
            topics.requests,
            [json.dumps(_request(i, f"rec-{i}")).encode() for i in range(25)],
        )
        labels = _consume(broker.bootstrap, topics.labels, 20, timeout_s=30)
        assert {v["request_id"]: v["label"] for _, v in labels} == {
            f"req-{i:05d}": i % 2 for i in range(20)
        }
        time.sleep(1.0)  # one stats line after everything was read
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    final = [e for e in events if e.get("event") == "auditors_stopped"]
    assert final and final[-1]["answered"] == 20 and final[-1]["unknown_id"] == 5


def test_command_line_bad_truth_file_exits_2(tmp_path: Path) -> None:
    from monitor.cli import main

    bad = tmp_path / "truth.csv"
    bad.write_text("id,label\nx,maybe\n")
    status = main(["auditors", "--truth", str(bad), "--bootstrap-servers", "127.0.0.1:1"])
    assert status == 2
