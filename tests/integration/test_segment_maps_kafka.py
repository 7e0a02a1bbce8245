"""A published calibration with segment maps reaches a ``--role sampler`` (real broker).

The map record goes on the aggregates topic as an estimator publishes it
(``aggregates.encode_map``), the sampler process takes it, and the requests it then writes
record each record's p_hat under its segment's map ("eu") or the model's (any other segment):
the codec, the topic and the sampler's decisions end to end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaProducer

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.core import aggregates
from monitor.io.kafka_io import read_topic
from monitor.sim.workload import WorkloadSpec, generate
from monitor.stats.budget import Calibration
from monitor.stats.calibration import PlattMap
from tests.conftest import Broker
from tests.integration.test_daemon_kafka import _yaml
from tests.integration.test_scale_out import Proc, _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EU = PlattMap(1.0, 2.0)
CAL = Calibration(5, PlattMap(-0.5, 0.4), 0.3, (("eu", EU),))


def test_a_sampler_decides_each_segment_at_its_published_map(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    tmp_path: Path,
    procs: list[Proc],
) -> None:
    topics = make_topics(1)
    path = tmp_path / "monitor.yaml"
    path.write_text(
        _yaml(
            broker, topics, tmp_path / "data", "g-segmaps", records_per_hour=750, recalibrate=True
        )
    )
    config = load_config(path)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    try:
        producer.send(
            topics.aggregates,
            aggregates.encode_map("default", CAL),
            aggregates.encode_map_key("default"),
        )
        producer.flush()
        sampler = Proc(path, config, tmp_path / "sampler.log")
        procs.append(sampler)
        sampler.launch("sampler")
        _wait(
            "the sampler to take the map", lambda: bool(sampler.events("calibration_taken")), procs
        )
        assert [e["version"] for e in sampler.events("calibration_taken")] == [5]
        w = generate(WorkloadSpec(n=3000, hours=4.0, seed=5, segments=("eu", "us")))
        for r in w.records():
            producer.send(topics.scored, json.dumps(r).encode())
        producer.flush()
        committed = lambda: len(read_topic(config, topics.requests, range)) >= 40  # noqa: E731
        _wait("requests", committed, procs)
        assert sampler.stop()[0] == 0, sampler.log_tail()
    finally:
        producer.close()
    reqs = [json.loads(v or b"") for _, _, v in read_topic(config, topics.requests, range)]
    first = min(r["bucket"] for r in reqs)  # its control is uniform: q* at the raw scores
    for segment, m in (("eu", EU), ("us", CAL.cal_map)):
        later = [r for r in reqs if r["bucket"] > first and r["segment"] == segment]
        assert later, segment
        want = m.apply(np.array([r["score"] for r in later], dtype=np.float64))
        got = np.array([r["phat"] for r in later], dtype=np.float64)
        assert float(np.max(np.abs(got - want))) < 1e-6, segment
