"""Fuzzing the daemon's loop: bad scored records, labels and requests change nothing but counters.

Hypothesis builds records that are each invalid by construction (random bytes, truncated JSON,
non-objects, one field broken: wrong type, huge or odd-character string, NaN/inf/negative or
> 1 score, time far in the past or beyond the clock's skew, unknown model), labels that are
malformed or forged (unknown request id, wrong or missing token, another record's id, a bad
label value, a far-future time) and forged requests, and slips them at random places into a
clean stream. Through the engine over the in-memory log (labels need a token: a secret is
configured): every one of them must reach the dead-letter topic exactly once with a reason and
a counter, the loop must not raise, and the estimates must equal the clean stream's. One batch
goes through ``monitor run`` and the real broker too.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.config.schema import Config
from monitor.core.messages import request_id_for, request_token
from monitor.core.records import MAX_FUTURE_S, MAX_TS, MIN_TS
from monitor.errors import RejectReason
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import Workload, WorkloadSpec, generate
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource
from tests.integration import test_daemon_kafka as kafka_tests
from tests.integration.test_daemon_kafka import Run, _labels, _predict, _produce, _read, _scored
from tests.property.test_records_fuzz import encode, huge_text, json_values, odd_text
from tests.unit.test_daemon_loop import TOPICS, _config

SECRET = "fuzz-secret-0123456789"
TALLY: collections.Counter[str] = collections.Counter()  # what was fuzzed, for the report
#: dead-letter reasons only valid labels meet (tests/unit/test_label_judgement.py); the fuzz's
#: strategies aim at every other one
VALID_LABELS_ONLY = {"duplicate_label", "conflicting_label", "expired_request"}
AIMED = {r.value for r in RejectReason} - VALID_LABELS_ONLY


@pytest.fixture(scope="module", autouse=True)
def fuzz_reached_every_reason() -> Iterator[None]:
    """After the module: the fuzz fed all three topics and hit every reason it aims at.

    A strategy that stopped producing a kind of bad record would otherwise pass unnoticed. Only
    where the fuzz ran (pytest-xdist may run it in another worker than the rest of the module).
    """
    yield
    if TALLY:
        print(f"\nfuzzed: {dict(TALLY)}")
        missing = {"scored", "labels", "requests", *AIMED} - set(TALLY)
        assert not missing, f"the fuzz produced no {sorted(missing)}: {dict(TALLY)}"


def _fuzz_config(data_dir: Path) -> Config:
    return dataclasses.replace(_config(data_dir), label_token_secret=SECRET)


@dataclass
class Clean:
    """The clean stream, its requests and token-bearing labels, and the estimates they give."""

    workload: Workload
    scored: list[bytes]
    requests: list[dict[str, Any]]
    labels: list[bytes]
    windows: str


# the scored records' Kafka timestamp (written at import); a "future" event time must stay
# ahead of it while the suite runs
NOW = time.time()


def _run(
    config: Config,
    scored: list[bytes],
    requests: list[bytes],
    labels: list[bytes],
    written_ms: int = int(NOW * 1000),  # the scored records' Kafka timestamp
) -> tuple[FakeLog, Engine, CollectorRegistry]:
    log = FakeLog()
    for t in (TOPICS.scored, TOPICS.requests, TOPICS.labels, TOPICS.deadletter):
        log.create(t)
    for v in scored:
        log.append(TOPICS.scored, v, key=b"k", ts_ms=written_ms)
    for v in requests:
        log.append(TOPICS.requests, v)
    for v in labels:
        log.append(TOPICS.labels, v)
    registry = CollectorRegistry()
    engine = Engine(config, Store(config.data_dir), Exporter(config, registry))
    source = FakeSource(log, [TOPICS.scored, TOPICS.requests, TOPICS.labels], engine.store.offsets)
    sink = FakeSink(log)
    for _ in range(10_000):  # the loop: must never raise
        if engine.step(source, sink) == 0 and engine.step(source, sink) == 0:
            break
    return log, engine, registry


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Clean:
    w = generate(WorkloadSpec(n=800, hours=4.0, seed=17))
    scored = [json.dumps(r).encode() for r in w.records()]
    cfg = _fuzz_config(tmp_path_factory.mktemp("probe"))
    log, engine, _ = _run(cfg, scored, [], [])
    engine.store.close()
    requests = [json.loads(v) for _, v in log.records(TOPICS.requests)]
    truth = dict(w.truth_rows())
    labels = [
        json.dumps(
            {"request_id": r["request_id"], "label": truth[r["id"]], "token": r["token"]}
        ).encode()
        for r in requests
    ]
    cfg = _fuzz_config(tmp_path_factory.mktemp("clean"))
    log, engine, _ = _run(cfg, scored, [], labels)
    windows = repr(engine.estimator.snapshot().windows)
    engine.store.close()
    assert requests and not log.records(TOPICS.deadletter)
    return Clean(w, scored, requests, labels, windows)


# ------------------------------------------------------------------ invalid by construction
FUTURE_MARGIN_S = max(MAX_FUTURE_S, 86_400.0)
# a valid event time inside the clean stream: each record is broken by its one field alone
BASE = {"id": "fz-1", "score": 0.5, "ts": WorkloadSpec().start_ts + 600.0}
broken_fields: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(
        st.sampled_from(["", "a\x00", "\ud800", "b\udfff", "x" * 257, 5, 0.5, True, [], {}]),
        huge_text.filter(lambda s: len(s) > 256),
        odd_text.map(lambda s: "fz" + s + "\x00"),
    ),
    "score": st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf, -1e-9, 1.0000001, -5, 10**400]),
        st.sampled_from(["0.5", True, False, [], {}, [0.5]]),
        st.floats(allow_nan=True).filter(lambda x: not 0.0 <= x <= 1.0),
    ),
    "ts": st.one_of(
        st.floats(-1e15, MIN_TS - 1),  # far past
        st.floats(NOW + FUTURE_MARGIN_S, 1e15),  # beyond the skew: would move the watermark
        st.sampled_from([math.nan, math.inf, True, "tomorrow", "9999-12-31T23:59:59Z"]),
        st.sampled_from(["1999-12-31T23:59:59Z", "2024-01-01T00:00:00", [], {}]),
    ),
    "model": st.one_of(
        st.text(min_size=1, max_size=40).filter(lambda m: m != "default"),  # a flood of models
        st.sampled_from([7, [], {}, True]),
    ),
    "pred": st.sampled_from([2, -1, "1", 0.5, [], {}]),
    "segment": st.one_of(st.sampled_from(["s" * 129, "a\x00", 5, [], True]), huge_text),
    "payload": st.just("p" * 70_000),  # the record is over 64 KiB
}


@st.composite
def one_broken(draw: st.DrawFn) -> bytes:
    key = draw(st.sampled_from(sorted(broken_fields)))
    obj = {**BASE, "id": f"fz-{draw(st.integers(0, 10**6))}", key: draw(broken_fields[key])}
    if key == "id" and obj["id"] is None:
        del obj["id"]
    return encode(obj)


def _truncated(value: bytes, frac: float) -> bytes:
    return value[: min(len(value) - 1, int(len(value) * frac))]


bad_scored = st.one_of(
    one_broken(),
    one_broken(),
    st.binary(max_size=300),
    st.tuples(one_broken(), st.floats(0, 1)).map(lambda t: _truncated(t[0], t[1])),
    st.tuples(st.just(encode({"id": "fz-t", "score": 0.5})), st.floats(0, 1)).map(
        lambda t: _truncated(t[0], t[1])
    ),
    json_values.filter(lambda v: not isinstance(v, dict)).map(encode),
    st.just(encode({"score": 0.5})),  # no id
    st.just(encode({"id": "fz-m"})),  # no score
)


def bad_labels(c: Clean) -> st.SearchStrategy[bytes]:
    """Malformed or forged labels; ``c`` supplies real request ids and tokens to misuse."""
    reqs = st.sampled_from(c.requests)
    hex32 = st.text("0123456789abcdef", min_size=32, max_size=32)

    def label(r: dict[str, Any], **kw: Any) -> bytes:
        body = {"request_id": r["request_id"], "label": 1, "token": r["token"], **kw}
        return encode({k: v for k, v in body.items() if v is not ...})

    return st.one_of(
        st.binary(max_size=200),
        st.tuples(reqs.map(label), st.floats(0, 1)).map(lambda t: _truncated(t[0], t[1])),
        json_values.filter(lambda v: not isinstance(v, dict)).map(encode),
        # a bad label value, with the right token
        st.builds(label, reqs, label=st.sampled_from([2, -1, "1", 0.5, math.nan, [], ...])),
        # forged: guessed request id, wrong or missing token, odd strings
        st.builds(lambda rid, y: encode({"request_id": rid, "label": y}), hex32, st.integers(0, 1)),
        st.builds(label, reqs, token=st.one_of(st.text(max_size=40), st.just(...), odd_text)),
        st.builds(label, reqs, request_id=st.one_of(odd_text, huge_text, st.integers())),
        # replayed with another record id or another model
        st.builds(label, reqs, id=st.text(min_size=1, max_size=10).map(lambda s: "fz-" + s)),
        st.builds(label, reqs, model=st.text(min_size=1, max_size=10).map(lambda s: "m-" + s)),
        st.builds(
            lambda r, m: encode({"id": r["id"], "model": m, "label": 1}),
            reqs,
            st.sampled_from(["other", "default2", ""]),
        ),
        # these labels have no Kafka timestamp (0): the bound of 2100 refuses them
        st.builds(label, reqs, ts=st.floats(MAX_TS, 1e13)),
    )


def forged_requests(c: Clean) -> st.SearchStrategy[bytes]:
    """Requests a writer to the requests topic made up (wrong salt, id or token)."""

    salt = _config(Path()).salt

    def forged(r: dict[str, Any], i: str, token: Any) -> bytes:
        rid = request_id_for(salt, "default", i)  # the right id: only the token is missing
        return encode(
            {
                k: v
                for k, v in {**r, "id": i, "request_id": rid, "token": token}.items()
                if v is not ...
            }
        )

    fake_id = st.text(min_size=1, max_size=12).map(lambda s: "fz-" + s)
    return st.one_of(
        st.binary(max_size=200),
        st.builds(
            forged,
            st.sampled_from(c.requests),
            fake_id,
            st.one_of(st.text(max_size=32), st.just(...), st.just(request_token("guess", "x"))),
        ),
        st.builds(
            lambda r, i: encode({**r, "id": i, "request_id": request_id_for("x", "default", i)}),
            st.sampled_from(c.requests),
            fake_id,
        ),
    )


FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@FUZZ
@given(data=st.data())
def test_bad_and_forged_records_change_no_estimate(clean: Clean, data: st.DataObject) -> None:
    scored_bad = data.draw(st.lists(bad_scored, min_size=5, max_size=40), label="scored")
    labels_bad = data.draw(st.lists(bad_labels(clean), min_size=5, max_size=40), label="labels")
    reqs_bad = data.draw(st.lists(forged_requests(clean), max_size=5), label="requests")

    def positions(n: int, size: int) -> list[int]:
        return data.draw(st.lists(st.integers(0, size), min_size=n, max_size=n))

    scored = _place(clean.scored, scored_bad, positions(len(scored_bad), len(clean.scored)))
    labels = _place(clean.labels, labels_bad, positions(len(labels_bad), len(clean.labels)))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _fuzz_config(Path(tmp))
        log, engine, registry = _run(cfg, scored, reqs_bad, labels)
        windows = repr(engine.estimator.snapshot().windows)
        engine.store.close()
    dead = [json.loads(v) for _, v in log.records(TOPICS.deadletter)]
    n_bad = len(scored_bad) + len(labels_bad) + len(reqs_bad)
    TALLY.update(scored=len(scored_bad), labels=len(labels_bad), requests=len(reqs_bad))
    TALLY.update(d["reason"] for d in dead)
    # each bad record exactly once in the dead-letter topic, with a reason and a count
    got = collections.Counter((d["topic"], d["offset"]) for d in dead)
    assert all(v == 1 for v in got.values())
    assert len(dead) == n_bad, [d["reason"] + ": " + d["detail"] for d in dead]
    by_topic = collections.Counter(d["topic"] for d in dead)
    assert by_topic[TOPICS.scored] == len(scored_bad)
    assert by_topic[TOPICS.labels] == len(labels_bad)
    assert by_topic[TOPICS.requests] == len(reqs_bad)
    reasons = {str(r) for r in RejectReason}
    assert {d["reason"] for d in dead} <= reasons and all(d["detail"] for d in dead)
    for source, topic in (
        ("scored", TOPICS.scored),
        ("labels", TOPICS.labels),
        ("requests", TOPICS.requests),
    ):  # each counted under the input it was read from
        counted = sum(
            registry.get_sample_value(
                "monitor_invalid_records_total", {"input": source, "reason": r}
            )
            or 0.0
            for r in reasons
        )
        assert counted == by_topic[topic]
    assert windows == clean.windows  # the estimates did not move


def _place(clean: list[bytes], bad: list[bytes], cuts: list[int]) -> list[bytes]:
    out = list(clean)
    for value, cut in sorted(zip(bad, cuts, strict=True), key=lambda t: -t[1]):
        out.insert(cut, value)
    return out


# ----------------------------------------------------------------- through the real broker
deploy = kafka_tests.deploy


@pytest.mark.integration
@pytest.mark.timeout(180)
@settings(
    max_examples=1,
    deadline=None,
    phases=[Phase.generate],
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(scored_bad=st.lists(bad_scored, min_size=150, max_size=150))
def test_one_fuzzed_batch_through_the_broker(
    broker: EmbeddedBroker,
    deploy: Callable[..., Run],
    tmp_path: Path,
    scored_bad: list[bytes],
) -> None:
    run = deploy(name="fuzz")
    topics = run.config.kafka.topics
    w = generate(WorkloadSpec(n=1500, hours=3.0, seed=29))
    expected, predicted = _predict(run.config, w, tmp_path)
    _produce(broker, topics.scored, _scored(w)[:700] + scored_bad + _scored(w)[700:])
    bad_labels_ = [b"\xff\xfe", b'{"request_id": "' + b"0" * 32 + b'", "label": 1}', b"[1]"]
    _produce(broker, topics.labels, [*_labels(w, expected), *bad_labels_])
    run.start()
    run.wait_offsets({(topics.scored, 0): len(w) + len(scored_bad)})
    run.wait_offsets({(topics.labels, 0): len(expected) + len(bad_labels_)})
    n_bad = len(scored_bad) + len(bad_labels_)
    dead = [json.loads(v) for v in _read(broker, topics.deadletter, n_bad)]
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    assert len(dead) == n_bad and all(d["reason"] and d["detail"] for d in dead)
    assert run.snapshot_repr() == predicted
    assert not run.events("crashed")


def test_a_future_outlier_does_not_move_the_watermark(clean: Clean, tmp_path: Path) -> None:
    """One record stamped an hour after it was written is rejected; one within the skew is not."""
    ahead = encode({"id": "fz-future", "score": 0.9, "ts": NOW + 3600.0})
    log, engine, _ = _run(_fuzz_config(tmp_path / "a"), [*clean.scored, ahead], [], clean.labels)
    windows = repr(engine.estimator.snapshot().windows)
    watermark = engine.estimator.watermark("default")
    engine.store.close()
    dead = [json.loads(v) for _, v in log.records(TOPICS.deadletter)]
    assert [d["reason"] for d in dead] == ["bad_timestamp"]
    assert "more than 5 minutes after the record's Kafka timestamp" in dead[0]["detail"]
    assert watermark == max(json.loads(v)["ts"] for v in clean.scored)
    assert windows == clean.windows
    near = encode({"id": "fz-near", "score": 0.9, "ts": NOW + 60.0})
    _, engine, _ = _run(_fuzz_config(tmp_path / "b"), [*clean.scored, near], [], [])
    assert engine.estimator.watermark("default") == NOW + 60.0  # within the skew: accepted
    engine.store.close()
