# ruff: noqa: E501
"""Decoding scored records and label results: defaults, every reject reason, order kept."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config.schema import Config, ModelConfig
from monitor.core.messages import RawRecord, Reject
from monitor.core.records import (
    DEADLETTER_BYTES,
    DEADLETTER_DETAIL_CHARS,
    DEADLETTER_KEY_BYTES,
    MAX_VALUE_BYTES,
    deadletter_key,
    deadletter_minimal,
    deadletter_value,
    decode_labels,
    decode_scored,
    parse_timestamp,
)
from monitor.errors import RejectReason

NOW = 1_790_000_000.0  # 2026-09-21
KAFKA_MS = int(NOW * 1000)  # records written now
CONFIG = Config(
    models={
        "default": ModelConfig(name="default", threshold=0.5),
        "fraud": ModelConfig(name="fraud", threshold=0.9),
    },
    default_model="default",
)


def _nested(levels: int) -> list[Any]:
    """``levels`` arrays, one inside the other (``[[...[1]...]]``)."""
    value: list[Any] = [1]
    for _ in range(levels - 1):
        value = [value]
    return value


def raw(
    values: Sequence[bytes | dict[str, Any] | None], topic: str = "predictions"
) -> list[RawRecord]:
    out = []
    for i, v in enumerate(values):
        value = json.dumps(v).encode() if isinstance(v, dict) else v
        out.append(RawRecord(topic, i % 3, 100 + i, KAFKA_MS + i, f"k{i}".encode(), value))
    return out


def one_reject(value: bytes | dict[str, Any] | None) -> Reject:
    batch, rejects = decode_scored(raw([value]), CONFIG)
    assert len(batch) == 0
    assert len(rejects) == 1
    return rejects[0]


def test_minimal_record_takes_every_default() -> None:
    batch, rejects = decode_scored(raw([{"id": "a", "score": 0.7}]), CONFIG)
    assert rejects == []
    assert batch.ids.tolist() == ["a"]
    assert batch.score.tolist() == [0.7]
    assert batch.pred.tolist() == [1]  # 0.7 >= threshold 0.5 of the default model
    assert batch.ts.tolist() == [KAFKA_MS / 1000]  # the Kafka timestamp
    assert batch.model.tolist() == ["default"]
    assert batch.segment.tolist() == [""]
    assert batch.payload == [None]
    assert batch.partition.tolist() == [0]
    assert batch.offset.tolist() == [100]
    assert batch.score.dtype == np.float64 and batch.pred.dtype == np.int8
    assert batch.partition.dtype == np.int32 and batch.offset.dtype == np.int64


def test_full_record_keeps_every_field() -> None:
    record = {
        "id": "rec-1",
        "score": 0.2,
        "pred": 1,
        "ts": 1_700_000_000.5,
        "model": "fraud",
        "segment": "eu",
        "payload": {"amount": [1, 2], "who": None},
        "extra": "ignored",
    }
    batch, rejects = decode_scored(raw([record]), CONFIG)
    assert rejects == []
    assert batch.pred.tolist() == [1]  # given pred wins over the threshold
    assert batch.ts.tolist() == [1_700_000_000.5]
    assert batch.model.tolist() == ["fraud"]
    assert batch.segment.tolist() == ["eu"]
    assert batch.payload == [{"amount": [1, 2], "who": None}]


def test_default_pred_uses_the_threshold_of_each_records_model() -> None:
    values: list[bytes | dict[str, Any] | None] = [
        {"id": "a", "score": 0.5},
        {"id": "b", "score": 0.49},
        {"id": "c", "score": 0.6, "model": "fraud"},
        {"id": "d", "score": 0.9, "model": "fraud"},
        {"id": "e", "score": 0.1, "pred": True},
        {"id": "f", "score": 0.95, "pred": False, "model": "fraud"},
        {"id": "g", "score": 0.7, "pred": None},
    ]
    batch, rejects = decode_scored(raw(values), CONFIG)
    assert rejects == []
    assert batch.pred.tolist() == [1, 0, 0, 1, 1, 0, 1]


def test_nulls_count_as_absent() -> None:
    value = {"id": "a", "score": 0.3, "ts": None, "model": None, "segment": None, "pred": None}
    batch, rejects = decode_scored(raw([value]), CONFIG)
    assert rejects == []
    assert batch.model.tolist() == ["default"] and batch.segment.tolist() == [""]
    assert batch.ts.tolist() == [KAFKA_MS / 1000]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2024-03-01T12:00:00Z", 1_709_294_400.0),
        ("2024-03-01t12:00:00z", 1_709_294_400.0),
        ("2024-03-01 13:30:00+01:30", 1_709_294_400.0),
        ("2024-03-01T12:00:00.250Z", 1_709_294_400.25),
        ("2024-03-01T07:00:00-05:00", 1_709_294_400.0),
    ],
)
def test_rfc3339_timestamps(text: str, seconds: float) -> None:
    assert parse_timestamp(text) == seconds
    batch, rejects = decode_scored(raw([{"id": "a", "score": 0.1, "ts": text}]), CONFIG)
    assert rejects == []
    assert batch.ts.tolist() == [seconds]


@pytest.mark.parametrize(
    "text",
    ["2024-03-01T12:00:00", "2024-03-01", "2024-13-01T00:00:00Z", "2024-03-01T23:59:60Z",
     "1709294400", "yesterday", "2024-03-01T12:00:00+0100", ""],
)  # fmt: skip
def test_bad_rfc3339_strings_are_rejected(text: str) -> None:
    assert parse_timestamp(text) is None
    reject = one_reject({"id": "a", "score": 0.1, "ts": text})
    assert reject.reason is RejectReason.BAD_TIMESTAMP
    assert reject.detail.startswith("field 'ts': expected seconds since the epoch or an RFC 3339")


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"{not json", RejectReason.MALFORMED_JSON, "invalid JSON: Expecting property name"),
        (b'{"id": "a", "score": 0.5', RejectReason.MALFORMED_JSON, "invalid JSON: "),
        (b"\xff\xfe\x00garbage", RejectReason.MALFORMED_JSON, "not UTF-8: byte 0xff at offset 0"),
        ('{"id": "a"}'.encode("utf-16"), RejectReason.MALFORMED_JSON, "not UTF-8: byte 0xff at offset 0"),
        (b'{"id": "\xc3\xa9\xed\xa0\x80"}', RejectReason.MALFORMED_JSON, "not UTF-8: byte 0xed at offset 10"),
        (b'\xef\xbb\xbf{"id": "\xc3("}', RejectReason.MALFORMED_JSON, "not UTF-8: byte 0xc3 at offset 11"),
        (b"{,}", RejectReason.MALFORMED_JSON, "invalid JSON: "),
        (b"\x80abc", RejectReason.MALFORMED_JSON, "not UTF-8: byte 0x80 at offset 0 (invalid start byte)"),
        (b"", RejectReason.MALFORMED_JSON, "invalid JSON: Expecting value"),
        (b"[" * 100_000, RejectReason.TOO_LARGE, "record value is 100000 bytes, more than 65536"),
        (b"[" * 60_000, RejectReason.MALFORMED_JSON, "invalid JSON: "),  # recursion depth
        (None, RejectReason.MALFORMED_JSON, "record has no value (a tombstone)"),
        (b"[1, 2]", RejectReason.NOT_AN_OBJECT, "expected a JSON object, got a list"),
        (b'"text"', RejectReason.NOT_AN_OBJECT, "expected a JSON object, got 'text'"),
        (b"null", RejectReason.NOT_AN_OBJECT, "expected a JSON object, got null"),
        ({"score": 0.5}, RejectReason.MISSING_FIELD, "field 'id' is missing"),
        ({"id": None, "score": 0.5}, RejectReason.MISSING_FIELD, "field 'id' is missing"),
        ({"id": "a"}, RejectReason.MISSING_FIELD, "field 'score' is missing"),
        ({"id": 12, "score": 0.5}, RejectReason.BAD_TYPE, "field 'id': expected a string, got 12"),
        ({"id": "", "score": 0.5}, RejectReason.OUT_OF_RANGE, "field 'id': expected 1 to 256 characters, got 0"),
        ({"id": "x" * 257, "score": 0.5}, RejectReason.OUT_OF_RANGE, "field 'id': expected 1 to 256 characters, got 257"),
        ({"id": "a\x00", "score": 0.5}, RejectReason.OUT_OF_RANGE, "field 'id': contains a NUL character or an unpaired surrogate"),
        ({"id": "a\ud800", "score": 0.5}, RejectReason.OUT_OF_RANGE, "field 'id': contains a NUL"),
        ({"id": "a", "score": "0.5"}, RejectReason.BAD_TYPE, "field 'score': expected a number in [0, 1], got '0.5'"),
        ({"id": "a", "score": True}, RejectReason.BAD_TYPE, "field 'score': expected a number in [0, 1], got true"),
        ({"id": "a", "score": [0.5]}, RejectReason.BAD_TYPE, "field 'score': expected a number in [0, 1], got a list"),
        ({"id": "a", "score": 1.7}, RejectReason.OUT_OF_RANGE, "field 'score': expected a number in [0, 1], got 1.7"),
        ({"id": "a", "score": -0.1}, RejectReason.OUT_OF_RANGE, "field 'score': expected a number in [0, 1], got -0.1"),
        (b'{"id": "a", "score": NaN}', RejectReason.OUT_OF_RANGE, "field 'score': expected a number in [0, 1], got nan"),
        (b'{"id": "a", "score": Infinity}', RejectReason.OUT_OF_RANGE, "got inf"),
        (b'{"id": "a", "score": -Infinity}', RejectReason.OUT_OF_RANGE, "got -inf"),
        (b'{"id": "a", "score": 1e999}', RejectReason.OUT_OF_RANGE, "got inf"),
        ({"id": "a", "score": 10**400}, RejectReason.OUT_OF_RANGE, "got an integer of more than 38 digits"),
        ({"id": "a", "score": 0.5, "pred": 2}, RejectReason.OUT_OF_RANGE, "field 'pred': expected 0 or 1, got 2"),
        ({"id": "a", "score": 0.5, "pred": 1.0}, RejectReason.BAD_TYPE, "field 'pred': expected 0 or 1 (or false/true), got 1.0"),
        ({"id": "a", "score": 0.5, "pred": "1"}, RejectReason.BAD_TYPE, "field 'pred': expected 0 or 1 (or false/true), got '1'"),
        ({"id": "a", "score": 0.5, "ts": 12}, RejectReason.BAD_TIMESTAMP, "field 'ts' 12 is not a time after 2000-01-01T00:00:00Z"),
        ({"id": "a", "score": 0.5, "ts": -1.0}, RejectReason.BAD_TIMESTAMP, "is not a time after 2000-01-01"),
        ({"id": "a", "score": 0.5, "ts": NOW + 90_000}, RejectReason.BAD_TIMESTAMP, "is more than 5 minutes after the record's Kafka timestamp (1790000000)"),
        ({"id": "a", "score": 0.5, "ts": NOW * 1000}, RejectReason.BAD_TIMESTAMP, "is not a time before 2100-01-01T00:00:00Z (milliseconds?)"),
        ({"id": "a", "score": 0.5, "ts": "2030-01-01T00:00:00Z"}, RejectReason.BAD_TIMESTAMP, "more than 5 minutes after the record's Kafka timestamp"),
        ({"id": "a", "score": 0.5, "ts": True}, RejectReason.BAD_TIMESTAMP, "field 'ts': expected seconds since the epoch or an RFC 3339 time, got true"),
        ({"id": "a", "score": 0.5, "ts": {"s": 1}}, RejectReason.BAD_TIMESTAMP, "got an object"),
        (b'{"id": "a", "score": 0.5, "ts": NaN}', RejectReason.BAD_TIMESTAMP, "field 'ts' nan is not a time"),
        ({"id": "a", "score": 0.5, "model": "nope"}, RejectReason.UNKNOWN_MODEL, "field 'model': unknown model 'nope' (configured: default, fraud)"),
        ({"id": "a", "score": 0.5, "model": ""}, RejectReason.UNKNOWN_MODEL, "unknown model ''"),
        ({"id": "a", "score": 0.5, "model": 3}, RejectReason.BAD_TYPE, "field 'model': expected a string, got 3"),
        ({"id": "a", "score": 0.5, "model": ["default"]}, RejectReason.BAD_TYPE, "field 'model': expected a string, got a list"),
        ({"id": "a", "score": 0.5, "segment": 5}, RejectReason.BAD_TYPE, "field 'segment': expected a string, got 5"),
        ({"id": "a", "score": 0.5, "segment": "s" * 129}, RejectReason.OUT_OF_RANGE, "field 'segment': expected 0 to 128 characters, got 129"),
        ({"id": "a", "score": 0.5, "segment": "\x00"}, RejectReason.OUT_OF_RANGE, "field 'segment': contains a NUL"),
        (b'{"id": "a", "score": 0.5, "payload": {"x": [1, NaN]}}', RejectReason.BAD_TYPE, "field 'payload.x[1]': NaN, Infinity and numbers beyond"),
        (b'{"id": "a", "score": 0.5, "payload": -Infinity}', RejectReason.BAD_TYPE, "field 'payload': NaN, Infinity"),
        (b'{"id": "a", "score": 0.5, "payload": {"amount": 1e400}}', RejectReason.BAD_TYPE, "beyond a double's range"),
        (b'{"id": "a", "score": 0.5, "payload": [-1e0000999]}', RejectReason.BAD_TYPE, "beyond a double's range"),
        (b'{"id": "a", "score": 0.5, "payload": {"n": %s}}' % (b"9" * 400), RejectReason.BAD_TYPE, "field 'payload.n': NaN, Infinity and numbers beyond a double's range"),
        (b'{"id": "a", "score": 0.5, "payload": [1, {"\xc3\xa9": [-%s]}]}' % (b"1" * 310), RejectReason.BAD_TYPE, "field 'payload[1].\\xe9[0]': NaN"),
        ({"id": "a", "score": 0.5, "payload": {"a": [{"b": 1}] * 3, "c": _nested(512)}}, RejectReason.OUT_OF_RANGE, "field 'payload': nested more than 512 levels deep"),
        (b'{"id": "a", "score": 0.5, "payload": {"text": "x\\ud800y"}}', RejectReason.OUT_OF_RANGE, "field 'payload.text': an unpaired surrogate"),
        (b'{"id": "a", "score": 0.5, "payload": [{"\\uDC00k": 1}]}', RejectReason.OUT_OF_RANGE, "field 'payload[0].\\udc00k': an unpaired surrogate"),
        (b'{"id": "a", "score": 0.5, "payload": "\\ude00\\ud83d"}', RejectReason.OUT_OF_RANGE, "field 'payload': an unpaired surrogate"),
    ],
)  # fmt: skip
def test_each_reject_reason_with_its_detail(
    value: bytes | dict[str, Any] | None, reason: RejectReason, detail: str
) -> None:
    reject = one_reject(value)
    assert reject.reason is reason
    assert detail in reject.detail, reject.detail
    assert reject.record.offset == 100


def test_large_exponents_that_fit_a_double_are_kept() -> None:
    """The cheap search for overflowing numbers only picks candidates: 1e300, an exponent
    with leading zeros and "e400" in a string are payloads like any other."""
    values = [
        b'{"id": "a", "score": 0.5, "payload": {"x": 1e300, "y": 2E-0000005}}',
        b'{"id": "b", "score": 0.5, "payload": "model e400 / run 1e999"}',
    ]
    batch, rejects = decode_scored(raw(values), CONFIG)
    assert rejects == [] and batch.payload[0] == {"x": 1e300, "y": 2e-5}


def test_a_payload_with_paired_surrogate_escapes_is_kept() -> None:
    """An escaped pair is one character (an emoji), as orjson reads it; beside a record that
    orjson refuses (so the batch is searched), it is still kept."""
    values = [
        b'{"id": "a", "score": 0.5, "payload": {"t": "\\ud83d\\ude00", "u": "\\uD83D\\uDE00"}}',
        b'{"id": "b", "score": 0.5, "payload": {"t": "\\ud800"}}',
    ]
    batch, rejects = decode_scored(raw(values), CONFIG)
    assert batch.ids.tolist() == ["a"] and [r.record.offset for r in rejects] == [101]
    assert batch.payload[0] == {"t": "\U0001f600", "u": "\U0001f600"}


def test_record_just_under_the_size_limit_is_accepted() -> None:
    prefix = b'{"id": "a", "score": 0.5, "payload": "'
    value = prefix + b"x" * (MAX_VALUE_BYTES - len(prefix) - 2) + b'"}'
    assert len(value) == MAX_VALUE_BYTES
    batch, rejects = decode_scored(raw([value]), CONFIG)
    assert rejects == [] and len(batch) == 1
    assert one_reject(value[:-2] + b'x"}').reason is RejectReason.TOO_LARGE


def test_a_payload_as_deep_as_allowed_is_kept_and_its_request_encodes_deep_in_a_stack() -> None:
    """512 levels pass, and their request encodes even 400 frames down the stack."""
    value = json.dumps({"id": "a", "score": 0.5, "payload": _nested(512)}).encode()
    batch, rejects = decode_scored(raw([value]), CONFIG)
    assert rejects == [] and len(batch) == 1

    def encode_at(frames: int) -> bytes:
        return json.dumps(batch.payload[0]).encode() if frames == 0 else encode_at(frames - 1)

    assert encode_at(400).count(b"[") == 512
    deeper = json.dumps({"id": "a", "score": 0.5, "payload": _nested(900)}).encode()
    assert one_reject(deeper).reason is RejectReason.OUT_OF_RANGE


def test_a_payload_that_only_spells_nan_is_kept_and_written_as_json() -> None:
    values = [
        b'{"id": "a", "score": 0.5, "payload": {"NaN": "Infinity", "x": 1e308}}',
        b'{"id": "b", "score": 0.5, "payload": {"x": NaN}}',
        b'{"id": "c", "score": 0.5, "segment": "NaN"}',
    ]
    batch, rejects = decode_scored(raw(values), CONFIG)
    assert batch.ids.tolist() == ["a", "c"] and [r.record.offset for r in rejects] == [101]
    assert json.dumps(batch.payload, allow_nan=False) == '[{"NaN": "Infinity", "x": 1e+308}, null]'


def test_missing_kafka_timestamp_without_ts_is_rejected() -> None:
    record = RawRecord("p", 0, 7, -1, None, b'{"id": "a", "score": 0.5}')
    batch, rejects = decode_scored([record], CONFIG)
    assert len(batch) == 0
    assert rejects[0].reason is RejectReason.BAD_TIMESTAMP
    assert rejects[0].detail == "no field 'ts' and no Kafka timestamp"
    record = RawRecord("p", 0, 7, 1000, None, b'{"id": "a", "score": 0.5}')
    _, rejects = decode_scored([record], CONFIG)
    assert rejects[0].detail == "Kafka timestamp 1.0 is not a time after 2000-01-01T00:00:00Z"


def test_event_times_ahead_are_judged_against_the_kafka_timestamp_not_the_clock() -> None:
    hour = 3600.0
    values = [{"id": "a", "score": 0.5, "ts": NOW + dt} for dt in (0.0, 300.0, 301.0, hour)]
    records = [
        RawRecord("p", 0, i, int(NOW * 1000), None, json.dumps(v).encode())
        for i, v in enumerate(values)
    ]
    batch, rejects = decode_scored(records, CONFIG)
    assert batch.offset.tolist() == [0, 1] and [r.record.offset for r in rejects] == [2, 3]
    written_later = [r._replace(timestamp_ms=int((NOW + hour) * 1000)) for r in records]
    batch, rejects = decode_scored(written_later, CONFIG)  # the same records, written later
    assert batch.offset.tolist() == [0, 1, 2, 3] and not rejects
    # without a Kafka timestamp (a producer may set 0 or none) only the bound of 2100 holds
    untimed = [r._replace(timestamp_ms=ms) for ms in (0, -1) for r in records]
    batch, rejects = decode_scored(untimed, CONFIG)
    assert len(batch) == 8 and not rejects
    far = RawRecord("p", 0, 9, 0, None, b'{"id": "a", "score": 0.5, "ts": 4102444800}')
    _, rejects = decode_scored([far], CONFIG)
    assert rejects[0].detail == ("field 'ts' 4102444800 is not a time before 2100-01-01T00:00:00Z")


def test_first_failing_field_decides_the_reason() -> None:
    reject = one_reject({"id": 5, "score": 7, "model": "nope"})
    assert reject.reason is RejectReason.BAD_TYPE
    assert reject.detail.startswith("field 'id'")


def test_order_is_kept_and_every_record_lands_once() -> None:
    values: list[bytes | dict[str, Any] | None] = []
    for i in range(60):
        if i % 4 == 1:
            values.append({"id": f"r{i}", "score": 2.0})
        elif i % 7 == 3:
            values.append(b"oops")
        else:
            values.append({"id": f"r{i}", "score": (i % 10) / 10, "segment": f"s{i % 3}"})
    records = raw(values)
    batch, rejects = decode_scored(records, CONFIG)
    accepted = batch.offset.tolist()
    rejected = [r.record.offset for r in rejects]
    assert accepted == sorted(accepted) and rejected == sorted(rejected)
    assert sorted(accepted + rejected) == [r.offset for r in records]
    assert batch.ids.tolist() == [f"r{o - 100}" for o in accepted]
    assert batch.segment.tolist() == [f"s{(o - 100) % 3}" for o in accepted]
    assert batch.partition.tolist() == [(o - 100) % 3 for o in accepted]


def test_empty_batch() -> None:
    batch, rejects = decode_scored([], CONFIG)
    assert len(batch) == 0 and rejects == []
    assert batch.ids.shape == (0,) and batch.payload == []


def test_unicode_ids_round_trip() -> None:
    ids = ["é", "日本語", "emoji-🙂", "tab\there", "quote\"'", " "]
    batch, rejects = decode_scored(raw([{"id": i, "score": 0.5} for i in ids]), CONFIG)
    assert rejects == []
    assert batch.ids.tolist() == ids


# ---------------------------------------------------------------------------------- labels


RID, RID2 = "0123456789abcdef" * 2, "f" * 32


def labels(values: Sequence[bytes | dict[str, Any] | None]) -> list[RawRecord]:
    return raw(values, topic="audit-labels")


def test_labels_by_request_id_and_by_record_id() -> None:
    results, rejects = decode_labels(
        labels(
            [
                {"request_id": RID, "label": 1},
                {"id": "rec-9", "model": "fraud", "label": False, "labeler": "ann",
                 "ts": "2024-03-01T12:00:00Z", "token": "t0k"},
                {"request_id": RID2, "id": "x", "label": 0, "ts": 1_709_294_400},
            ]
        ),
    )  # fmt: skip
    assert rejects == []
    first, second, third = results
    assert (first.request_id, first.record_id, first.label, first.model) == (RID, None, 1, None)
    assert first.ts is None and first.labeler is None and first.token is None
    assert (second.record_id, second.model, second.label) == ("rec-9", "fraud", 0)
    assert (second.labeler, second.token, second.ts) == ("ann", "t0k", 1_709_294_400.0)
    assert (third.request_id, third.record_id, third.ts) == (RID2, "x", 1_709_294_400.0)
    assert [r.source.offset for r in results] == [100, 101, 102]


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"nope", RejectReason.MALFORMED_JSON, "invalid JSON"),
        (None, RejectReason.MALFORMED_JSON, "tombstone"),
        (b"[]", RejectReason.NOT_AN_OBJECT, "expected a JSON object, got a list"),
        ({"label": 1}, RejectReason.MISSING_FIELD, "needs field 'request_id' or field 'id'"),
        ({"request_id": RID}, RejectReason.MISSING_FIELD, "field 'label' is missing"),
        ({"request_id": RID, "label": 2}, RejectReason.OUT_OF_RANGE, "field 'label': expected 0 or 1, got 2"),
        ({"request_id": RID, "label": "yes"}, RejectReason.BAD_TYPE, "field 'label': expected 0 or 1 (or false/true), got 'yes'"),
        ({"request_id": RID, "label": 0.5}, RejectReason.BAD_TYPE, "got 0.5"),
        ({"request_id": 5, "label": 1}, RejectReason.BAD_TYPE, "field 'request_id': expected a string, got 5"),
        ({"request_id": "", "label": 1}, RejectReason.OUT_OF_RANGE, "field 'request_id': expected 1 to 256 characters, got 0"),
        ({"request_id": "abc", "label": 1}, RejectReason.UNKNOWN_REQUEST, "field 'request_id' 'abc' is not an id this monitor issues (32 lowercase hex characters)"),
        ({"request_id": RID.upper(), "id": "x", "label": 1}, RejectReason.UNKNOWN_REQUEST, "copy the audit request's request_id, or send the record's 'id'"),
        ({"id": "a" * 300, "label": 1}, RejectReason.OUT_OF_RANGE, "field 'id': expected 1 to 256 characters, got 300"),
        ({"id": "a", "model": 1, "label": 1}, RejectReason.BAD_TYPE, "field 'model': expected a string"),
        ({"id": "a", "labeler": ["x"], "label": 1}, RejectReason.BAD_TYPE, "field 'labeler': expected a string, got a list"),
        ({"id": "a", "token": 7, "label": 1}, RejectReason.BAD_TYPE, "field 'token': expected a string, got 7"),
        ({"id": "a\x00", "label": 1}, RejectReason.OUT_OF_RANGE, "field 'id': contains a NUL"),
        ({"id": "a", "label": 1, "ts": "later"}, RejectReason.BAD_TIMESTAMP, "field 'ts': expected seconds"),
        ({"id": "a", "label": 1, "ts": 5}, RejectReason.BAD_TIMESTAMP, "field 'ts' 5 is not a time after 2000"),
        ({"id": "a", "label": 1, "ts": NOW + 200_000}, RejectReason.BAD_TIMESTAMP, "more than 5 minutes after the record's Kafka timestamp"),
        (b"{" + b" " * MAX_VALUE_BYTES + b"}", RejectReason.TOO_LARGE, "more than 65536"),
    ],
)  # fmt: skip
def test_each_label_reject_reason(
    value: bytes | dict[str, Any] | None, reason: RejectReason, detail: str
) -> None:
    results, rejects = decode_labels(labels([value]))
    assert results == []
    assert [r.reason for r in rejects] == [reason]
    assert detail in rejects[0].detail, rejects[0].detail


def test_label_order_is_kept() -> None:
    values: list[bytes | dict[str, Any] | None] = [
        {"request_id": f"{i:032x}", "label": i % 2} if i % 3 else b"x" for i in range(30)
    ]
    results, rejects = decode_labels(labels(values))
    assert [r.request_id for r in results] == [f"{i:032x}" for i in range(30) if i % 3]
    assert [r.record.offset for r in rejects] == [100 + i for i in range(30) if i % 3 == 0]


# ----------------------------------------------------------------------------- dead letter


def test_deadletter_message_for_utf8_value() -> None:
    reject = one_reject({"id": "a", "score": 1.7})
    message = json.loads(deadletter_value(reject))
    assert message == {
        "reason": "out_of_range",
        "detail": "field 'score': expected a number in [0, 1], got 1.7",
        "topic": "predictions",
        "partition": 0,
        "offset": 100,
        "timestamp_ms": KAFKA_MS,
        "key_bytes": 2,
        "value_bytes": 25,
        "value": '{"id": "a", "score": 1.7}',
    }
    assert deadletter_key(reject) == b"k0"
    assert deadletter_value(reject) == deadletter_value(reject)  # deterministic bytes


def test_deadletter_message_for_binary_value() -> None:
    value = b"\x80\x81{bad"
    reject = one_reject(value)
    message = json.loads(deadletter_value(reject))
    assert message["reason"] == "malformed_json"
    assert message["value"] == "\ufffd\ufffd{bad"
    assert base64.b64decode(message["value_b64"]) == value


def test_deadletter_message_is_cut_to_64_kib() -> None:
    value = "é".encode() * 40_000  # 80,000 bytes of valid UTF-8, each character 6 escaped
    reject = Reject(RejectReason.TOO_LARGE, "big", raw([value])[0])
    encoded = deadletter_value(reject)
    message = json.loads(encoded)
    assert "value_b64" not in message and message["value_bytes"] == 80_000
    assert DEADLETTER_BYTES - 6 < len(encoded) <= DEADLETTER_BYTES  # the longest start that fits
    assert message["value"] == "é" * len(message["value"])
    binary = b"\xff" * 100_000
    encoded = deadletter_value(Reject(RejectReason.TOO_LARGE, "big", raw([binary])[0]))
    message = json.loads(encoded)
    cut = base64.b64decode(message["value_b64"])
    assert cut == b"\xff" * len(cut) and message["value"] == "\ufffd" * len(cut)
    assert DEADLETTER_BYTES - 12 < len(encoded) <= DEADLETTER_BYTES
    assert len(cut) > 8_000  # 6 bytes of escape and 4/3 of base64 each


# a byte each that escapes to 6 (control, invalid) or 2 (quote) bytes, 4 that escape to 12
_WORST_VALUES = [
    b"\xff" * 70_000,
    b"\x01" * 70_000,
    b'"' * 70_000,
    "\U0001f600".encode() * 20_000,
    b"\xed\xa0\x80" * 30_000,  # encoded lone surrogates: not UTF-8
    b'"\\ud800"' * 10_000,  # escaped lone surrogates: valid JSON text
    json.dumps({"id": "a", "score": 0.5, "payload": ["\x01\U0001f600"] * 6_000}).encode(),
    b"\x00" * 600_000,
]


@pytest.mark.parametrize("value", _WORST_VALUES, ids=lambda v: repr(v[:12]))
def test_a_dead_letter_stays_within_its_bound_for_the_worst_records(value: bytes) -> None:
    """A 70,000-byte value of 0xff bytes made a dead letter of 480,714 bytes (each byte a
    6-byte ``\\ufffd`` escape plus its base64), and the key was copied whole: a 600,000-byte
    key made 1,080,864 bytes, which the broker refused, and the daemon retried that record
    for good. Key and value now stay within their bounds whatever the record."""
    key = b"\xff" * 600_000
    record = RawRecord("predictions", 2, 7, KAFKA_MS, key, value)
    reject = Reject(RejectReason.TOO_LARGE, "\ud800\U0001f600" * 5_000, record)
    encoded = deadletter_value(reject)
    assert len(encoded) <= DEADLETTER_BYTES
    assert deadletter_key(reject) == key[:DEADLETTER_KEY_BYTES]
    message = json.loads(encoded)
    assert message["key_bytes"] == 600_000 and message["value_bytes"] == len(value)
    assert len(message["detail"]) == DEADLETTER_DETAIL_CHARS
    if "value_b64" in message:
        cut = base64.b64decode(message["value_b64"])
        assert value.startswith(cut) and message["value"] == cut.decode("utf-8", "replace")
    else:
        assert value.decode().startswith(message["value"])
    assert len(encoded) > DEADLETTER_BYTES - 16  # the longest start that fits, not emptied
    minimal = json.loads(deadletter_minimal(reject))
    assert minimal == {
        "reason": "too_large",
        "topic": "predictions",
        "partition": 2,
        "offset": 7,
        "timestamp_ms": KAFKA_MS,
        "key_bytes": 600_000,
        "value_bytes": len(value),
    }


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"\xff", b"\x01", b'"', b"a", "\U0001f600".encode(), b"\xed\xa0\x80"]),
        min_size=0,
        max_size=40,
    ),
    st.integers(0, 5_000),
    st.binary(max_size=2_000),
)
def test_a_dead_letter_of_any_mix_of_bytes_fits(
    pieces: list[bytes], repeat: int, key: bytes
) -> None:
    value = b"".join(pieces) * repeat
    reject = Reject(RejectReason.MALFORMED_JSON, "bad", RawRecord("t", 0, 1, 2, key, value))
    encoded = deadletter_value(reject)
    assert len(encoded) <= DEADLETTER_BYTES
    message = json.loads(encoded)
    kept = base64.b64decode(message["value_b64"]) if "value_b64" in message else None
    if kept is None:
        kept = message["value"].encode()
    assert value.startswith(kept)
    if len(value) <= DEADLETTER_BYTES // 20:  # short enough to fit whole, however escaped
        assert kept == value


def test_deadletter_message_for_tombstone_and_odd_detail() -> None:
    record = RawRecord("t", 1, 2, 3, None, None)
    message = json.loads(deadletter_value(Reject(RejectReason.MALFORMED_JSON, "x\ud800y", record)))
    assert message["value"] is None and "value_b64" not in message
    assert message["detail"] == "x\ud800y"
