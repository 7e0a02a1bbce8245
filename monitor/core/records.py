"""Input records: raw Kafka records in, validated column arrays (or rejects) out.

Pure: no Kafka, no I/O. ``decode_scored`` and ``decode_labels`` turn a polled batch into
column arrays for the vectorised core plus a list of ``Reject`` for the dead-letter topic.
"""

from __future__ import annotations

import base64
import codecs
import json
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import orjson

from monitor.core.messages import (
    REQUEST_ID,
    AuditRequest,
    LabelResult,
    RawRecord,
    Reject,
    decode_reason,
    request_id_for,
    token_matches,
)
from monitor.errors import RejectReason

if TYPE_CHECKING:
    from monitor.config.schema import Config


@dataclass(frozen=True)
class ScoredBatch:
    """Validated scored records of one poll, as parallel column arrays (one row per record).

    ``ids``, ``model`` and ``segment`` are numpy unicode arrays; ``segment`` is "" when absent.
    ``ts`` is the event time in seconds since the Unix epoch (the Kafka timestamp when absent).
    ``payload`` holds the optional JSON payload passed through to auditors (None when absent).
    ``written_ms`` is each record's Kafka timestamp (when it was written; None when unknown).
    """

    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    ts: npt.NDArray[np.float64]
    model: npt.NDArray[np.str_]
    segment: npt.NDArray[np.str_]
    payload: list[Any]
    partition: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]
    written_ms: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return int(self.score.shape[0])

    def rows(self, idx: slice | npt.NDArray[np.intp]) -> ScoredBatch:
        """The records ``idx`` (a slice or an index array), in that order."""
        payload = (
            self.payload[idx] if isinstance(idx, slice) else [self.payload[i] for i in idx.tolist()]
        )
        return ScoredBatch(
            ids=self.ids[idx],
            score=self.score[idx],
            pred=self.pred[idx],
            ts=self.ts[idx],
            model=self.model[idx],
            segment=self.segment[idx],
            payload=payload,
            partition=self.partition[idx],
            offset=self.offset[idx],
            written_ms=None if self.written_ms is None else self.written_ms[idx],
        )


# --------------------------------------------------------------------------------------------
# Decoding. Hot path: one ``json.loads`` and one ``dict.get`` per field per record, then
# numpy masks over whole columns; per-record Python work beyond that happens only for the
# (rare) rejected rows, to write their detail. Nothing here raises for any input bytes.
# --------------------------------------------------------------------------------------------

MAX_VALUE_BYTES = 64 * 1024  # larger record values are rejected too_large
MAX_ID_CHARS = 256
MAX_SEGMENT_CHARS = 128
#: Deepest payload accepted. orjson reads up to 1,024 levels, but ``json.dumps`` recurses once
#: per level within Python's recursion limit (1,000 frames): an audit request with a payload of
#: 1,010 levels raised RecursionError and stopped the daemon, at every restart.
MAX_PAYLOAD_DEPTH = 512
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
MAX_TS = 4_102_444_800.0  # 2100-01-01T00:00:00Z: later is a unit error (ms) or garbage
# Event times more than this after the record's own Kafka timestamp are rejected
# (bad_timestamp). Kept tight on purpose: the watermark is the max event time, so one record
# stamped hours ahead would move every window forward and expire open requests early. 5 minutes
# covers the skew between the host that stamps ``ts`` and the producer's. The reference is the
# Kafka timestamp, not the monitor's clock: it is in the log, so a replay after a crash, or a
# rebuild from the topics hours later, judges every record as the first reading did (the clock
# would accept then what it refused before, and sample it). The Kafka timestamp itself is the
# producer's clock (CreateTime, which Kafka 4 refuses beyond ``message.timestamp.after.max.ms``
# ahead of the broker's, 1 hour by default) or the broker's (LogAppendTime).
MAX_FUTURE_S = 300.0
#: A dead letter's value, encoded, is at most this many bytes (its key at most
#: ``DEADLETTER_KEY_BYTES``): a topic's default ``max.message.bytes`` (1 MB) takes it whatever
#: the record. Its ``detail`` is cut to ``DEADLETTER_DETAIL_CHARS`` characters.
DEADLETTER_BYTES = 64 * 1024
DEADLETTER_KEY_BYTES = 1024
DEADLETTER_DETAIL_CHARS = 1000

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})"
)
_NUMBER = (int, float)
_SHOW_CHARS = 40


@dataclass(frozen=True, slots=True)
class _Failed:
    """A value that could not be decoded at all (stands in for the parsed object)."""

    reason: RejectReason
    detail: str


def _parse(value: bytes | None) -> Any:
    if value is None:
        return _Failed(RejectReason.MALFORMED_JSON, "record has no value (a tombstone)")
    if len(value) > MAX_VALUE_BYTES:
        return _Failed(
            RejectReason.TOO_LARGE,
            f"record value is {len(value)} bytes, more than {MAX_VALUE_BYTES}",
        )
    try:
        return _loads(value)
    except UnicodeDecodeError as exc:
        at = exc.start + (len(codecs.BOM_UTF8) if value.startswith(codecs.BOM_UTF8) else 0)
        return _Failed(
            RejectReason.MALFORMED_JSON,
            f"not UTF-8: byte 0x{value[at]:02x} at offset {at} ({exc.reason}); "
            "send the JSON encoded as UTF-8",
        )
    except Exception as exc:  # any bytes at all must become a reject
        return _Failed(RejectReason.MALFORMED_JSON, f"invalid JSON: {_clip(str(exc), 120)}")


# orjson reads integers outside the 64-bit range as floats; such an integer is a run of 19 or
# more digits that starts the value or follows a byte other than "." (a fraction's digits, which
# orjson rounds exactly as ``float`` does) or '"' (a string's first characters). One
# ``bytes.translate`` (C speed) maps digits to "0", keeps "." and '"' and maps every other byte
# to "x"; a possible big integer is then "x" followed by 19 zeros. Floats as ``json.dumps``
# writes them (0.00012345678901234567) and numeric strings stay on orjson's path.
_RUN_CLASSES = bytes(
    ord("0") if b in b"0123456789" else b if b in b'."' else ord("x") for b in range(256)
)
_BIG_INT = b"x" + b"0" * 19


def _may_hold_big_int(data: bytes) -> bool:
    """Whether ``data`` may hold an integer literal orjson would read as a float."""
    classes = data.translate(_RUN_CLASSES)
    return _BIG_INT in classes or classes.startswith(_BIG_INT[1:])


def _loads(value: bytes) -> Any:
    r"""``json.loads`` of ``value`` decoded strictly as UTF-8, computed by orjson where they agree.

    The value must be UTF-8 (RFC 8259), after at most one leading UTF-8 byte order mark
    (ignored); anything else raises ``UnicodeDecodeError``. ``json.loads`` of the bytes would
    guess UTF-16 or UTF-32 from the first bytes and report a value starting ``\xff\xfe`` as
    invalid JSON at line 1, column 1. orjson (about 4x faster) is strict RFC 8259: it rejects
    what ``json.loads`` accepts beyond it (NaN and Infinity, escaped lone surrogates, the BOM,
    numbers overflowing to inf), and it reads integers outside the 64-bit range as floats.
    Those inputs (and every invalid one) go to ``json.loads``, so the result, or the error, is
    always exactly that of ``json.loads(value.decode("utf-8-sig"))``.
    """
    if not _may_hold_big_int(value):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    return json.loads(value.decode("utf-8-sig"))


class _Parsed(list[Any]):
    """Decoded values, ``strict`` when orjson read every one.

    orjson is RFC 8259: then none holds NaN, Infinity or a number beyond a double, which only
    ``json.loads`` reads.
    """

    strict = False


def _parse_all(records: Sequence[RawRecord]) -> _Parsed:
    """``_parse`` of every record's value; one C-level pass when the whole batch is plain.

    Plain: no tombstone, nothing over ``MAX_VALUE_BYTES``, no possible big integer anywhere
    (one ``translate`` of the joined values) and orjson accepts every value. Otherwise (or at
    the first value orjson rejects) each value goes through ``_parse``: same results either way.
    """
    values = [r.value for r in records]
    if values and None not in values:
        plain = cast(list[bytes], values)  # no tombstone, checked just above
        if max(map(len, plain)) <= MAX_VALUE_BYTES and not _may_hold_big_int(b"\n".join(plain)):
            try:
                out = _Parsed(map(orjson.loads, plain))
            except orjson.JSONDecodeError:
                pass
            else:
                out.strict = True
                return out
    return _Parsed(_parse(v) for v in values)


def _clip(text: str, limit: int = _SHOW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    """A short, safe rendering of an offending value for a reject's detail."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 128:
        return "an integer of more than 38 digits"
    if isinstance(value, float | int):
        return repr(value)
    if isinstance(value, str):
        return _clip(repr(value).encode("ascii", "backslashreplace").decode("ascii"))
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_VALUE_OF = operator.attrgetter("value")
_TIMESTAMP_MS = operator.attrgetter("timestamp_ms")
_NOT_OPENING = bytes(b for b in range(256) if b not in b"[{")


def _depth(value: Any) -> int:
    """How many containers (objects, arrays) deep ``value`` is, level by level (no recursion)."""
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, dict | list)]:
        depth += 1
        level = [x for v in level for x in (v.values() if isinstance(v, dict) else v)]
    return depth


# digits to "0", e and E to "e", "+" dropped, every other byte to "x": a number that may overflow
# a double (json.loads reads it as inf) is then "0e000" (an exponent of 3 digits) or 309 zeros
_NUMBER_CLASSES = bytes(
    ord("0") if b in b"0123456789" else ord("e") if b in b"eE" else ord("x") for b in range(256)
)


def _spells_nonfinite(data: bytes) -> bool:
    """Whether ``data`` may hold NaN, Infinity or a number beyond a double's range.

    A byte first for the words (memchr, ~50x faster), then one ``translate`` for the numbers;
    a match is only a candidate (orjson then reads the value strictly, ``_check_payload``).
    """
    if (b"N" in data and b"NaN" in data) or (b"I" in data and b"Infinity" in data):
        return True
    classes = data.translate(_NUMBER_CLASSES, b"+")
    return b"0e000" in classes or b"0" * 309 in classes


#: A JSON escape of a surrogate code point (``\ud800``-``\udfff``): a candidate for a lone one
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _check_payload(
    rej: _Rejections, rows: Sequence[Any], records: Sequence[RawRecord], *, strict: bool
) -> None:
    r"""Reject a payload too deep, or holding what a consumer cannot read back.

    Nested deeper than ``MAX_PAYLOAD_DEPTH``: ``out_of_range``. A number beyond a double's
    range: ``bad_type``; an unpaired surrogate (``"\ud800"``, valid JSON but no Unicode
    character) in a string or key: ``out_of_range``, as in an id; each detail names its path
    (``_unreadable``).

    A level takes an opening bracket, so only values with more than ``MAX_PAYLOAD_DEPTH`` of
    them (and so more than twice as many bytes) are walked.
    ``json.loads`` reads NaN and Infinity, but they are not JSON (RFC 8259), and reads a number
    beyond a double's range (1e400) as infinity, which the audit request would write as
    Infinity, and a 400-digit integer exactly, which most consumers read as infinity or
    refuse; it reads an escaped lone surrogate too, which no UTF-8 encoder writes (a Label
    Studio task holding one made its project's task list fail for good). It would hand them to
    the queue's other consumers. None can be there when orjson read the whole batch
    (``strict``, the common case: nothing to do); otherwise one C-level search of the batch's
    bytes first, a value that may hold one is read again by orjson (strict, and much faster than
    a walk), and only the payloads of those it refuses are walked.
    """
    values = list(map(_VALUE_OF, records))
    if None in values:  # tombstones (already rejected)
        values = [v or b"" for v in values]
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    deep = np.zeros(len(rows), dtype=np.bool_)
    for i in np.flatnonzero(sizes > 2 * MAX_PAYLOAD_DEPTH).tolist():  # values over 1 KiB
        opened = len(values[i].translate(None, _NOT_OPENING))  # one C-level pass
        if opened > MAX_PAYLOAD_DEPTH:
            deep[i] = _depth(rows[i].get("payload")) > MAX_PAYLOAD_DEPTH
    rej.add(
        deep,
        RejectReason.OUT_OF_RANGE,
        lambda _: f"field 'payload': nested more than {MAX_PAYLOAD_DEPTH} levels deep",
    )
    if strict or not _may_be_unreadable(b"".join(values)):
        return
    found: dict[int, tuple[str, bool]] = {}  # row -> (path, a number: else text)
    for i, (row, value) in enumerate(zip(rows, values, strict=True)):
        payload = row.get("payload")
        if deep[i] or payload is None or not _may_be_unreadable(value):  # deep: rejected
            continue
        try:
            orjson.loads(value)  # strict: read, it holds none (e.g. "NaN" in a string)
            continue
        except orjson.JSONDecodeError:
            pass
        where = _unreadable(payload)
        if where is not None:
            found[i] = where
    numbers = np.array([found.get(i, ("", False))[1] for i in range(len(rows))], dtype=np.bool_)
    rej.add(
        numbers,
        RejectReason.BAD_TYPE,
        lambda i: (
            f"field '{found[i][0]}': NaN, Infinity and numbers beyond a double's range "
            "(+-1.8e308, e.g. 1e400 or a 400-digit integer) are not JSON a consumer can read "
            "back; send null or a string instead"
        ),
    )
    text = np.array([i in found and not found[i][1] for i in range(len(rows))], dtype=np.bool_)
    rej.add(
        text,
        RejectReason.OUT_OF_RANGE,
        lambda i: (
            f"field '{found[i][0]}': an unpaired surrogate (an escape in \\ud800-\\udfff "
            "without its pair) is no Unicode character and cannot be written as UTF-8; send "
            "the text as UTF-8"
        ),
    )


def _may_be_unreadable(data: bytes) -> bool:
    """Whether ``data`` may spell a number beyond a double or escape a surrogate (a candidate)."""
    return _spells_nonfinite(data) or (
        b"\\u" in data and _SURROGATE_ESCAPE.search(data) is not None
    )


def _unreadable(payload: Any) -> tuple[str, bool] | None:
    """Where ``payload`` first holds what a consumer cannot read back, and whether a number.

    A number: NaN, an infinity or an integer beyond a double's range; else text: a string or
    key that is not Unicode (an unpaired surrogate). The path from the record, e.g.
    ``payload.items[2]`` (each key cut to a few characters, the whole to 120), found level by
    level (no recursion); None when it holds none. An integer is beyond the range when
    ``float`` of it overflows: ``json.loads`` reads it exactly, but a consumer reading numbers
    as doubles (most JSON libraries) reads infinity or fails.
    """
    level: list[tuple[str, Any]] = [("payload", payload)]
    while level:
        deeper: list[tuple[str, Any]] = []
        for path, value in level:
            if type(value) is float and not math.isfinite(value):
                return _clip(path, 120), True
            if type(value) is int and value.bit_length() > 1000:
                try:
                    float(value)
                except OverflowError:
                    return _clip(path, 120), True
            elif type(value) is str and not _encodes(value):
                return _clip(path, 120), False
            elif type(value) is dict:
                for k, v in value.items():
                    key = f"{path}.{_clip(_ascii(k), 20)}"
                    if not _encodes(k):
                        return _clip(key, 120), False
                    deeper.append((key, v))
            elif type(value) is list:
                deeper += ((f"{path}[{j}]", v) for j, v in enumerate(value))
        level = deeper
    return None


def _ascii(text: str) -> str:
    """``text`` with every character outside printable ASCII as a backslash escape."""
    return text.encode("unicode_escape").decode("ascii")


def _bad_text(values: Sequence[str]) -> list[bool] | None:
    """Which strings hold a NUL or an unpaired surrogate (None: none of them do)."""
    joined = "".join(values)
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        if "\x00" not in joined:
            return None
    return [("\x00" in v) or not _encodes(v) for v in values]


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _floats(values: Sequence[Any], ok: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """``values`` as float64 where ``ok`` (numbers), NaN elsewhere; huge ints become inf."""
    if bool(ok.all()):
        try:
            return np.array(values, dtype=np.float64)
        except (OverflowError, TypeError, ValueError):
            pass
    return np.array([_float(v) if k else math.nan for v, k in zip(values, ok, strict=True)])


def _float(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _is_number(values: Sequence[Any]) -> npt.NDArray[np.bool_]:
    if set(map(type, values)) <= {float, int}:
        return np.ones(len(values), dtype=np.bool_)
    return np.fromiter((type(v) in _NUMBER for v in values), dtype=np.bool_, count=len(values))


def _is_str(values: Sequence[Any]) -> npt.NDArray[np.bool_]:
    if set(map(type, values)) <= {str}:
        return np.ones(len(values), dtype=np.bool_)
    return np.fromiter((type(v) is str for v in values), dtype=np.bool_, count=len(values))


def _objects(objs: list[Any], rej: _Rejections) -> list[dict[str, Any]]:
    """The decoded JSON objects; any other value is rejected (and stands as an empty object)."""
    if set(map(type, objs)) == {dict}:
        return objs
    for i, obj in enumerate(objs):
        if type(obj) is not dict:
            if isinstance(obj, _Failed):
                rej.one(i, obj.reason, obj.detail)
            else:
                rej.one(i, RejectReason.NOT_AN_OBJECT, f"expected a JSON object, got {_show(obj)}")
    empty: dict[str, Any] = {}
    return [o if type(o) is dict else empty for o in objs]


def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (offset required), or None.

    >>> parse_timestamp("2024-03-01T12:00:00Z"), parse_timestamp("2024-03-01 13:00:00.5+01:00")
    (1709294400.0, 1709294400.5)
    >>> parse_timestamp("2024-03-01T12:00:00") is None  # no offset: ambiguous
    True
    """
    if not _RFC3339.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text.upper()).timestamp()
    except (ValueError, OverflowError):  # e.g. month 13, leap second 60
        return None


class _Rejections:
    """First failing check per row wins; ``alive`` marks rows not rejected yet."""

    def __init__(self, n: int) -> None:
        self.alive = np.ones(n, dtype=np.bool_)
        self.found: dict[int, tuple[RejectReason, str]] = {}

    def add(
        self,
        failing: npt.NDArray[np.bool_],
        reason: RejectReason,
        detail: Callable[[int], str],
    ) -> None:
        rows = np.flatnonzero(failing & self.alive)
        if rows.size:
            for i in rows.tolist():
                self.found[i] = (reason, detail(i))
            self.alive[rows] = False

    def one(self, i: int, reason: RejectReason, detail: str) -> None:
        if self.alive[i]:
            self.found[i] = (reason, detail)
            self.alive[i] = False

    def rejects(self, records: Sequence[RawRecord]) -> list[Reject]:
        return [Reject(r, d, records[i]) for i, (r, d) in sorted(self.found.items())]


def _check_text(
    rej: _Rejections,
    values: list[Any],
    field: str,
    max_chars: int,
    *,
    required: bool,
    min_chars: int = 1,
) -> None:
    """Type, length and character checks of an (optionally required) string column."""
    n = len(values)
    if set(map(type, values)) == {str}:  # the common case: no per-value type checks
        is_str = np.ones(n, dtype=np.bool_)
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    else:
        missing = _none_mask(values)
        if required:
            rej.add(missing, RejectReason.MISSING_FIELD, lambda _: f"field '{field}' is missing")
        is_str = _is_str(values)
        rej.add(
            ~is_str & ~missing,
            RejectReason.BAD_TYPE,
            lambda i: f"field '{field}': expected a string, got {_show(values[i])}",
        )
        lengths = np.fromiter(
            (len(v) if type(v) is str else min_chars for v in values), dtype=np.int64, count=n
        )
    rej.add(
        (lengths < min_chars) | (lengths > max_chars),
        RejectReason.OUT_OF_RANGE,
        lambda i: (
            f"field '{field}': expected {min_chars} to {max_chars} characters, got {lengths[i]}"
        ),
    )
    ok = rej.alive & is_str
    live = np.flatnonzero(ok).tolist()
    bad = _bad_text(values if len(live) == n else [values[i] for i in live])
    if bad is not None:
        failing = np.zeros(n, dtype=np.bool_)
        failing[[i for i, b in zip(live, bad, strict=True) if b]] = True
        rej.add(
            failing,
            RejectReason.OUT_OF_RANGE,
            lambda _: f"field '{field}': contains a NUL character or an unpaired surrogate",
        )


def _none_mask(values: list[Any]) -> npt.NDArray[np.bool_]:
    if None not in values:
        return np.zeros(len(values), dtype=np.bool_)
    return np.fromiter((v is None for v in values), dtype=np.bool_, count=len(values))


def _check_flag(rej: _Rejections, values: list[Any], field: str) -> npt.NDArray[np.int8]:
    """0/1 (or false/true) column; -1 where absent."""
    n = len(values)
    out = np.full(n, -1, dtype=np.int8)
    types = set(map(type, values))
    if types <= {type(None)}:
        return out
    if types <= {int, bool} and set(values) <= {0, 1}:  # the common case: one C-level pass
        return np.array(values, dtype=np.int8)
    code = np.fromiter(
        (
            (int(v) if v in (0, 1) else -2) if type(v) in (int, bool) else (-1 if v is None else -3)
            for v in values
        ),
        dtype=np.int8,
        count=n,
    )
    rej.add(
        code == -3,
        RejectReason.BAD_TYPE,
        lambda i: f"field '{field}': expected 0 or 1 (or false/true), got {_show(values[i])}",
    )
    rej.add(
        code == -2,
        RejectReason.OUT_OF_RANGE,
        lambda i: f"field '{field}': expected 0 or 1, got {_show(values[i])}",
    )
    ok = code >= 0
    out[ok] = code[ok]
    return out


def _written_ms(records: Sequence[RawRecord]) -> npt.NDArray[np.int64]:
    """Each record's Kafka timestamp (ms; -1 when it has none)."""
    return np.fromiter(map(_TIMESTAMP_MS, records), np.int64, count=len(records))


def _check_ts(
    rej: _Rejections, values: list[Any], written_ms: npt.NDArray[np.int64], *, fallback: bool
) -> npt.NDArray[np.float64]:
    """Event times in seconds: numbers, RFC 3339 strings, else (``fallback``) the Kafka time.

    A time before 2000-01-01 or from 2100-01-01 on is refused, and one more than
    ``MAX_FUTURE_S`` after the record's Kafka timestamp ``written_ms`` (when it has one after
    2000: a producer may leave it at 0 or -1).
    """
    n = len(values)
    kafka = written_ms / 1e3
    types = set(map(type, values))
    missing = _none_mask(values)
    is_num = _is_number(values) if types - {type(None)} else np.zeros(n, dtype=np.bool_)
    ts = _floats(values, is_num)
    if str in types:
        for i, v in enumerate(values):
            if type(v) is str and rej.alive[i]:
                parsed = parse_timestamp(v)
                if parsed is None:
                    rej.one(
                        i,
                        RejectReason.BAD_TIMESTAMP,
                        f"field 'ts': expected seconds since the epoch or an RFC 3339 time "
                        f"with offset, got {_show(v)}",
                    )
                else:
                    ts[i] = parsed
                    is_num[i] = True
    rej.add(
        ~is_num & ~missing,
        RejectReason.BAD_TIMESTAMP,
        lambda i: (
            f"field 'ts': expected seconds since the epoch or an RFC 3339 time, "
            f"got {_show(values[i])}"
        ),
    )
    if fallback and bool(missing.any()):
        ts[missing] = kafka[missing]
        rej.add(
            missing & ~(kafka >= 0),
            RejectReason.BAD_TIMESTAMP,
            lambda _: "no field 'ts' and no Kafka timestamp",
        )

    def source(i: int) -> str:
        if missing[i]:
            return f"Kafka timestamp {_show(float(ts[i]))}"
        return f"field 'ts' {_show(values[i])}"

    with np.errstate(invalid="ignore"):
        unset = np.zeros(n, np.bool_) if fallback else missing  # a label may have no time
        rej.add(
            ~(ts >= MIN_TS) & ~unset,
            RejectReason.BAD_TIMESTAMP,
            lambda i: f"{source(i)} is not a time after 2000-01-01T00:00:00Z",
        )
        rej.add(
            ts >= MAX_TS,
            RejectReason.BAD_TIMESTAMP,
            lambda i: (
                f"{source(i)} is not a time before 2100-01-01T00:00:00Z"
                f"{' (milliseconds?)' if ts[i] > 1e11 else ''}"
            ),
        )
        rej.add(
            (kafka >= MIN_TS) & (ts > kafka + MAX_FUTURE_S),
            RejectReason.BAD_TIMESTAMP,
            lambda i: (
                f"{source(i)} is more than {MAX_FUTURE_S / 60:g} minutes after the record's "
                f"Kafka timestamp ({kafka[i]:.0f})"
            ),
        )
    return ts


def decode_scored(records: Sequence[RawRecord], config: Config) -> tuple[ScoredBatch, list[Reject]]:
    """Validate a polled batch of scored records into columns plus one reject per bad record.

    Schema (JSON object; other fields are ignored; null means absent):
    ``id`` string of 1-256 characters (required); ``score`` number in [0, 1] (required,
    finite; booleans are not numbers); ``pred`` 0/1 or false/true (default
    ``score >= threshold`` of the model); ``ts`` seconds since the epoch or an RFC 3339 time
    with offset (default the Kafka timestamp; from 2000-01-01 to 5 min after the Kafka
    timestamp, before 2100); ``model`` string naming a configured model (default
    ``config.default_model``); ``segment`` string of at most 128 characters (default "");
    ``payload`` any JSON (no NaN or Infinity, at most ``MAX_PAYLOAD_DEPTH`` levels deep),
    passed to auditors. Values over 64 KiB are rejected ``too_large``. Strings must not hold
    NUL or unpaired surrogates.

    Accepted rows and rejects keep the input order; each input is in exactly one of them.
    Never raises for any record content.
    """
    n = len(records)
    objs = _parse_all(records)
    rej = _Rejections(n)
    rows = _objects(objs, rej)

    ids = [d.get("id") for d in rows]
    _check_text(rej, ids, "id", MAX_ID_CHARS, required=True)

    raw_score = [d.get("score") for d in rows]
    rej.add(_none_mask(raw_score), RejectReason.MISSING_FIELD, lambda _: "field 'score' is missing")
    score_num = _is_number(raw_score)
    rej.add(
        ~score_num,
        RejectReason.BAD_TYPE,
        lambda i: f"field 'score': expected a number in [0, 1], got {_show(raw_score[i])}",
    )
    score = _floats(raw_score, score_num)
    with np.errstate(invalid="ignore"):
        rej.add(
            ~((score >= 0.0) & (score <= 1.0)),
            RejectReason.OUT_OF_RANGE,
            lambda i: f"field 'score': expected a number in [0, 1], got {_show(raw_score[i])}",
        )

    pred_given = _check_flag(rej, [d.get("pred") for d in rows], "pred")
    written_ms = _written_ms(records)
    ts = _check_ts(rej, [d.get("ts") for d in rows], written_ms, fallback=True)

    models: list[Any] = [d.get("model") for d in rows]
    model_types = set(map(type, models))
    known = config.models
    if model_types <= {str, type(None)}:
        names = set(models) - {None}
    else:
        rej.add(
            ~_is_str(models) & ~_none_mask(models),
            RejectReason.BAD_TYPE,
            lambda i: f"field 'model': expected a string, got {_show(models[i])}",
        )
        names = {m for m in models if type(m) is str}
    if names - set(known):
        unknown = np.fromiter(
            (type(m) is str and m not in known for m in models), dtype=np.bool_, count=n
        )
        rej.add(
            unknown,
            RejectReason.UNKNOWN_MODEL,
            lambda i: (
                f"field 'model': unknown model {_show(models[i])} "
                f"(configured: {_clip(', '.join(known), 120)})"
            ),
        )
    segments = [d.get("segment") for d in rows]
    if set(map(type, segments)) - {type(None)}:
        _check_text(rej, segments, "segment", MAX_SEGMENT_CHARS, required=False, min_chars=0)
    _check_payload(rej, rows, records, strict=objs.strict)

    keep = np.flatnonzero(rej.alive)
    kept = keep.tolist()
    every = keep.size == n
    default = config.default_model
    kept_models: list[str] = (
        models if every and None not in models else [models[i] or default for i in kept]
    )
    score_k = score if every else score[keep]
    pred_k = pred_given if every else pred_given[keep]
    if bool((pred_k < 0).any()):
        used = set(kept_models)
        if len(used) == 1:
            threshold: float | npt.NDArray[np.float64] = known[used.pop()].threshold
        else:
            lookup = {m: known[m].threshold for m in used}
            threshold = np.array([lookup[m] for m in kept_models], dtype=np.float64)
        pred_k = np.where(pred_k < 0, (score_k >= threshold).astype(np.int8), pred_k)
    if every and None not in segments:
        kept_segments = segments
    else:
        kept_segments = [segments[i] or "" for i in kept]
    batch = ScoredBatch(
        ids=np.array(ids if every else [ids[i] for i in kept], dtype=np.str_),
        score=np.ascontiguousarray(score_k, dtype=np.float64),
        pred=pred_k.astype(np.int8, copy=False),
        ts=ts if every else ts[keep],
        model=np.array(kept_models, dtype=np.str_),
        segment=np.array(kept_segments, dtype=np.str_),
        payload=[rows[i].get("payload") for i in kept],
        partition=np.array([records[i].partition for i in kept], dtype=np.int32),
        offset=np.array([records[i].offset for i in kept], dtype=np.int64),
        written_ms=written_ms if every else written_ms[keep],
    )
    return batch, rej.rejects(records)


def decode_labels(records: Sequence[RawRecord]) -> tuple[list[LabelResult], list[Reject]]:
    """Validate auditor answers; each input is either a ``LabelResult`` or one ``Reject``.

    Schema (JSON object; null means absent): ``request_id`` string, or ``id`` string plus an
    optional ``model`` string (one of the two is required; both may be given); ``label`` 0 or 1
    (false/true accepted); optional ``labeler`` and ``token`` strings; optional ``ts`` (seconds
    or RFC 3339 with offset, after 2000-01-01, before 2100 and at most 5 min after the Kafka
    timestamp).
    Strings are 1-256 characters without NUL or unpaired surrogates. A ``request_id`` that is not
    32 lowercase hex characters (the form of every id ``request_id_for`` makes) is
    ``unknown_request`` at once; whether a well-formed one's request exists is decided later by
    the estimator. Never raises for any record content.
    """
    n = len(records)
    objs = [_parse(r.value) for r in records]
    rej = _Rejections(n)
    rows = _objects(objs, rej)
    request_ids = [d.get("request_id") for d in rows]
    record_ids = [d.get("id") for d in rows]
    neither = np.fromiter(
        (a is None and b is None for a, b in zip(request_ids, record_ids, strict=True)),
        dtype=np.bool_,
        count=n,
    )
    rej.add(neither, RejectReason.MISSING_FIELD, lambda _: "needs field 'request_id' or field 'id'")
    columns: dict[str, list[Any]] = {"request_id": request_ids, "id": record_ids}
    for name in ("model", "labeler", "token"):
        columns[name] = [d.get(name) for d in rows]
    for name, values in columns.items():
        _check_text(rej, values, name, MAX_ID_CHARS, required=False)
    # no request can have such an id: refuse it now rather than park it for the grace period
    rej.add(
        np.fromiter(
            (type(r) is str and REQUEST_ID.fullmatch(r) is None for r in request_ids),
            dtype=np.bool_,
            count=n,
        ),
        RejectReason.UNKNOWN_REQUEST,
        lambda i: (
            f"field 'request_id' {_show(request_ids[i])} is not an id this monitor issues "
            "(32 lowercase hex characters): copy the audit request's request_id, or send the "
            "record's 'id' (with 'model') instead"
        ),
    )
    raw_label = [d.get("label") for d in rows]
    rej.add(
        _none_mask(raw_label),
        RejectReason.MISSING_FIELD,
        lambda _: "field 'label' is missing",
    )
    label = _check_flag(rej, raw_label, "label")
    raw_ts = [d.get("ts") for d in rows]
    ts = _check_ts(rej, raw_ts, _written_ms(records), fallback=False)
    results = [
        LabelResult(
            request_id=request_ids[i],
            record_id=record_ids[i],
            label=int(label[i]),
            labeler=columns["labeler"][i],
            ts=None if raw_ts[i] is None else float(ts[i]),
            token=columns["token"][i],
            source=records[i],
            model=columns["model"][i],
        )
        for i in np.flatnonzero(rej.alive).tolist()
    ]
    return results, rej.rejects(records)


def decode_requests(
    records: Sequence[RawRecord], config: Config
) -> tuple[list[AuditRequest], list[Reject]]:
    """Requests read back from the requests topic; only those this deployment could issue.

    A request must name a configured model and carry the id ``blake2b(salt|model|id)``, and,
    with ``labels.token_secret`` set, the HMAC token of that id: a writer to the requests
    topic cannot make the estimator await (or accept labels for) requests it made up.
    """
    ok: list[AuditRequest] = []
    bad: list[Reject] = []
    secret = config.label_token_secret
    for r in records:
        try:
            req = AuditRequest.from_json(r.value or b"")
        except (ValueError, OverflowError, RecursionError) as exc:
            bad.append(Reject(decode_reason(exc), f"not an audit request: {exc}"[:200], r))
            continue
        if req.model not in config.models or req.request_id != request_id_for(
            config.salt, req.model, req.id
        ):
            detail = "request not issued by this deployment (model, id or salt differ)"
            bad.append(Reject(RejectReason.UNKNOWN_REQUEST, detail, r))
        elif secret and not token_matches(secret, req.request_id, req.token):
            bad.append(Reject(RejectReason.BAD_TOKEN, "request token does not match", r))
        else:
            ok.append(req)
    return ok, bad


def deadletter_key(reject: Reject) -> bytes | None:
    """The dead letter's Kafka key: the original key's first ``DEADLETTER_KEY_BYTES`` bytes.

    A key of any size is accepted by a topic allowing it; copied whole, a 600 KB key made a dead
    letter larger than the broker accepts. ``key_bytes`` in the value gives the original length.
    """
    key = reject.record.key
    return None if key is None else key[:DEADLETTER_KEY_BYTES]


def _deadletter_head(reject: Reject) -> dict[str, Any]:
    """What every dead letter says: the reason, the source record and its sizes."""
    record = reject.record
    return {
        "reason": str(reject.reason),
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key_bytes": None if record.key is None else len(record.key),
        "value_bytes": None if record.value is None else len(record.value),
    }


def _encode(message: dict[str, Any]) -> bytes:
    """Deterministic JSON: sorted keys, compact separators, ASCII (other characters escaped)."""
    return json.dumps(message, sort_keys=True, separators=(",", ":")).encode("ascii")


def deadletter_value(reject: Reject) -> bytes:
    r"""The dead-letter message for a reject, at most ``DEADLETTER_BYTES`` bytes, however bad.

    JSON: ``reason``, ``detail`` (cut to ``DEADLETTER_DETAIL_CHARS`` characters), ``topic``,
    ``partition``, ``offset``, ``timestamp_ms``, ``key_bytes`` and ``value_bytes`` (the original
    key's and value's lengths; null when absent), ``value`` (the original bytes as UTF-8,
    invalid bytes replaced; null for a tombstone) and, only when the original is not valid
    UTF-8, ``value_b64`` (base64 of the same bytes). ``value`` and ``value_b64`` hold the
    longest start of the original for which the whole message, escapes included, fits: an
    invalid byte is six bytes of ``\ufffd`` plus its base64, so 0xff bytes keep about 8,900 of
    them. Deterministic: sorted keys, compact separators, ASCII.
    """
    out = _deadletter_head(reject)
    out["detail"] = _clip(reject.detail, DEADLETTER_DETAIL_CHARS)
    out["value"] = None
    raw = reject.record.value
    if raw is None:
        return _encode(out)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        text = False
    else:
        text = True
    out["value"] = ""
    if not text:
        out["value_b64"] = ""

    def cut_to(n: int) -> bytes:
        if text:  # "ignore" only drops a character split by the cut
            out["value"] = raw[:n].decode("utf-8", errors="ignore")
        else:
            out["value"] = raw[:n].decode("utf-8", errors="replace")
            out["value_b64"] = base64.b64encode(raw[:n]).decode("ascii")
        return _encode(out)

    best = _encode(out)  # the value cut to nothing: always fits
    base = len(best)
    # the longest start that fits: at ``lo`` it does, at ``hi`` not; every byte takes at least
    # one, escapes up to 6 (and base64 4/3): a first guess in proportion, then halves
    lo, hi = 0, min(len(raw), DEADLETTER_BYTES - base) + 1
    n = hi - 1
    while n > lo:
        encoded = cut_to(n)
        if len(encoded) <= DEADLETTER_BYTES:
            lo, best = n, encoded
            n = (lo + hi) // 2
        else:
            hi = n
            guess = n * (DEADLETTER_BYTES - base) // (len(encoded) - base)
            n = guess if lo == 0 and guess > 0 else (lo + hi) // 2
    return best


def deadletter_minimal(reject: Reject) -> bytes:
    """The dead letter written instead of ``deadletter_value`` when the topic refuses that one.

    Only ``reason``, ``topic``, ``partition``, ``offset``, ``timestamp_ms``, ``key_bytes`` and
    ``value_bytes`` (a few hundred bytes; written with no key): the record can still be found
    and read from its own topic. A dead-letter topic whose ``max.message.bytes`` is below
    ``DEADLETTER_BYTES`` gets these (``monitor_deadletters_minimal_total``).
    """
    return _encode(_deadletter_head(reject))
