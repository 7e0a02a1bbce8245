"""The fast JSON path of the record decoders gives exactly what ``json.loads`` gives.

Of the value decoded strictly as UTF-8 (one leading byte order mark ignored): ``json.loads`` of
the bytes would guess UTF-16 or UTF-32 from the first bytes. orjson decodes the common case;
everything it reads differently (integers beyond 64 bits, NaN/Infinity, escaped lone
surrogates, a BOM, overflowing floats) or rejects goes to ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.messages import RawRecord
from monitor.core.records import _loads, _parse, _parse_all

TRICKY = [
    b"123456789012345678901234567890",
    b"-9223372036854775809",
    b"18446744073709551616",
    b'{"id":"a","score":1234567890123456789012}',
    b'{"payload":[0.1234567890123456789]}',
    b'{"score":0.00012345678901234567,"ts":1763700000.1234567890123456789}',
    b'{"id":"12345678901234567890123","payload":"\\"12345678901234567890"}',
    b'{"id":"x:12345678901234567890123"}',
    b'{"payload":[1,-12345678901234567890123]}',
    b'{"payload":{"n":12345678901234567890123}}',
    b'{"payload":[1e0000000000000000000400,2E-00000000000000000000001]}',
    b"1.5\n18446744073709551616",
    b"1e400",
    b"-1e400",
    b"NaN",
    b'{"score":Infinity}',
    b'"\\ud800"',
    b'"\xed\xa0\x80"',
    b'\xef\xbb\xbf{"a":1}',
    '{"a":1}'.encode("utf-16"),
    '{"a":1}'.encode("utf-32"),
    b"\xff\xfe{garbage",
    b'{"a":1,"a":2}',
    b'{"id":"rec-0000000001","score":0.5}',
    b"",
    b"{",
]


def _json_loads(value: bytes) -> Any:
    """The reference: ``json.loads`` of ``value`` as strict UTF-8 after an optional BOM."""
    return json.loads(value.decode("utf-8-sig"))


def _outcome(fn: Any, value: bytes) -> tuple[str, str]:
    try:
        return "ok", json.dumps(fn(value), sort_keys=True, allow_nan=True)
    except Exception as exc:  # the error type must match too
        return "error", type(exc).__name__


def _norm(parsed: Any) -> tuple[str, str]:
    """A decoded value (or a ``_Failed``) as comparable text; NaN and types kept apart."""
    if type(parsed).__name__ == "_Failed":
        return "failed", str(parsed.reason)
    return type(parsed).__name__, json.dumps(parsed, sort_keys=True, allow_nan=True)


def test_tricky_values_decode_exactly_as_json_loads() -> None:
    for value in TRICKY:
        assert _outcome(_loads, value) == _outcome(_json_loads, value), value
        expected = _outcome(_json_loads, value)
        got = _norm(_parse(value))
        assert (got[0] == "failed") == (expected[0] == "error"), value
        if expected[0] == "ok":
            assert got == _norm(_json_loads(value)), value


def test_a_batch_with_one_odd_value_decodes_each_as_json_loads() -> None:
    plain = [b'{"id":"r%d","score":0.25}' % i for i in range(20)]
    for odd in TRICKY:
        values = [*plain[:7], odd, *plain[7:]]
        records = [RawRecord("t", 0, i, 0, None, v) for i, v in enumerate(values)]
        got = _parse_all(records)
        assert [_norm(g) for g in got] == [_norm(_parse(v)) for v in values], odd
    big = [RawRecord("t", 0, 0, 0, None, b'{"n":99999999999999999999}')]
    assert _parse_all(big) == [{"n": 99999999999999999999}]


def test_floats_and_numeric_strings_with_long_digit_runs_stay_on_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what json.dumps writes for small scores and event times, and 23-digit numeric ids
    values = [
        b'{"id":"%d","score":%r,"ts":%r}' % (10**22 + i, 1.2345678901234567e-4 * i, 1.7e9 + i / 7)
        for i in range(1, 50)
    ]
    expected = [json.loads(v) for v in values]
    records = [RawRecord("t", 0, i, 0, None, v) for i, v in enumerate(values)]

    def refuse(value: bytes) -> Any:
        msg = f"json.loads was used for {value!r}"
        raise AssertionError(msg)

    monkeypatch.setattr(json, "loads", refuse)
    assert _parse_all(records) == expected
    assert [_loads(v) for v in values] == expected


_BASE = (
    b'{"id":"rec-0000000001","score":0.123456,"pred":1,"ts":1763700000.123,'
    b'"payload":{"f":[1,2.5,null,true,"x\\u00e9"]}}'
)
_ALPHABET = b'0123456789.eE+-"\\{}[],:ntrufalsNI \t\x00\xff\xed\xa0\x80\xc3\xa9u'


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_BASE)),
            st.sampled_from(["insert", "delete", "replace"]),
            st.sampled_from(list(_ALPHABET)),
            st.integers(1, 25),
        ),
        max_size=4,
    )
)
def test_mutated_records_decode_exactly_as_json_loads(
    edits: list[tuple[int, str, int, int]],
) -> None:
    v = bytearray(_BASE)
    for pos, op, byte, times in edits:
        p = min(pos, len(v))
        if op == "insert":
            v[p:p] = bytes([byte]) * times
        elif p < len(v):
            if op == "delete":
                del v[p]
            else:
                v[p] = byte
    value = bytes(v)
    assert _outcome(_loads, value) == _outcome(_json_loads, value)
    records = [RawRecord("t", 0, 0, 0, None, _BASE), RawRecord("t", 0, 1, 0, None, value)]
    got = _parse_all(records)
    want = [_parse(_BASE), _parse(value)]
    assert [_norm(g) for g in got] == [_norm(w) for w in want]
