"""Late and skipped labels end to end: ``monitor run`` on the real broker (Tansu) with an audit
team that answers late and skips 30% of the predicted positives' requests.

The scored stream is produced first, so every answer arrives after the records it labels (late
in event time: the watermark is already at the end of the stream). The team
(``monitor.sim.auditors.SimulatedAuditTeam``) answers from the truth after a delay and never
answers a seeded 30% of the predicted positives' requests (``drop_rate_by_pred``). Once every
answer it will give is in, the daemon's /metrics must show the skew (answer rate 1.0 for the
predicted negatives, about 0.7 for the positives, a positive pending share of the weight) and
the exported F1, precision and recall intervals must cover the stream's true values.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.sim.auditors import AuditPolicy, SimulatedAuditTeam
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import Workload, WorkloadSpec, generate, truth_of
from tests.integration.test_daemon_kafka import HOURS, Run, _produce, _read_all, _scored, _yaml

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SEED = 29
SKIP_POSITIVES = 0.3


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(WorkloadSpec(n=24_000, hours=float(HOURS), seed=11))


@pytest.fixture
def run(
    broker: EmbeddedBroker, make_topics: Callable[..., TopicsConfig], tmp_path: Path
) -> Iterator[Run]:
    topics = make_topics()
    path = tmp_path / "late.yaml"
    group = f"g-{uuid.uuid4().hex[:8]}"
    path.write_text(_yaml(broker, topics, tmp_path / "data", group))
    r = Run(path, load_config(path), tmp_path / "late.log")
    yield r
    if r.proc is not None and r.proc.poll() is None:
        r.proc.kill()
        r.proc.wait()


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    msg = f"no {name} {labels} in\n{text[-3000:]}"
    raise AssertionError(msg)


def _scrape(run: Run) -> str:
    url = f"http://127.0.0.1:{run.config.metrics.port}/metrics"
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bytes(resp.read()).decode()


def test_late_answers_and_a_skipped_stratum_are_reweighted_and_shown(
    broker: EmbeddedBroker, run: Run, workload: Workload
) -> None:
    topics = run.config.kafka.topics
    _produce(broker, topics.scored, _scored(workload))
    run.start()
    run.wait_offsets({(topics.scored, 0): len(workload)})
    n_requests = len(_read_all(run.config, topics.requests))
    assert n_requests > 100
    policy = AuditPolicy(delay_s=0.5, seed=SEED, drop_rate_by_pred=(0.0, SKIP_POSITIVES))
    with SimulatedAuditTeam(
        dict(workload.truth_rows()), broker.bootstrap, topics.requests, topics.labels, policy=policy
    ) as team:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = team.stats
            if st.requests == n_requests and st.waiting == 0:
                break
            time.sleep(0.2)
        st = team.stats
        assert st.requests == n_requests and st.waiting == 0, st
    assert st.dropped > 0 and st.answered + st.dropped == n_requests
    run.wait_offsets({(topics.labels, 0): st.answered})
    deadline = time.monotonic() + 15
    text = _scrape(run)
    window = {"model": "default", "segment": "", "window": "24h"}
    while time.monotonic() < deadline:
        if _metric(text, "monitor_window_labels", **window) == st.answered:
            break
        time.sleep(0.2)
        text = _scrape(run)
    assert _metric(text, "monitor_window_labels", **window) == st.answered

    # the skew is visible: every predicted negative answered, ~70% of the positives
    neg = _metric(text, "monitor_answer_rate", pred="0", **window)
    pos = _metric(text, "monitor_answer_rate", pred="1", **window)
    assert neg == 1.0
    assert 0.6 < pos < 0.8, pos
    assert _metric(text, "monitor_pending_weight_ratio", **window) > 0.0
    # and the intervals still cover the truth
    truth = truth_of(workload.pred, workload.label, 0.5)
    for name, true_value, extra in (
        ("monitor_f_measure", truth.f, {"alpha": "0.5"}),
        ("monitor_precision", truth.precision, {}),
        ("monitor_recall", truth.recall, {}),
    ):
        value = _metric(text, name, **window, **extra)
        lower = _metric(text, f"{name}_ci_lower", **window, **extra)
        upper = _metric(text, f"{name}_ci_upper", **window, **extra)
        low_w = _metric(text, f"{name}_worst_case_lower", **window, **extra)
        high_w = _metric(text, f"{name}_worst_case_upper", **window, **extra)
        print(
            f"{name}: {value:.3f} [{lower:.3f}, {upper:.3f}] worst case [{low_w:.3f}, "
            f"{high_w:.3f}] true {true_value:.3f}; answer rate f=0 {neg:.2f}, f=1 {pos:.2f}"
        )
        assert lower <= true_value <= upper, (name, lower, true_value, upper)
        assert low_w < high_w  # 30% of the predicted positives can still be anything
        assert low_w - 0.01 <= value <= high_w + 0.01  # (up to its jackknife correction)
    latency = _metric(text, "monitor_label_latency_seconds_count", model="default")
    assert latency == st.answered
