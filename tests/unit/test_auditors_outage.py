"""The simulated audit team rides out a broker outage (clients replaced by in-memory fakes)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import kafka
import pytest
from kafka.errors import KafkaTimeoutError

from monitor.sim.auditors import AuditPolicy, SimulatedAuditTeam

METADATA = "Failed to update metadata after 60.0 secs."
TIMEOUT = "Timeout waiting for future"


@dataclass
class _Message:
    value: bytes


class _Consumer:
    """One request on partition 0, then nothing."""

    def __init__(self, **_: Any) -> None:
        self.polls = 0

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, parts: list[Any]) -> None:
        pass

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, list[_Message]]:
        self.polls += 1
        time.sleep(0.01)
        if self.polls > 1:
            return {}
        request = {"request_id": "req-1", "id": "rec-1", "pred": 1}
        return {0: [_Message(json.dumps(request).encode())]}

    def close(self) -> None:
        pass


class _Producer:
    """A broker that refuses the first send and the first two flushes, and the close."""

    instances: ClassVar[list[_Producer]] = []

    def __init__(self, **_: Any) -> None:
        self.sent: list[bytes] = []
        self.sends = self.flushes = 0
        _Producer.instances.append(self)

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.sends += 1
        if self.sends == 1:
            raise KafkaTimeoutError(METADATA)
        self.sent.append(value)

    def flush(self, timeout: float) -> None:
        self.flushes += 1
        if self.flushes <= 2:
            raise KafkaTimeoutError(TIMEOUT)

    def close(self, timeout: float) -> None:
        raise KafkaTimeoutError(TIMEOUT)


def test_a_broker_outage_holds_the_answers_and_the_team_carries_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """During a broker outage ``flush`` timed out and the team (the demo's auditors) died with
    a traceback, a second one from ``close``, and the answers it had taken were never sent. Now
    it logs the outage once, keeps every answer and sends it when the broker answers again."""
    monkeypatch.setattr(kafka, "KafkaConsumer", _Consumer)
    monkeypatch.setattr(kafka, "KafkaProducer", _Producer)
    team = SimulatedAuditTeam({"rec-1": 1}, "127.0.0.1:9", policy=AuditPolicy(delay_s=0.0))
    with caplog.at_level(logging.INFO, logger="monitor.sim.auditors"):
        team.start()
        deadline = time.monotonic() + 10.0
        while not (_Producer.instances and _Producer.instances[-1].sent):
            assert time.monotonic() < deadline and team.alive, team.error
            time.sleep(0.02)
        time.sleep(0.2)
        team.stop()
    assert team.error is None
    (producer,) = _Producer.instances
    assert [json.loads(v)["request_id"] for v in producer.sent] == ["req-1"]
    assert team.stats.answered == 1 and team.stats.abandoned == 0
    events = [str(getattr(r, "event", "")) for r in caplog.records]
    assert events.count("auditors_waiting") == 1 and events.count("auditors_resumed") == 1
    assert "auditors_undelivered" in events and "auditors_failed" not in events
