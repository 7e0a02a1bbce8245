"""Pure parts of the Label Studio bridge: settings, task bodies, answers, decisions, webhooks."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import kafka
import kafka.errors
import pytest
from kafka.cluster import ClusterMetadata

from monitor.bridges.labelstudio import Invalid, LabelStudioBridge, read_request
from monitor.bridges.ls_client import (
    LabelStudioClient,
    LabelStudioError,
    LabelStudioNotFound,
    LabelStudioUnavailable,
)
from monitor.bridges.ls_config import LabelStudioConfig, Wording, parse_labelstudio, state_path
from monitor.bridges.ls_http import task_ids
from monitor.bridges.ls_state import ANSWERED, OPEN, BridgeState, TaskRow
from monitor.bridges.ls_tasks import (
    DATA_KEYS,
    Answer,
    decide,
    interface_problem,
    label_config,
    read_answer,
    task_body,
)
from monitor.config.load import parse_config
from monitor.errors import ConfigError, StoreError

W = Wording(positive="Fraud", negative="Legitimate", instructions='Is it "fraud" & <real>?')


def _req(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "request_id": "ab" * 16,
        "id": "txn-1",
        "model": "fraud",
        "segment": "eu",
        "score": 0.91234,
        "pred": 1,
        "pi": 0.02,
        "ts": 1_767_225_600.0,
        "bucket": 1,
        "deadline": 1_767_830_400.0,
        "payload": {"url": "https://example.com/x"},
    }
    base.update(kw)
    return base


def test_the_daemon_accepts_the_labelstudio_section() -> None:
    config = parse_config({"labelstudio": {"url": "http://ls:8080"}}, "test")
    assert config.default_model == "default"


def test_settings_defaults_and_every_problem_reported() -> None:
    ls = parse_labelstudio({"labelstudio": {"models": {"fraud": {"positive": "Fraud"}}}}, "f")
    assert ls == LabelStudioConfig(model_wording={"fraud": Wording(positive="Fraud")})
    assert ls.title("fraud") == "Audit: fraud"
    assert ls.wording_of("other") == Wording()
    assert ls.answers_needed == 1
    bad = {
        "labelstudio": {
            "url": "ftp://x",
            "annotators": "all",
            "majority_of": 4,
            "poll_interval_s": 0,
            "token_env": "not a name",
            "colour": "red",
            "positive": "Same",
            "negative": "Same",
        }
    }
    with pytest.raises(ConfigError) as err:
        parse_labelstudio(bad, "m.yaml")
    text = str(err.value)
    assert text.startswith("m.yaml: 6 problems") and "must differ" in text
    for key in ("url", "annotators", "poll_interval_s", "token_env", "colour", "labelstudio:"):
        assert key in text
    with pytest.raises(ConfigError, match="must be odd"):
        parse_labelstudio({"labelstudio": {"annotators": "majority", "majority_of": 4}}, "m")
    for address in ("[::1]", "::", "not-a-host", "999.1.1.1"):  # the server binds IPv4 only
        with pytest.raises(ConfigError, match="expected an IPv4 address"):
            parse_labelstudio({"labelstudio": {"listen_address": address}}, "m")
    with pytest.raises(ConfigError, match=r"must contain \{model\} \(one project per model\)"):
        parse_labelstudio({"labelstudio": {"project_title": "Audits"}}, "m")


def test_titles_longer_than_label_studio_takes_are_shortened_the_same_way_every_time() -> None:
    ls = LabelStudioConfig()
    long_model = "card-not-present-fraud-detector-eu-west-v2-canary"
    title = ls.title(long_model)
    assert len(title) == 50 and title.startswith("Audit: card-not-present-fraud-detecto")
    assert title == ls.title(long_model) != ls.title(long_model + "x")
    assert ls.title("x" * 43) == "Audit: " + "x" * 43  # 50 characters: kept as it is


def test_token_from_the_environment_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    ls = LabelStudioConfig(token_env="LS_UNIT_TOKEN")
    monkeypatch.delenv("LS_UNIT_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="LS_UNIT_TOKEN' is not set"):
        ls.token()
    monkeypatch.setenv("LS_UNIT_TOKEN", "s3cret-value")
    assert ls.token() == "s3cret-value"
    client = LabelStudioClient("http://127.0.0.1:1", ls.token())
    assert "s3cret" not in repr(client) and "s3cret" not in str(vars(client).get("url"))


def test_hook_url_and_state_path(tmp_path: Path) -> None:
    assert LabelStudioConfig(listen_address="0.0.0.0").hook_url(9) == "http://127.0.0.1:9/webhook"
    assert LabelStudioConfig(webhook_url="http://b/h").hook_url(9) == "http://b/h"
    assert state_path(LabelStudioConfig(), tmp_path) == tmp_path / "labelstudio-bridge.sqlite"


def test_interface_is_valid_xml_with_escaped_wording_and_class_aliases() -> None:
    root = ET.fromstring(label_config(W))
    choices = {c.get("value"): c.get("alias") for c in root.iter("Choice")}
    assert choices == {"Fraud": "1", "Legitimate": "0"}
    assert root.find("Header").get("value") == W.instructions  # type: ignore[union-attr]


def test_task_body_shows_the_record_and_hides_ids_in_meta() -> None:
    body = task_body(_req(token="t0k"), W)
    assert body["meta"] == {
        "request_id": "ab" * 16,
        "pi": 0.02,
        "model": "fraud",
        "ts": 1_767_225_600.0,
        "deadline": 1_767_830_400.0,
        "token": "t0k",
    }
    data = body["data"]
    assert data["record_id"] == "txn-1" and data["prediction"] == "Fraud"
    assert "score 0.9123 " in data["context"] and "2026-01-08 00:00:00 UTC" in data["context"]
    assert '"url": "https://example.com/x"' in data["payload"]
    assert "t0k" not in str(data) and "ab" * 16 not in str(data)
    assert task_body(_req(pred=0, segment=""), W)["data"]["context"].count("(none)") == 1


def _ann(i: int, choice: str | None, cancelled: bool = False, by: Any = 7) -> dict[str, Any]:
    result = (
        []
        if choice is None
        else [
            {
                "from_name": "label",
                "to_name": "record",
                "type": "choices",
                "value": {"choices": [choice]},
            }
        ]
    )
    return {"id": i, "result": result, "was_cancelled": cancelled, "completed_by": by}


def test_answers_read_from_aliases_or_wording() -> None:
    assert read_answer(_ann(1, "1"), W) == Answer(1, False, 1, "labelstudio:7")
    assert read_answer(_ann(2, "Legitimate", by={"email": "a@b"}), W) == Answer(
        2, False, 0, "labelstudio:a@b"
    )
    assert read_answer(_ann(3, None, cancelled=True), W) == Answer(3, True, None, "labelstudio:7")
    assert read_answer(_ann(4, "maybe"), W) == Answer(4, False, None, "labelstudio:7")
    assert read_answer({"id": "x"}, W) is None


def _a(i: int, label: int | None, declined: bool = False) -> Answer:
    return Answer(i, declined, label, f"u{i}")


def test_first_policy_takes_the_earliest_answer_and_ignores_skips() -> None:
    assert decide([], "first", 3).label is None
    assert decide([_a(1, None, True)], "first", 3).label is None
    d = decide([_a(5, 0), _a(2, None, True), _a(3, 1)], "first", 3)
    assert (d.label, d.labeler) == (1, "u3")


def test_majority_policy_waits_for_enough_answers() -> None:
    assert decide([_a(1, 1), _a(2, 1)], "majority", 3).label is None
    assert decide([_a(1, 1), _a(2, 0), _a(3, 0)], "majority", 3).label == 0
    assert decide([_a(1, 1), _a(2, 0), _a(3, None, True)], "majority", 3).label is None
    assert decide([_a(1, 1), _a(2, 0), _a(3, 1), _a(4, 0)], "majority", 3).label is None  # tie
    assert decide([_a(i, 1) for i in range(3)], "majority", 3).labeler == (
        "labelstudio:majority-3-of-3"
    )


def test_requests_need_the_fields_a_task_shows() -> None:
    import json

    assert not isinstance(read_request(json.dumps(_req()).encode()), Invalid)
    for bad in (b"", b"[]", b"{", json.dumps(_req(score="high")).encode()):
        assert isinstance(read_request(bad), Invalid)
    for field in ("request_id", "id", "model", "segment", "pi", "deadline"):
        req = _req()
        del req[field]
        assert isinstance(read_request(json.dumps(req).encode()), Invalid)
    assert isinstance(read_request(json.dumps(_req(pred=2)).encode()), Invalid)
    assert isinstance(read_request(json.dumps(_req(token=5)).encode()), Invalid)
    # values Label Studio cannot store or show made it refuse every import, for good
    for value in (
        b'{"pi": NaN}',
        b'{"score": Infinity}',
        b'{"deadline": 1e300}',
        b'{"ts": -Infinity}',
        b'{"pi": 1.5}',
        b'{"deadline": 1' + b"0" * 400 + b"}",
    ):
        patched = json.dumps(_req()).encode()[:-1] + b", " + value[1:]
        assert isinstance(read_request(patched), Invalid), value


def test_webhook_bodies_name_their_tasks() -> None:
    assert task_ids({"action": "ANNOTATION_CREATED", "task": {"id": 4}, "annotation": {"task": 4}})
    assert task_ids({"annotation": {"task": 9}}) == {9}
    assert task_ids({"annotations": [{"task": 1}, {"task": 2}]}) == {1, 2}
    assert task_ids({"tasks": [{"id": 3}], "action": "TASKS_DELETED"}) == {3}
    assert task_ids([1, 2]) == set() and task_ids({"task": True}) == set()


def test_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    state = BridgeState(path)
    row = TaskRow("r1", "m", 1, 10, "tok", 0.1, 5.0, 9.0, 100.0, OPEN, None)
    state.add_tasks([row, TaskRow("r2", "m", 1, 11, None, 0.1, 7.0, 9.0, 100.0, OPEN, None)])
    state.add_tasks([row])  # again: ignored
    state.set_published("r1", 1)
    state.record_annotation(55, "r1", "answer", 1)
    state.set_mark(10, '["2026-01-01T00:00:00Z", 1, 0]')
    state.close()
    state = BridgeState(path)
    assert state.marks() == {10: '["2026-01-01T00:00:00Z", 1, 0]'}
    assert state.known(["r1", "r2", "r3"]) == {"r1", "r2"}
    (got,) = state.by_task(10)
    assert (got.status, got.published, got.token) == (ANSWERED, 1, "tok")
    assert state.annotation_seen(55, "r1") == ("answer", 1)
    assert state.annotation_seen(55, "r2") is None  # the same id in a Label Studio afresh
    assert state.watermarks() == {"m": 7.0}
    assert state.depth() == {"m": 1}
    state.close()


def test_a_damaged_state_file_is_refused_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"not a database " * 100)
    with pytest.raises(StoreError, match="the file is damaged: restore it from a backup"):
        BridgeState(path)


class _FreshLabelStudio:
    """A Label Studio whose database was emptied: its task 1 is another request's."""

    def __init__(self, tasks: dict[int, dict[str, Any]]) -> None:
        self.by_id = tasks

    def task(self, task_id: int) -> dict[str, Any]:
        if task_id not in self.by_id:
            msg = f"task {task_id}: HTTP 404"
            raise LabelStudioNotFound(msg)
        return self.by_id[task_id]

    def tasks(self, project: int, fields: str = "") -> list[dict[str, Any]]:
        return list(self.by_id.values())

    def user(self, user_id: int) -> dict[str, Any]:
        return {"email": f"user{user_id}@example.com"}


class _Sent:
    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    def send(self, topic: str, key: bytes, value: bytes) -> _Sent:
        self.values.append(json.loads(value))
        return self

    def get(self, timeout: float) -> None:
        return None


@pytest.mark.parametrize("path", ["webhook", "poll"])
def test_an_answer_is_published_for_the_request_its_task_names(tmp_path: Path, path: str) -> None:
    """Label Studio redeployed with an empty database numbers its tasks from 1 again: the answer
    to the new task 1 was published for the earlier request of task 1, with that request's
    token (the daemon would have joined it to the wrong record), or never at all."""
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    old = TaskRow("old", "fraud", 1, 1, "old-token", 0.1, 5.0, 9e9, 100.0, OPEN, None)
    new = TaskRow("new", "fraud", 1, 1, "new-token", 0.1, 6.0, 9e9, 200.0, OPEN, None)
    bridge.state.add_tasks([old, new])
    choice = {"from_name": "label", "value": {"choices": ["1"]}}
    answer = {"id": 1, "completed_by": 7, "result": [choice]}
    fresh = {"id": 1, "meta": {"request_id": "new"}, "annotations": [answer],
             "total_annotations": 1, "cancelled_annotations": 0, "updated_at": "t1"}  # fmt: skip
    bridge.client = _FreshLabelStudio({1: fresh})  # type: ignore[assignment]
    bridge.projects = {"fraud": 1}
    sent = _Sent()
    if path == "webhook":
        bridge._refresh(1, sent)
    else:
        bridge._poll_all(sent)
    assert [(v["request_id"], v["label"], v.get("token")) for v in sent.values] == [
        ("new", 1, "new-token")
    ]
    (gone,) = [r for r in bridge.state.by_task(1) if r.request_id == "old"]
    assert gone.status == "deleted"  # its task is not in this Label Studio
    bridge.state.close()


class _RefusingProject(_FreshLabelStudio):
    """Project 1 refuses every import while ``refusing`` (its labeling config lost the bridge's
    fields); ``imports`` counts the calls per project."""

    refusing = True

    def __init__(self, tasks: dict[int, dict[str, Any]]) -> None:
        super().__init__(tasks)
        self.imports: dict[int, int] = {}

    def import_tasks(self, project: int, bodies: list[dict[str, Any]]) -> list[int]:
        self.imports[project] = self.imports.get(project, 0) + 1
        if project == 1 and self.refusing:
            msg = "HTTP 400: validation error: data key payload missing"
            raise LabelStudioError(msg)
        start = len(self.by_id) + 1
        for i, body in enumerate(bodies):
            self.by_id[start + i] = {"id": start + i, **body}
        return list(range(start, start + len(bodies)))


class _Message:
    def __init__(self, offset: int, value: dict[str, Any]) -> None:
        self.offset, self.value = offset, json.dumps(value).encode()


class _TopicConsumer:
    """A consumer over one partition of records: polls deliver them, commits are recorded."""

    def __init__(self) -> None:
        self.part = kafka.TopicPartition("requests", 0)
        self._client = SimpleNamespace(cluster=ClusterMetadata())  # none known: none missing
        self.log: list[dict[str, Any]] = []
        self.position = 0
        self.commits: list[int] = []

    def assignment(self) -> set[Any]:
        return {self.part}

    def poll(self, timeout_ms: int = 0, max_records: int = 500) -> dict[Any, list[_Message]]:
        new = self.log[self.position : self.position + max_records]
        msgs = [_Message(self.position + i, v) for i, v in enumerate(new)]
        self.position += len(new)
        return {self.part: msgs} if msgs else {}

    def end_offsets(self, parts: list[Any], timeout_ms: int | None = None) -> dict[Any, int]:
        return {p: len(self.log) for p in parts}

    def commit(self, offsets: dict[Any, Any], timeout_ms: int | None = None) -> None:
        self.commits.append(offsets[self.part].offset)

    def paused(self) -> set[Any]:
        return set()


def test_a_project_refusing_its_imports_holds_back_only_its_own_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user changed model a's labeling config: the bridge stopped reading requests, so no
    model's new requests reached Label Studio until a's project was fixed (and, before that,
    the other models' requests of the same batch were not imported, and each retry counted
    those imported as repeated). Now a's requests are held, retried with backoff, and every
    partition is committed up to the first of them."""
    config = parse_config({"models": {"a": {}, "b": {}}, "default_model": "a"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    ls = _RefusingProject({})
    bridge.client = ls  # type: ignore[assignment]
    bridge.projects = {"a": 1, "b": 2}
    bridge._next_poll = float("inf")  # answers are not what this test reads
    consumer = _TopicConsumer()
    clock = [1000.0]
    monkeypatch.setattr("monitor.bridges.labelstudio.time.monotonic", lambda: clock[0])

    def created(model: str) -> float:
        return float(bridge.metrics.tasks_created.labels(model)._value.get())

    def held(model: str) -> float:
        return float(bridge.metrics.requests_held.labels(model)._value.get())

    consumer.log += [_req(model="b", request_id="b0" * 16), _req(model="a", request_id="a1" * 16)]
    consumer.log += [_req(model="b", request_id="b2" * 16)]
    bridge._step(consumer, _Sent())
    assert (created("b"), created("a"), held("a")) == (2, 0, 1)
    assert consumer.commits == [1]  # up to a's request, not past it
    assert [r["model"] for r in bridge._pending] == ["a"]

    consumer.log += [_req(model="b", request_id="b3" * 16), _req(model="a", request_id="a4" * 16)]
    bridge._step(consumer, _Sent())  # within a's backoff: a is not asked again
    assert (created("b"), ls.imports[1], held("a")) == (3, 1, 1)
    assert consumer.commits == [1]
    clock[0] += 1.5  # past the first backoff (1 s): asked again, refused, next in 2 s
    bridge._step(consumer, _Sent())
    assert (ls.imports[1], held("a")) == (2, 2)
    clock[0] += 1.5
    bridge._step(consumer, _Sent())
    assert ls.imports[1] == 2

    ls.refusing = False  # the user fixed the labeling config
    clock[0] += 1.0
    bridge._step(consumer, _Sent())
    assert (created("a"), held("a"), bridge._pending) == (2, 0, [])
    assert consumer.commits == [1, 5]
    assert bridge.metrics.requests_repeated._value.get() == 0
    assert bridge.metrics.errors._value.get() == 2
    bridge.state.close()


def test_past_the_held_limit_no_more_requests_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held requests are kept in memory: past ``_MAX_HELD`` the bridge reads no more."""
    monkeypatch.setattr("monitor.bridges.labelstudio._MAX_HELD", 3)
    config = parse_config({"models": {"a": {}}, "default_model": "a"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    bridge.client = _RefusingProject({})  # type: ignore[assignment]
    bridge.projects = {"a": 1}
    bridge._next_poll = float("inf")
    consumer = _TopicConsumer()
    consumer.log += [_req(model="a", request_id=f"{i:032d}") for i in range(5)]
    for _ in range(3):
        bridge._step(consumer, _Sent())
    assert (len(bridge._pending), consumer.position, consumer.commits) == (5, 5, [0])
    consumer.log += [_req(model="a", request_id=f"{i:032d}") for i in range(5, 8)]
    bridge._step(consumer, _Sent())
    assert consumer.position == 5
    bridge.state.close()


class _Outage:
    """A broker that a test stops and starts: kafka-python's calls fail while it is down."""

    down = False
    topic = "requests"


class _FakeConsumer:
    """kafka-python's consumer as the bridge uses it: an idle poll never fails, even when the
    broker is gone; end offsets and commits do."""

    DEFAULT_CONFIG = kafka.KafkaConsumer.DEFAULT_CONFIG

    def __init__(self, **options: Any) -> None:
        self.part = kafka.TopicPartition(_Outage.topic, 0)
        self._client = SimpleNamespace(cluster=ClusterMetadata())  # none known: none missing
        self.paused_parts: set[Any] = set()

    def subscribe(self, topics: list[str]) -> None:
        return None

    def assignment(self) -> set[Any]:
        return {self.part}

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, Any]:
        time.sleep(min(timeout_ms, 50) / 1000)
        return {}

    def end_offsets(self, parts: list[Any], timeout_ms: int | None = None) -> dict[Any, int]:
        self._check()
        return {p: 0 for p in parts}

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        self._check()

    def pause(self, *parts: Any) -> None:
        self.paused_parts.update(parts)

    def paused(self) -> set[Any]:
        return set(self.paused_parts)

    def resume(self, *parts: Any) -> None:
        self.paused_parts.difference_update(parts)

    def close(self, *args: Any, **kw: Any) -> None:
        return None

    @staticmethod
    def _check() -> None:
        if _Outage.down:
            msg = "broker down"
            raise kafka.errors.KafkaTimeoutError(msg)


class _FakeProducer(_Sent):
    """A producer whose sends fail (after their wait) while the broker is down."""

    DEFAULT_CONFIG = kafka.KafkaProducer.DEFAULT_CONFIG

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options
        self._metadata = ClusterMetadata()  # never refreshed: a failed send is not a missing topic
        _FakeProducer.made.append(self)

    made: list[_FakeProducer] = []  # noqa: RUF012

    def send(self, topic: str, key: bytes, value: bytes) -> _Sent:
        _FakeConsumer._check()
        return super().send(topic, key, value)

    def close(self, timeout: float | None = None) -> None:
        return None


def _start_loop(bridge: LabelStudioBridge) -> None:
    """Run the bridge's loop in its thread, as ``start`` does once Label Studio answered."""
    bridge._ls_up = True
    bridge._thread = threading.Thread(target=bridge._main, daemon=True)
    bridge._thread.start()


def _within(seconds: float, check: Any) -> bool:
    """Whether ``check()`` holds within ``seconds`` (asked every 0.05 s)."""

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_kafka_outage_is_noticed_at_once_and_not_blamed_on_label_studio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka stopped under a running bridge: /readyz stayed 200 (an idle poll never fails),
    an answer then blocked the loop in its send for ~60 s, and the outage was counted as
    Label Studio's (``labelstudio_up`` 0, its error counter, "Label Studio is back")."""
    monkeypatch.setattr("monitor.bridges.labelstudio.KafkaConsumer", _FakeConsumer)
    monkeypatch.setattr("monitor.bridges.labelstudio.KafkaProducer", _FakeProducer)
    monkeypatch.setattr(_Outage, "down", False)
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({}, "m.yaml")
    ls = LabelStudioConfig(poll_interval_s=0.2)
    bridge = LabelStudioBridge(config, ls, tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    bridge.state.add_tasks([TaskRow("r1", "default", 1, 1, "tok", 0.1, 5.0, 9e9, 1.0, OPEN, None)])
    task: dict[str, Any] = {"id": 1, "meta": {"request_id": "r1"}, "annotations": [],
            "total_annotations": 0, "cancelled_annotations": 0, "updated_at": "t0"}  # fmt: skip
    bridge.client = _FreshLabelStudio({1: task})  # type: ignore[assignment]
    bridge.projects = {"default": 1}
    _start_loop(bridge)

    def metric(name: str) -> float | None:
        return bridge.metrics.registry.get_sample_value(f"labelstudio_bridge_{name}")

    try:
        assert _within(5, bridge._is_ready)
        _Outage.down = True
        assert _within(4, lambda: not bridge._is_ready()), "Kafka down, still ready"
        choice = {"from_name": "label", "value": {"choices": ["1"]}}
        task.update(annotations=[{"id": 5, "completed_by": 7, "result": [choice]}],
                    total_annotations=1, updated_at="t1")  # fmt: skip
        time.sleep(1.5)  # the answer waits: its label cannot be published
        assert not bridge._is_ready() and bridge._healthy()
        assert metric("labelstudio_up") == 1 and metric("labelstudio_errors_total") == 0
        assert metric("kafka_up") == 0
        _Outage.down = False
        (producer,) = _FakeProducer.made[-1:]
        assert _within(10, lambda: len(producer.values) == 1 and bridge._is_ready())
        assert bridge.settle(5)
        assert [(v["request_id"], v["label"]) for v in producer.values] == [("r1", 1)]
        assert metric("labelstudio_errors_total") == 0 and metric("kafka_up") == 1
    finally:
        bridge._stop.set()
        assert bridge._thread is not None
        bridge._thread.join(10)
        bridge.state.close()
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("kafka_down") == 1 and events.count("kafka_back") == 1, events
    assert not {"labelstudio_down", "labelstudio_back"} & set(events), events


class _LoopConsumer(_TopicConsumer):
    """``_TopicConsumer`` as the loop makes it (``KafkaConsumer(**options)``): the last made."""

    DEFAULT_CONFIG = kafka.KafkaConsumer.DEFAULT_CONFIG
    made: _LoopConsumer | None = None

    def __init__(self, **options: Any) -> None:
        super().__init__()
        _LoopConsumer.made = self

    def subscribe(self, topics: list[str]) -> None:
        return None

    def poll(self, timeout_ms: int = 0, max_records: int = 500) -> dict[Any, list[_Message]]:
        got = super().poll(timeout_ms, max_records)
        if not got:
            time.sleep(0.05)
        return got

    def pause(self, *parts: Any) -> None:
        return None

    def close(self, *args: Any, **kw: Any) -> None:
        return None


def test_a_state_file_that_cannot_be_written_holds_back_its_step_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full volume under the state file: the first refused write ("database or disk is full")
    left the loop, and the bridge stopped for good (``bridge_failed``) with the tasks of that
    import created in Label Studio and not recorded. Now it is not ready and retried; the tasks
    are adopted, not imported again, once the file can be written."""
    monkeypatch.setattr("monitor.bridges.labelstudio.KafkaConsumer", _LoopConsumer)
    monkeypatch.setattr("monitor.bridges.labelstudio.KafkaProducer", _FakeProducer)
    monkeypatch.setattr(_Outage, "down", False)
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({"models": {"a": {}}, "default_model": "a"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(poll_interval_s=0.2), tmp_path / "s", "t")
    bridge._state = BridgeState(tmp_path / "s")
    ls = _RefusingProject({})
    ls.refusing = False
    bridge.client = ls  # type: ignore[assignment]
    bridge.projects = {"a": 1}
    _start_loop(bridge)

    def count(name: str, model: str | None = "a") -> float:
        labels = {} if model is None else {"model": model}
        return bridge.metrics.registry.get_sample_value(name, labels) or 0.0

    db = bridge.state._db
    try:
        assert _within(5, lambda: _LoopConsumer.made is not None and bridge._is_ready())
        consumer = _LoopConsumer.made
        assert consumer is not None
        consumer.log += [_req(model="a", request_id=f"{i:032d}") for i in range(2)]
        assert _within(5, lambda: consumer.commits[-1:] == [2])
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL from here on
        consumer.log += [_req(model="a", request_id=f"{i:032d}") for i in range(2, 102)]
        assert _within(5, lambda: not bridge._is_ready()), "the write failed, still ready"
        ls.by_id[1]["annotations"] = [
            {
                "id": 9,
                "completed_by": 7,
                "result": [{"from_name": "label", "value": {"choices": ["1"]}}],
            }
        ]
        ls.by_id[1].update(total_annotations=1, cancelled_annotations=0, updated_at="t1")
        time.sleep(2.0)  # retried meanwhile (1 s, then 2 s later)
        assert not bridge._is_ready() and bridge._healthy()
        assert count("labelstudio_bridge_ready", model=None) == 0
        assert (len(ls.by_id), ls.imports[1], consumer.commits[-1]) == (102, 2, 2)
        assert bridge.state.known([f"{i:032d}" for i in range(102)]) == {
            f"{i:032d}" for i in range(2)
        }
        db.execute("PRAGMA max_page_count = 1073741823")  # room made
        assert _within(10, bridge._is_ready), "room made, not ready"
        assert count("labelstudio_bridge_ready", model=None) == 1
        assert _within(5, lambda: consumer.commits[-1] == 102)
        (producer,) = _FakeProducer.made[-1:]
        assert _within(5, lambda: len(producer.values) == 1)
    finally:
        bridge._stop.set()
        assert bridge._thread is not None
        bridge._thread.join(10)
    # every request has one task, recorded; the 100 imported before the failed write adopted
    assert (len(ls.by_id), ls.imports[1]) == (102, 2)
    assert len(bridge.state.known([f"{i:032d}" for i in range(102)])) == 102
    assert (
        count("labelstudio_bridge_tasks_created_total"),
        count("labelstudio_bridge_tasks_adopted_total"),
    ) == (2, 100)
    assert [(v["request_id"], v["label"]) for v in producer.values] == [(f"{0:032d}", 1)]
    assert bridge.error is None
    bridge.state.close()
    (failed,) = [
        str(getattr(r, "error", ""))
        for r in caplog.records
        if getattr(r, "event", None) == "store_unavailable"
    ]
    assert "database or disk is full" in failed and str(tmp_path / "s") in failed
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("store_available") == 1 and "bridge_failed" not in events, events


class _Deleting(_FreshLabelStudio):
    """Records the tasks the bridge removes from Label Studio (expiry)."""

    removed: list[int]

    def delete_tasks(self, project: int, ids: list[int]) -> None:
        self.removed = [*getattr(self, "removed", []), *ids]
        for task_id in ids:
            self.by_id.pop(task_id, None)


def test_a_published_task_whose_answer_is_deleted_is_open_again(tmp_path: Path) -> None:
    """An auditor deleted the answer of a published task: Label Studio served the task again,
    but the bridge kept it answered (out of the queue depth, never expired), and an answer
    given after its deadline was then published as an edit."""
    config = parse_config({}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    rows = [TaskRow(f"r{i}", "default", 1, i, None, 0.1, 5.0, d, 1.0, OPEN, None)
            for i, d in ((1, 9e9), (2, 50.0))]  # fmt: skip
    bridge.state.add_tasks(rows)
    tasks: dict[int, dict[str, Any]] = {
        i: {"id": i, "meta": {"request_id": f"r{i}"}} for i in (1, 2)
    }
    bridge.client = _Deleting(tasks)  # type: ignore[assignment]
    bridge.projects = {"default": 1}
    sent = _Sent()
    version = iter(range(100))

    def answer(label: int | None, annotation: int = 0) -> None:
        for task in (tasks[i] for i in (1, 2) if i in tasks):
            choice = {"from_name": "label", "value": {"choices": [str(label)]}}
            result = [] if label is None else [{"id": annotation, "completed_by": 7,
                                                "result": [choice]}]  # fmt: skip
            task.update(annotations=result, total_annotations=len(result),
                        cancelled_annotations=0, updated_at=f"t{next(version)}")  # fmt: skip
        bridge._poll_all(sent)

    def statuses() -> list[str]:
        return [r.status for r in (bridge.state.by_request(f"r{i}") for i in (1, 2)) if r]

    answer(1, 5)
    assert [v["label"] for v in sent.values] == [1, 1] and statuses() == [ANSWERED] * 2
    answer(None)  # the answer deleted: open again, in the queue depth
    assert statuses() == [OPEN] * 2 and bridge.state.depth() == {"default": 2}
    assert [r.published for r in bridge.state.with_status(OPEN)] == [1, 1]  # remembered
    answer(1, 6)  # answered again as published: nothing new to publish
    assert len(sent.values) == 2 and statuses() == [ANSWERED] * 2
    answer(None)
    bridge.state.add_tasks([TaskRow("r3", "default", 1, 3, None, 0.1, 99.0, 9e9, 1.0, OPEN, None)])
    tasks[3] = {"id": 3, "meta": {"request_id": "r3"}}
    bridge._expire()  # r2's deadline (50) is behind the watermark (99): it expires
    assert bridge.client.removed == [2] and statuses() == [OPEN, "expired"]  # type: ignore[attr-defined]
    answer(0, 7)  # a different answer to the open task: an edit
    assert [v["label"] for v in sent.values] == [1, 1, 0] and statuses() == [ANSWERED, "expired"]
    assert (
        bridge.metrics.registry.get_sample_value(
            "labelstudio_bridge_edits_total", {"model": "default"}
        )
        == 1
    )
    bridge.state.close()


def test_an_expiry_whose_write_failed_is_counted_as_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state file refused ``EXPIRED`` after the task was deleted in Label Studio (a full
    volume): the next poll found the task missing and counted an auditor's deletion
    (``task_deleted``) instead of an expiry. A task deleted before its deadline still counts
    as deleted."""
    config = parse_config({}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    times = ((1, 5.0, 50.0), (2, 99.0, 9e9), (3, 6.0, 9e9))  # r1's deadline is behind 99
    bridge.state.add_tasks(
        [
            TaskRow(f"r{i}", "default", 1, i, None, 0.1, ts, due, 1.0, OPEN, None)
            for i, ts, due in times
        ]
    )
    tasks: dict[int, dict[str, Any]] = {
        i: {"id": i, "meta": {"request_id": f"r{i}"}} for i in (1, 2, 3)
    }
    bridge.client = _Deleting(tasks)  # type: ignore[assignment]
    bridge.projects = {"default": 1}
    write = BridgeState.set_status

    def refused(state: BridgeState, request_id: str, status: str) -> None:
        msg = f"{state.path}: the bridge's state file failed: database or disk is full"
        raise StoreError(msg)

    monkeypatch.setattr(BridgeState, "set_status", refused)
    with pytest.raises(StoreError):
        bridge._expire()
    monkeypatch.setattr(BridgeState, "set_status", write)
    assert bridge.client.removed == [1]  # type: ignore[attr-defined]
    del tasks[3]  # an auditor deleted r3's task
    bridge._poll_all(_Sent())

    def count(name: str) -> float:
        value = bridge.metrics.registry.get_sample_value(name, {"model": "default"})
        return value or 0.0

    statuses = [r.status for r in (bridge.state.by_request(f"r{i}") for i in (1, 2, 3)) if r]
    assert statuses == ["expired", OPEN, "deleted"]
    assert count("labelstudio_bridge_tasks_expired_total") == 1
    assert count("labelstudio_bridge_tasks_deleted_total") == 1
    bridge.state.close()


class _Projects:
    """Label Studio's project list, with the updates the bridge makes."""

    def __init__(self, projects: list[dict[str, Any]]) -> None:
        self.listed = projects
        self.updates: list[tuple[int, dict[str, Any]]] = []

    def projects(self) -> list[dict[str, Any]]:
        return self.listed

    def update_project(self, project: int, fields: dict[str, Any]) -> None:
        self.updates.append((project, fields))


@pytest.mark.parametrize(("annotators", "asks", "wanted"), [("first", 3, 1), ("majority", 1, 3)])
def test_a_found_project_asks_for_the_answers_the_policy_needs(
    tmp_path: Path, annotators: Literal["first", "majority"], asks: int, wanted: int
) -> None:
    """Back from majority to first: the project kept asking for 3 answers (only ever raised),
    so Label Studio kept serving tasks the first answer had decided."""
    ls = LabelStudioConfig(annotators=annotators, majority_of=3)
    bridge = LabelStudioBridge(parse_config({}, "m.yaml"), ls, tmp_path / "s.sqlite", "t" * 40)
    found = {"id": 4, "title": ls.title("default"), "maximum_annotations": asks}
    bridge.client = _Projects([found])  # type: ignore[assignment]
    assert bridge._project("default") == 4
    assert bridge.client.updates == [(4, {"maximum_annotations": wanted})]  # type: ignore[attr-defined]
    found["maximum_annotations"] = wanted
    bridge.projects.clear()
    bridge._project("default")  # already as needed: left alone
    assert len(bridge.client.updates) == 1  # type: ignore[attr-defined]


class _ProjectTasks(_FreshLabelStudio):
    """Tasks per project id; a project not listed is gone (its tasks 404)."""

    def __init__(self, projects: dict[int, list[dict[str, Any]]]) -> None:
        super().__init__({t["id"]: t for tasks in projects.values() for t in tasks})
        self.projects = projects

    def tasks(self, project: int, fields: str = "") -> list[dict[str, Any]]:
        return self.projects.get(project, [])  # the real client: a 404 page ends the listing


def test_the_answers_of_a_renamed_project_are_read(tmp_path: Path) -> None:
    """A user renamed the project; restarted, the bridge made a new one under the configured
    title (project 2) and never read the answers given in the renamed one (project 1). Tasks of
    a project since deleted (project 3) are counted deleted, not polled forever."""
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    renamed = TaskRow("in-renamed", "fraud", 1, 1, None, 0.1, 5.0, 9e9, 100.0, OPEN, None)
    deleted = TaskRow("in-deleted", "fraud", 3, 7, None, 0.1, 5.0, 9e9, 100.0, OPEN, None)
    bridge.state.add_tasks([renamed, deleted])
    choice = {"from_name": "label", "value": {"choices": ["0"]}}
    task = {"id": 1, "meta": {"request_id": "in-renamed"}, "total_annotations": 1,
            "annotations": [{"id": 5, "completed_by": 7, "result": [choice]}],
            "cancelled_annotations": 0, "updated_at": "t1"}  # fmt: skip
    bridge.client = _ProjectTasks({1: [task], 2: []})  # type: ignore[assignment]
    bridge.projects = {"fraud": 2}
    sent = _Sent()
    bridge._poll_all(sent)
    assert [(v["request_id"], v["label"]) for v in sent.values] == [("in-renamed", 0)]
    (gone,) = bridge.state.by_task(7)
    assert gone.status == "deleted"
    bridge.state.close()


def test_a_task_asked_for_by_id_is_checked_against_its_request(tmp_path: Path) -> None:
    """Missing from its project's listing, a task is asked for by id: an id that now names
    another request's unanswered task (Label Studio afresh) says the row's task is gone (it
    stayed open, in the queue depth, with the other task's mark)."""
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    bridge.state.add_tasks([TaskRow("old", "fraud", 1, 1, None, 0.1, 5.0, 9e9, 100.0, OPEN, None)])
    other = {"id": 1, "meta": {"request_id": "other"}, "total_annotations": 0,
             "annotations": [], "cancelled_annotations": 0, "updated_at": "t1"}  # fmt: skip
    client = _ProjectTasks({1: []})
    client.by_id[1] = other  # not listed in project 1, but task 1 exists
    bridge.client = client  # type: ignore[assignment]
    bridge.projects = {"fraud": 1}
    sent = _Sent()
    bridge._poll_all(sent)
    assert sent.values == []
    (row,) = bridge.state.by_task(1)
    assert row.status == "deleted"
    bridge.state.close()


def _call_answered_with(response: bytes) -> Any:
    """``client.call`` against a server on 127.0.0.1 that sends ``response`` and closes."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(response)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    client = LabelStudioClient(f"http://127.0.0.1:{port}", "t", timeout_s=5.0)
    try:
        return client.call("GET", "/api/tasks")
    finally:
        thread.join(5)
        server.close()


def test_a_response_cut_off_midway_is_label_studio_unavailable() -> None:
    """Label Studio stopped while it sent a task listing: ``http.client.IncompleteRead`` escaped
    the client and ended the bridge's loop for good. It is now an outage, retried."""
    with pytest.raises(LabelStudioUnavailable, match="unreachable: IncompleteRead"):
        _call_answered_with(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"tasks": [')


@pytest.mark.parametrize("body", [b"<html>proxy error</html>", b"[" * 100_000 + b"]" * 100_000])
def test_an_answer_that_is_not_json_is_a_label_studio_error(body: bytes) -> None:
    """Nested too deep for ``json`` (a ``RecursionError``) as well as not JSON at all."""
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with pytest.raises(LabelStudioError, match=r"GET http://127\.0\.0\.1:\d+/api/tasks: not JSON"):
        _call_answered_with(head.encode() + body)


def test_requests_label_studio_cannot_list_or_dated_past_2100_are_invalid() -> None:
    """A lone surrogate or a NUL anywhere (payload, keys): Label Studio 1.23.2 stored the task,
    then answered every listing of its project with HTTP 500, for good. A request dated in year
    9999 moved its model's watermark there and every open task of the model expired at once."""
    for patch in (
        b'"payload": {"text": "x\\ud800y"}',
        b'"payload": {"a": ["ok", {"b": "\\udc00"}]}',
        b'"payload": {"x\\ud800": 1}',
        b'"payload": {"text": "a\\u0000b"}',
        b'"segment": "eu\\u0000"',
    ):
        value = json.dumps(_req(payload=None, segment=None)).encode()
        value = value[:-1] + b", " + patch + b"}"
        got = read_request(value)
        assert isinstance(got, Invalid) and got.reason == "bad_text", patch
    assert not isinstance(
        read_request(json.dumps(_req(payload={"emoji": "\U0001f600"})).encode()), Invalid
    )
    for ts, deadline in ((253_402_300_000.0,) * 2, (4_102_444_800.0, 4_102_444_900.0)):
        got = read_request(json.dumps(_req(ts=ts, deadline=deadline)).encode())
        assert isinstance(got, Invalid) and got.reason == "bad_time", ts
    got = read_request(json.dumps(_req(ts=100.0, deadline=99.0)).encode())
    assert isinstance(got, Invalid) and got.reason == "bad_time"
    late = 4_102_444_799.0  # the daemon's last event time; its deadline a week on is fine
    assert not isinstance(
        read_request(json.dumps(_req(ts=late, deadline=late + 7 * 86_400)).encode()), Invalid
    )


class _OneProjectFails(_ProjectTasks):
    """Project 1's listing answers HTTP 500 (a task it cannot show), the others work."""

    up = True

    def tasks(self, project: int, fields: str = "") -> list[dict[str, Any]]:
        if project == 1 or not self.up:
            msg = f"GET /api/tasks?project={project}: HTTP 500"
            raise LabelStudioUnavailable(msg)
        return super().tasks(project, fields)

    def whoami(self) -> dict[str, Any]:
        if not self.up:
            msg = "connection refused"
            raise LabelStudioUnavailable(msg)
        return {"email": "bridge@example.com"}


def test_a_project_label_studio_cannot_list_stops_no_other_project(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Project 1's listing failing (HTTP 500) aborted the whole poll: model b's answers were
    never published, and the bridge said Label Studio was down. Now b is read, a's tasks are not
    expired unread, the failure is logged once, and only a real outage is raised."""
    config = parse_config({"models": {"a": {}, "b": {}}, "default_model": "a"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    bridge.state.add_tasks(
        [
            TaskRow("ra", "a", 1, 1, None, 0.1, 5.0, 6.0, 1.0, OPEN, None),
            TaskRow("ra2", "a", 1, 3, None, 0.1, 99.0, 9e9, 1.0, OPEN, None),
            TaskRow("rb", "b", 2, 2, None, 0.1, 5.0, 9e9, 1.0, OPEN, None),
        ]
    )
    choice = {"from_name": "label", "value": {"choices": ["1"]}}
    task = {"id": 2, "meta": {"request_id": "rb"}, "total_annotations": 1,
            "annotations": [{"id": 9, "completed_by": 7, "result": [choice]}],
            "cancelled_annotations": 0, "updated_at": "t1"}  # fmt: skip
    ls = _OneProjectFails({1: [], 2: [task]})
    ls.by_id.update({1: {"id": 1}, 3: {"id": 3}})
    bridge.client = ls  # type: ignore[assignment]
    bridge.projects = {"a": 1, "b": 2}
    sent = _Sent()
    with caplog.at_level(logging.ERROR):
        bridge._poll_all(sent)
        bridge._poll_all(sent)
    assert [(v["request_id"], v["label"]) for v in sent.values] == [("rb", 1)]
    assert [r.event for r in caplog.records] == ["project_poll_failed"]  # type: ignore[attr-defined]
    assert bridge.metrics.errors._value.get() == 2
    bridge._expire()  # ra is past its deadline, but its answers were not read: kept
    assert [r.request_id for r in bridge.state.with_status(OPEN)] == ["ra", "ra2"]
    ls.up = False  # Label Studio itself fails: down, as before
    with pytest.raises(LabelStudioUnavailable):
        bridge._poll_all(sent)
    bridge.state.close()


def test_a_request_id_read_twice_in_one_batch_keeps_its_first_copy(tmp_path: Path) -> None:
    config = parse_config({"models": {"b": {}}, "default_model": "b"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    ls = _RefusingProject({})
    bridge.client = ls  # type: ignore[assignment]
    bridge.projects = {"b": 2}
    bridge._next_poll = float("inf")
    consumer = _TopicConsumer()
    consumer.log += [_req(model="b", id="first"), _req(model="b", id="second")]
    bridge._step(consumer, _Sent())
    (row,) = bridge.state.with_status(OPEN)
    assert "first" in json.dumps(ls.by_id[row.task_id]["data"])
    assert bridge.metrics.requests_repeated._value.get() == 1
    bridge.state.close()


def test_invalid_requests_are_logged_with_where_and_why_once_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config({"models": {"b": {}}, "default_model": "b"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    clock = [1000.0]
    monkeypatch.setattr("monitor.bridges.labelstudio.time.monotonic", lambda: clock[0])
    part = kafka.TopicPartition("requests", 3)
    with caplog.at_level(logging.WARNING):
        for offset in range(5):
            bridge._take(b"{", (part, offset))
        bridge._take(json.dumps(_req(pred=2)).encode(), (part, 7))
        bridge._invalid_log.tick()
        clock[0] += 61
        bridge._invalid_log.tick()
    lines = [(r.reason, r.partition, r.offset, r.count) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [("not_json", 3, 0, 1), ("bad_value", 3, 7, 1), ("not_json", 3, 4, 4)]
    assert all(r.topic == "requests" and r.detail for r in caplog.records)  # type: ignore[attr-defined]
    assert bridge.metrics.requests_invalid._value.get() == 6


def test_an_unreadable_answer_is_logged_with_its_task_value_and_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    bridge.state.add_tasks([TaskRow("r", "fraud", 4, 1, None, 0.1, 5.0, 9e9, 1.0, OPEN, None)])
    choice = {"from_name": "label", "value": {"choices": ["maybe"]}}
    task = {"id": 1, "meta": {"request_id": "r"}, "total_annotations": 1,
            "annotations": [{"id": 9, "completed_by": 7, "result": [choice]}],
            "cancelled_annotations": 0, "updated_at": "t1"}  # fmt: skip
    bridge.client = _FreshLabelStudio({1: task})  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        bridge._refresh(1, _Sent())
        bridge._refresh(1, _Sent())  # seen: neither counted nor logged again
    (line,) = caplog.records
    assert (line.event, line.project, line.task, line.annotation) == (  # type: ignore[attr-defined]
        "answer_unreadable",
        4,
        1,
        9,
    )
    assert "maybe" in line.value and "Labeling Interface" in line.fix  # type: ignore[attr-defined]
    bridge.state.close()


def test_kafka_failing_to_come_up_at_start_is_not_logged_as_a_bug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No broker at start: ``start`` exits 2 naming the fix; the loop's ``bridge_failed``
    traceback, which the runbook reads as a bug, came first. Once running, a failure is one."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s.sqlite", "t" * 40)
    failures: list[BaseException] = [
        kafka.errors.KafkaError("Unable to bootstrap"),
        RuntimeError("a bug"),
    ]

    def run(stop: threading.Event) -> None:
        raise failures.pop(0)

    bridge.run = run  # type: ignore[method-assign]
    bridge._main()  # before the loop was ready
    assert isinstance(bridge.error, kafka.errors.KafkaError)
    assert not [r for r in caplog.records if getattr(r, "event", "") == "bridge_failed"]
    bridge._main()  # ready since: a failure of the running loop
    assert [r for r in caplog.records if getattr(r, "event", "") == "bridge_failed"]


def test_a_labeling_interface_other_than_the_bridges_is_named() -> None:
    """Only the bridge's interface (or one without aliases in the model's wording) passes."""
    assert interface_problem(label_config(W), W) is None
    plain = label_config(W).replace(' alias="1"', "").replace(' alias="0"', "")
    assert interface_problem(plain, W) is None
    spam = label_config(W).replace('alias="1"', 'alias="spam"')
    assert "'Fraud' gives no class" in str(interface_problem(spam, W))
    assert "$text" in str(interface_problem(label_config(W).replace("$payload", "$text"), W))
    one = label_config(W).replace('    <Choice value="Legitimate" alias="0"/>\n', "")
    assert "'Legitimate'" in str(interface_problem(one, W))
    several = label_config(W).replace('choice="single-radio"', 'choice="multiple"')
    assert "several" in str(interface_problem(several, W))
    assert "0 Choices" in str(interface_problem(label_config(W).replace('"label"', '"x"'), W))
    assert "not XML" in str(interface_problem("<View>", W))
    dollars = Wording("Fraud", "Legitimate", "Amounts are in $USD; limits in $limit")
    assert interface_problem(label_config(dollars), dollars) is None  # text, not a variable
    assert set(task_body(_req(), W)["data"]) == DATA_KEYS  # the keys the check allows


class _HandMadeProject(_RefusingProject):
    """Project 1, titled as model a's, was made by hand with other choices."""

    refusing = False

    def __init__(self, config: str) -> None:
        super().__init__({})
        self.config = config

    def projects(self) -> list[dict[str, Any]]:
        a = {"id": 1, "title": LabelStudioConfig().title("a"), "label_config": self.config}
        b = {"id": 2, "title": LabelStudioConfig().title("b"), "label_config": label_config(W)}
        return [a, b]

    def webhooks(self, project: int) -> list[dict[str, Any]]:
        return []


def test_a_found_project_with_another_interface_holds_back_only_its_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A project of model a's title made for something else: a's requests became tasks there
    and every answer was only reported unreadable. Now the bridge logs it once when it finds the
    project, holds a's requests (b's go on) and imports them once the interface is restored."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({"models": {"a": {}, "b": {}}, "default_model": "a"}, "m.yaml")
    ls = LabelStudioConfig(wording=W)
    bridge = LabelStudioBridge(config, ls, tmp_path / "s.sqlite", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s.sqlite")
    other = label_config(W).replace('alias="1"', 'alias="spam"')
    client = _HandMadeProject(other)
    bridge.client = client  # type: ignore[assignment]
    bridge._next_poll = float("inf")
    clock = [1000.0]
    monkeypatch.setattr("monitor.bridges.labelstudio.time.monotonic", lambda: clock[0])
    assert (bridge._project("a"), bridge._project("b")) == (1, 2)
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "project_interface_wrong"]
    assert (line.project, line.title, line.model) == (1, ls.title("a"), "a")  # type: ignore[attr-defined]
    assert "gives no class" in line.problem and "Labeling Interface" in line.fix  # type: ignore[attr-defined]
    assert line.label_config == label_config(W)  # type: ignore[attr-defined]

    consumer = _TopicConsumer()
    consumer.log += [_req(model="a", request_id="a0" * 16), _req(model="b", request_id="b1" * 16)]
    bridge._step(consumer, _Sent())
    assert client.imports == {2: 1}
    assert bridge.metrics.requests_held.labels("a")._value.get() == 1
    assert consumer.commits == [0]
    clock[0] += 1.5  # retried: still wrong, logged no more
    bridge._step(consumer, _Sent())
    assert client.imports == {2: 1}
    assert bridge.metrics.errors._value.get() == 3  # found wrong at each of three checks

    client.config = label_config(W)  # restored
    clock[0] += 2.5
    bridge._step(consumer, _Sent())
    assert client.imports == {2: 1, 1: 1}
    assert bridge.metrics.requests_held.labels("a")._value.get() == 0
    assert consumer.commits == [0, 2]
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("project_interface_wrong") == 1
    assert {"project_interface_restored", "imports_accepted"} <= set(events)
    bridge.state.close()


class _SharedProject(_ProjectTasks):
    """One project both bridges read: deleting a task removes it for both."""

    def delete_task(self, task_id: int) -> None:
        self.by_id.pop(task_id, None)
        self.projects[1] = [t for t in self.projects[1] if t["id"] != task_id]


def test_two_bridges_on_one_project_keep_the_same_task_and_publish_once_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bridges one and two (each its own state file) each imported request r: one deleted
    two's task as a duplicate, two deleted one's, and r was never audited. Now both keep the
    lowest task id (two adopts it), and each publishes its answer once."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridges = []
    for name, task_id in (("one", 1), ("two", 2)):
        bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / name, "t" * 40)
        bridge._state = BridgeState(tmp_path / name)
        row = TaskRow("r", "fraud", 1, task_id, "tok", 0.1, 5.0, 9e9, 100.0, OPEN, None)
        bridge.state.add_tasks([row])
        bridge.projects = {"fraud": 1}
        bridges.append(bridge)
    one, two = bridges

    def task(task_id: int, bridge: LabelStudioBridge, answers: list[Any]) -> dict[str, Any]:
        return {"id": task_id, "meta": {"request_id": "r", "bridge": bridge.state.instance},
                "annotations": answers, "total_annotations": len(answers),
                "cancelled_annotations": 0, "updated_at": f"t{len(answers)}"}  # fmt: skip

    client = _SharedProject({1: [task(1, one, []), task(2, two, [])]})
    sent = _Sent()
    for bridge in (two, one, two, one):
        bridge.client = client  # type: ignore[assignment]
        bridge._poll_all(sent)
    assert [t["id"] for t in client.projects[1]] == [1]
    assert [r.task_id for b in bridges for r in b.state.with_status(OPEN)] == [1, 1]

    answer = {"id": 9, "completed_by": 7, "result": [{"from_name": "label",
              "value": {"choices": ["1"]}}]}  # fmt: skip
    client.projects[1] = [task(1, one, [answer])]
    client.by_id = {1: client.projects[1][0]}
    for bridge in (one, two, one, two):
        bridge._poll_all(sent)
    assert [(v["request_id"], v["label"]) for v in sent.values] == [("r", 1), ("r", 1)]
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("task_of_another_bridge") == 1  # two saw one's task, once
    assert "task_deleted" not in events
    for bridge in bridges:
        bridge.state.close()


def test_a_rebuilt_state_file_does_not_take_its_own_earlier_tasks_for_another_bridge(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state file moved aside is rebuilt from the tasks under a new bridge id; the earlier
    tasks it adopts (no second copy of any request) were logged as another bridge's at every
    run, telling the operator to stop a second bridge that did not exist. A task the earlier id
    imports while this bridge runs is one."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    config = parse_config({"models": {"fraud": {}}, "default_model": "fraud"}, "m.yaml")
    bridge = LabelStudioBridge(config, LabelStudioConfig(), tmp_path / "s", "t" * 40)
    bridge._state = BridgeState(tmp_path / "s")
    bridge.projects = {"fraud": 1}
    old = "0123456789abcdef"  # the id of the state file moved aside
    meta = {"token": "tok", "model": "fraud", "pi": 0.1, "ts": 5.0, "deadline": 9e9,
            "bridge": old}  # fmt: skip
    earlier: list[dict[str, Any]] = [
        {"id": i, "meta": {**meta, "request_id": f"r{i}"}, "annotations": [],
         "total_annotations": 0, "cancelled_annotations": 0, "updated_at": "t0"}
        for i in (1, 2)
    ]  # fmt: skip
    shared = _SharedProject({1: earlier})
    bridge.client = shared  # type: ignore[assignment]
    for _ in range(2):
        bridge._poll_all(_Sent())
    assert sorted(r.task_id for r in bridge.state.with_status(OPEN)) == [1, 2]  # adopted
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "tasks_adopted" in events and "task_of_another_bridge" not in events

    # a task of its own that Label Studio committed late is adopted as before; one the earlier
    # id makes now (the old bridge still running, a step ahead) is a second bridge, logged once
    later = [
        {**earlier[0], "id": i, "meta": {**meta, "request_id": f"r{i}", "bridge": mark}}
        for i, mark in ((3, bridge.state.instance), (4, old), (5, old))
    ]
    for task in later:
        shared.projects[1].append(task)
        bridge._poll_all(_Sent())
        seen = [r for r in caplog.records if getattr(r, "event", None) == "task_of_another_bridge"]
        assert len(seen) == (task["id"] >= 4)
    assert sorted(r.task_id for r in bridge.state.with_status(OPEN)) == [1, 2, 3, 4, 5]
    assert seen[0].tasks == [4]  # type: ignore[attr-defined]
    assert seen[0].bridges == sorted([old, str(bridge.state.instance)])  # type: ignore[attr-defined]
    bridge.state.close()
