"""Fuzzing the decoders: any bytes in, never an exception, each record accepted or rejected once.

Inputs mix random bytes, truncated JSON, wrong types, huge strings, NaN/inf/negative scores,
ids with odd characters (NUL, unpaired surrogates, emoji) and timestamps far in the past or
future. Accepted rows are checked field by field against the JSON they came from.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.schema import Config, ModelConfig
from monitor.core.messages import RawRecord
from monitor.core.records import (
    MAX_FUTURE_S,
    MAX_ID_CHARS,
    MAX_SEGMENT_CHARS,
    MAX_TS,
    MAX_VALUE_BYTES,
    MIN_TS,
    deadletter_value,
    decode_labels,
    decode_scored,
    parse_timestamp,
)
from monitor.errors import RejectReason

NOW = 1_790_000_000.0
CONFIG = Config(
    models={
        "default": ModelConfig(name="default", threshold=0.5),
        "fraud": ModelConfig(name="fraud", threshold=0.8),
    },
    default_model="default",
)
FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

odd_text = st.text(
    st.characters(exclude_categories=()),  # includes NUL, controls and unpaired surrogates
    max_size=20,
)
huge_text = st.integers(200, 70_000).map(lambda n: "x" * n)
texts = st.one_of(st.text(max_size=12), odd_text, huge_text, st.just(""))
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
    st.integers(-(10**30), 10**30),
    st.just(10**400),
    st.sampled_from([0, 1, -0.0, 1.0000001, -1e-9]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
timestamps = st.one_of(
    st.floats(MIN_TS, NOW + 2 * MAX_FUTURE_S),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**15), 10**15),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat()),  # no offset
    texts,
)
fields = {
    "id": st.one_of(st.text(min_size=1, max_size=30), odd_text, huge_text, json_values),
    "score": st.one_of(st.floats(0, 1), numbers, json_values),
    "pred": st.one_of(st.sampled_from([0, 1, True, False, None]), json_values),
    "ts": st.one_of(timestamps, json_values),
    "model": st.one_of(st.sampled_from(["default", "fraud", "other", ""]), json_values),
    "segment": st.one_of(st.text(max_size=10), odd_text, huge_text, json_values),
    "payload": json_values,
}
record_objects = st.fixed_dictionaries(
    {}, optional={k: v for k, v in fields.items()}
)  # fmt: skip


valid_objects = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=30), "score": st.floats(0, 1)},
    optional={
        "pred": st.sampled_from([0, 1, True, False, None]),
        "ts": st.one_of(
            st.floats(MIN_TS, NOW + MAX_FUTURE_S),
            st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
        ),
        "model": st.sampled_from(["default", "fraud", None]),
        "segment": st.text(max_size=10),
        "payload": json_values,
    },
)


_ODD_STRINGS: list[Any] = ["", "a\x00", "\x00", "\ud800", "a\udfff", "x" * 257, "🙂" * 300, " "]
_ODD_SCALARS: list[Any] = [None, True, False, 0, 1, -1, 2, 0.5, 1.5, -0.5, 10**400, "1", "0.5"]
_ODD_SCALARS += [[], {}, [0.5], {"v": 1}]
_FLOATS_EDGE: list[Any] = [math.nan, math.inf, -math.inf, -0.0, 1e-320, 1 + 2**-52, -1e-300]
EDGE_VALUES: dict[str, list[Any]] = {
    "id": _ODD_STRINGS + _ODD_SCALARS + ["x" * 256, "\t", "日本"],
    "score": _FLOATS_EDGE + _ODD_SCALARS + _ODD_STRINGS + [1.0, 0, 1],
    "pred": [*_ODD_SCALARS, 1.0, 0.0],
    "ts": [*_FLOATS_EDGE, *_ODD_SCALARS, 0, 946_684_799.9, 946_684_800, NOW + MAX_FUTURE_S,
           NOW + MAX_FUTURE_S + 1, NOW * 1000, "2000-01-01T00:00:00Z", "1999-12-31T23:59:59Z",
           "2024-02-30T00:00:00Z", "2024-01-01T00:00:00", "9999-12-31T23:59:59Z",
           "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2024-01-01T00:00:00+99:00",
           "2024-01-01T00:00:00+23:59", "2024-01-01T00:00:00.1234567890Z"],
    "model": _ODD_STRINGS + _ODD_SCALARS + ["Default", "fraud ", "fraud"],
    "segment": _ODD_STRINGS + _ODD_SCALARS + ["s" * 128, "s" * 129],
    "payload": [math.nan, None, {"a": [1, {"b": math.inf}]}, "x" * 60_000],
}  # fmt: skip
nasty = {key: st.sampled_from(edge) for key, edge in EDGE_VALUES.items()}


@st.composite
def one_field_broken(draw: st.DrawFn, key: str | None = None) -> dict[str, Any]:
    """A valid record with one field (``key`` or any) set to an edge case or anything at all."""
    obj = draw(valid_objects)
    if key is None:
        key = draw(st.sampled_from(sorted(fields)))
    obj[key] = draw(st.one_of(nasty[key], nasty[key], fields[key]))
    return obj


def encode(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8", "surrogatepass")


values = st.one_of(
    valid_objects.map(encode),
    one_field_broken().map(encode),
    st.binary(max_size=300),
    record_objects.map(encode),
    st.tuples(record_objects.map(encode), st.floats(0, 1)).map(
        lambda t: t[0][: int(len(t[0]) * t[1])]  # truncated JSON
    ),
    json_values.map(encode),
    st.none(),
    st.sampled_from(
        [b"[" * 50_000, b"NaN", b"{}", b'{"id": "a", "score": 0.5}', b"\xef\xbb\xbf{}", b"\x00"]
    ),
)
kafka_times = st.one_of(st.just(int(NOW * 1000)), st.integers(-1, 3 * 10**12))


@st.composite
def batches(draw: st.DrawFn, topic: str = "predictions") -> list[RawRecord]:
    items = draw(st.lists(st.tuples(values, kafka_times), max_size=12))
    return [
        RawRecord(topic, i % 2, 1000 + i, ts, None, value) for i, (value, ts) in enumerate(items)
    ]


@st.composite
def edge_batches(draw: st.DrawFn, key: str) -> list[RawRecord]:
    """Valid records, most with field ``key`` set to an edge case."""
    objs = st.one_of(valid_objects, one_field_broken(key), one_field_broken(key))
    items = draw(st.lists(st.tuples(objs.map(encode), kafka_times), max_size=16))
    return [
        RawRecord("predictions", i % 2, 1000 + i, ts, None, value)
        for i, (value, ts) in enumerate(items)
    ]


def not_ahead(ts: float, record: RawRecord) -> bool:
    """Before 2100, and at most 5 min after the record's Kafka timestamp if it has one."""
    kafka_s = record.timestamp_ms / 1000
    return ts < MAX_TS and (kafka_s < MIN_TS or ts <= kafka_s + MAX_FUTURE_S)


def same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@FUZZ
@given(batches())
def test_decode_scored_never_raises_and_accounts_for_every_record(
    records: list[RawRecord],
) -> None:
    check_scored(records)


@pytest.mark.parametrize("key", sorted(fields))
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_decode_scored_edge_cases_of_each_field(key: str, data: st.DataObject) -> None:
    check_scored(data.draw(edge_batches(key)))


@pytest.mark.parametrize("key", sorted(EDGE_VALUES))
def test_every_edge_value_of_every_field(key: str) -> None:
    base = {"id": "rec", "score": 0.25, "ts": NOW - 10, "model": "fraud", "segment": "s"}
    records = [
        RawRecord("predictions", 0, i, int(NOW * 1000), None, encode({**base, key: value}))
        for i, value in enumerate(EDGE_VALUES[key])
    ]
    check_scored(records)


def check_scored(records: list[RawRecord]) -> None:
    """Decode never raises, every record lands once, accepted rows match the schema."""
    batch, rejects = decode_scored(records, CONFIG)
    accepted = batch.offset.tolist()
    rejected = [r.record.offset for r in rejects]
    assert sorted(accepted + rejected) == [r.offset for r in records]  # each exactly once
    assert accepted == sorted(accepted) and rejected == sorted(rejected)  # order kept
    n = len(batch)
    for column in (batch.ids, batch.score, batch.pred, batch.ts, batch.model, batch.segment):
        assert column.shape == (n,)
    assert len(batch.payload) == n
    by_offset = {r.offset: r for r in records}
    for k, offset in enumerate(accepted):
        record = by_offset[offset]
        assert record.value is not None and len(record.value) <= MAX_VALUE_BYTES
        obj = json.loads(record.value)
        assert isinstance(obj, dict)
        # id: a 1..256 character string, unchanged
        assert isinstance(obj["id"], str) and 1 <= len(obj["id"]) <= MAX_ID_CHARS
        assert batch.ids[k] == obj["id"]
        obj["id"].encode("utf-8")
        # score: a real number in [0, 1], not a boolean
        assert type(obj["score"]) in (int, float)
        assert 0.0 <= batch.score[k] <= 1.0 and batch.score[k] == obj["score"]
        model = obj.get("model") or CONFIG.default_model
        assert batch.model[k] == model and model in CONFIG.models
        pred = obj.get("pred")
        expected = (
            int(pred) if pred is not None else int(obj["score"] >= CONFIG.models[model].threshold)
        )
        assert batch.pred[k] == expected
        ts = obj.get("ts")
        if ts is None:
            expected_ts = record.timestamp_ms / 1000
        elif isinstance(ts, str):
            parsed = parse_timestamp(ts)
            assert parsed is not None
            expected_ts = parsed
        else:
            assert type(ts) in (int, float)
            expected_ts = float(ts)
        assert batch.ts[k] == expected_ts
        assert math.isfinite(batch.ts[k]) and batch.ts[k] >= MIN_TS
        assert not_ahead(batch.ts[k], record)
        segment = obj.get("segment") or ""
        assert isinstance(segment, str) and len(segment) <= MAX_SEGMENT_CHARS
        assert batch.segment[k] == segment and "\x00" not in segment
        assert same_json(batch.payload[k], obj.get("payload"))
        assert batch.partition[k] == record.partition
    for reject in rejects:
        assert isinstance(reject.reason, RejectReason) and reject.detail
        assert len(reject.detail) < 400  # details never echo whole values
        message = json.loads(deadletter_value(reject))
        assert message["reason"] == reject.reason.value
        assert message["offset"] == reject.record.offset


label_fields = {
    "request_id": fields["id"],
    "id": fields["id"],
    "model": fields["model"],
    "label": st.one_of(st.sampled_from([0, 1, True, False]), json_values),
    "labeler": texts,
    "token": texts,
    "ts": fields["ts"],
}
valid_labels = st.fixed_dictionaries(
    {"label": st.sampled_from([0, 1, True, False])},
    optional={
        "request_id": st.text(min_size=1, max_size=32),
        "id": st.text(min_size=1, max_size=32),
        "model": st.sampled_from(["default", "fraud"]),
        "labeler": st.text(min_size=1, max_size=8),
        "token": st.text(min_size=1, max_size=8),
        "ts": st.floats(MIN_TS, NOW),
    },
)


@st.composite
def one_label_field_broken(draw: st.DrawFn) -> dict[str, Any]:
    """A valid label with one field replaced by anything."""
    obj = draw(valid_labels)
    key = draw(st.sampled_from(sorted(label_fields)))
    edge = nasty["id"] if key in {"request_id", "id", "labeler", "token"} else nasty["pred"]
    obj[key] = draw(st.one_of(edge, label_fields[key]))
    return obj


label_values = st.one_of(
    valid_labels.map(encode),
    one_label_field_broken().map(encode),
    st.binary(max_size=200),
    st.fixed_dictionaries({}, optional=label_fields).map(encode),
    st.fixed_dictionaries({}, optional=label_fields)
    .map(encode)
    .flatmap(lambda b: st.integers(0, len(b)).map(lambda k: b[:k])),
    st.none(),
)


@FUZZ
@given(st.lists(label_values, max_size=12))
def test_decode_labels_never_raises_and_accounts_for_every_record(
    items: list[bytes | None],
) -> None:
    records = [
        RawRecord("audit-labels", 0, i, int(NOW * 1000), None, v) for i, v in enumerate(items)
    ]
    results, rejects = decode_labels(records)
    accepted = [r.source.offset for r in results]
    rejected = [r.record.offset for r in rejects]
    assert sorted(accepted + rejected) == list(range(len(records)))
    assert accepted == sorted(accepted) and rejected == sorted(rejected)
    for result in results:
        value = result.source.value
        assert value is not None
        obj = json.loads(value)
        assert result.request_id == obj.get("request_id")
        assert result.record_id == obj.get("id")
        assert result.request_id is not None or result.record_id is not None
        assert result.label in (0, 1) and result.label == int(obj["label"])
        assert type(obj["label"]) in (int, bool)
        for text in (result.request_id, result.record_id, result.labeler, result.token):
            assert text is None or (isinstance(text, str) and 1 <= len(text) <= MAX_ID_CHARS)
        assert result.model == obj.get("model")
        if result.ts is not None:
            assert math.isfinite(result.ts) and result.ts >= MIN_TS
            assert not_ahead(result.ts, result.source)
        else:
            assert obj.get("ts") is None
    for reject in rejects:
        assert reject.detail
        json.loads(deadletter_value(reject))
