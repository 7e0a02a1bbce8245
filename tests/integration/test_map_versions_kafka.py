"""An estimator that loses its data directory keeps publishing maps the samplers take (real broker).

``--role estimator`` and one ``--role sampler`` with ``recalibrate: true``, a simulated audit team
answering the requests: the estimator publishes maps and the sampler takes them. The estimator
is then stopped, its data directory deleted and the process started again (a new pod without its
volume). It must recover the versions published before from the aggregates topic (one
``calibration_recovered`` warning) and number its next maps above them, and the running sampler
must take them; before the fix they restarted at 1 and the sampler ignored every one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaProducer

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.core import aggregates
from monitor.io.kafka_io import read_topic
from monitor.sim.auditors import AuditPolicy, SimulatedAuditTeam
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import Broker
from tests.integration.test_daemon_kafka import _yaml
from tests.integration.test_scale_out import Proc, _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def _taken(sampler: Proc) -> list[int]:
    return [int(str(e["version"])) for e in sampler.events("calibration_taken")]


def _published(estimator: Proc) -> list[int]:
    out: list[int] = []
    for e in estimator.events("calibration_published"):
        maps = e["maps"]
        assert isinstance(maps, dict)
        out.extend(int(v) for v in maps.values())
    return out


def test_an_estimator_restarted_without_its_data_directory_publishes_maps_the_sampler_takes(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    tmp_path: Path,
    procs: list[Proc],
) -> None:
    w = generate(WorkloadSpec(n=3000, hours=6.0, seed=5))
    topics = make_topics(1)
    data_dir = tmp_path / "data"
    path = tmp_path / "monitor.yaml"
    text = _yaml(
        broker,
        topics,
        data_dir,
        "g-versions",
        max_poll_records=150,
        labels_per_hour=60,
        records_per_hour=500,
        refresh_records=40,
        recalibrate=True,
        keep_scores=False,
    )
    path.write_text(text)
    config = load_config(path)
    estimator = Proc(path, config, tmp_path / "estimator.log")
    sampler = Proc(path, config, tmp_path / "sampler.log")
    procs += [estimator, sampler]
    estimator.launch("estimator")
    sampler.launch("sampler")

    def rebuilt() -> bool:
        return bool(sampler.events("sampler_rebuilt"))

    _wait("the sampler to own the partition", rebuilt, procs)
    team = SimulatedAuditTeam(
        dict(w.truth_rows()),
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=AuditPolicy(delay_s=0.0, seed=3),
    ).start()
    records = [json.dumps(r).encode() for r in w.records()]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    half = len(records) // 2
    try:
        for r in records[:half]:
            producer.send(topics.scored, r)
        producer.flush()
        _wait("the sampler to take a map", lambda: bool(_taken(sampler)), procs)
        held = max(_taken(sampler))
        assert estimator.stop()[0] == 0, estimator.log_tail()
        shutil.rmtree(data_dir)  # a new pod without its volume
        published_before = max(_published(estimator))
        n_events = len(estimator.events("calibration_published"))

        estimator.launch("estimator")
        _wait(
            "the restarted estimator to recover the versions",
            lambda: len(estimator.events("calibration_recovered")) == 2,
            procs,
        )
        for r in records[half:]:
            producer.send(topics.scored, r)
        producer.flush()
        # newer than every map published before the restart: the sampler may take the last of
        # those (published after it took ``held``) before the restarted estimator publishes
        _wait(
            "the sampler to take a map the restarted estimator published",
            lambda: max(_taken(sampler)) > published_before,
            procs,
        )
    finally:
        producer.close()
        team.stop()
    # the estimator first: a map it publishes while the sampler stops would never be taken
    assert estimator.stop()[0] == 0, estimator.log_tail()
    first, recovered = estimator.events("calibration_recovered")
    assert first["level"] == "info" and first["published"] == {}  # a new deployment
    assert recovered["level"] == "warning"
    assert recovered["stored"] == {}
    assert recovered["published"] == {"default": published_before}
    after = [
        int(v)
        for e in estimator.events("calibration_published")[n_events:]
        for v in e["maps"].values()  # type: ignore[attr-defined]
    ]
    # (a broker hiccup may publish the recovered map again: never a version below it)
    assert after and min(after) >= published_before >= held, (after, published_before, held)
    assert max(after) > published_before
    _wait(  # the estimator has stopped on purpose: only the sampler must stay up
        "the sampler to take the last map published",
        lambda: max(_taken(sampler)) >= max(after),
        [sampler],
    )
    assert not sampler.events("calibration_ignored")
    assert sampler.stop()[0] == 0, sampler.log_tail()
    on_topic = read_topic(config, topics.aggregates, range)
    newest = aggregates.newest_maps((k, v) for _, k, v in on_topic)
    assert newest["default"].version == max(after) == max(_taken(sampler))
