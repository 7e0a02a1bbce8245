"""The daemon's settings: frozen dataclasses, validated at start-up by ``monitor.config.load``.

YAML keys are the field names, except where a comment names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

MEASURES = ("f", "precision", "recall")
#: ``models.NAME.estimator``: the ratio estimate (seed 000 Eq. 4) or the model-assisted one
ESTIMATORS = ("ratio", "model_assisted")


@dataclass(frozen=True)
class AlertConfig:
    """The ``alerts:`` block of one model (YAML keys are the field names)."""

    measure: str = "f"  # f (the model's F_alpha) | precision | recall
    floor: float | None = None  # f_below_floor off when None
    baseline: float | None = None  # f_dropped reference value
    baseline_se: float = 0.0  # its standard error (0: a known constant)
    reference_lag_s: int = 0  # else compare with the same window this long ago (0: off)
    drop_tolerance: float = 0.0  # drops up to this are not alerted
    likelihood_floor: float | None = 0.5  # below: scores not trustworthy (None: off)
    check_calibration: bool = True  # intrinsic F outside the audited interval -> untrustworthy
    min_labels: int = 30  # fewer labels in the window: no decision
    false_alarm_rate: float = 0.05  # any false alarm per (model, segment) and horizon
    spending: str = "horizon"  # horizon | anytime (see monitor.stats.alerting)
    horizon_s: int = 30 * 86_400
    check_interval_s: int = 3600  # at most one look per this much event time
    looks_per_window: int = 8  # re-test a window when 1/8 of it is new (0: every interval)
    windows: tuple[str, ...] = ()  # reported windows to alert on (empty: all)

    def tests(self, n_windows: int) -> int:
        """A W: enabled alerts times alerted windows (``n_windows`` reported), at least 1."""
        alerts = (
            (self.floor is not None)
            + (self.baseline is not None or self.reference_lag_s > 0)
            + (self.likelihood_floor is not None or self.check_calibration)
        )
        windows = len(self.windows) if self.windows else n_windows
        return max(1, alerts * windows)

    def interval_s(self, window_s: int | None) -> int:
        """Event time between two looks at a window of ``window_s`` seconds."""
        if window_s is None or self.looks_per_window <= 0:
            return max(self.check_interval_s, 1)
        return max(self.check_interval_s, window_s // self.looks_per_window, 1)

    def horizon_looks(self, window_s: int | None) -> int:
        """H: looks at a window of ``window_s`` seconds per horizon."""
        return max(1, self.horizon_s // self.interval_s(window_s))


@dataclass(frozen=True)
class TopicsConfig:
    """Kafka topic names."""

    scored: str = "predictions"
    requests: str = "audit-requests"
    labels: str = "audit-labels"
    deadletter: str = "monitor-deadletter"
    aggregates: str = "audit-aggregates"

    def input_of(self, topic: str) -> str:
        """Which input ``topic`` is: ``scored``, ``requests``, ``labels`` or ``aggregates``.

        The ``input`` label of ``monitor_invalid_records_total`` (``other`` for any other name).
        """
        for role in ("scored", "requests", "labels", "aggregates"):
            if getattr(self, role) == topic:
                return role
        return "other"

    def tagged(self, tag: str) -> TopicsConfig:
        """Every name with ``-{tag}`` appended: a fresh set for one test or benchmark run."""
        return TopicsConfig(**{f.name: f"{getattr(self, f.name)}-{tag}" for f in fields(self)})


@dataclass(frozen=True)
class KafkaConfig:
    """Connection and consumption settings; ``client`` passes through to kafka-python."""

    bootstrap_servers: tuple[str, ...] = ("127.0.0.1:9092",)
    group_id: str = "activeaudit-monitor"
    topics: TopicsConfig = TopicsConfig()
    poll_timeout_ms: int = 500
    # records per step (one store transaction, one offset commit): 5000 amortises the per-step
    # work; ingest ~17 -> ~13 CPU-s per million records vs 500 (benchmarks/throughput.py)
    max_poll_records: int = 5000
    # security settings (ssl_*, sasl_*, security_protocol...) for KafkaConsumer/KafkaProducer;
    # may hold secrets, so never shown in repr or logs
    client: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # kafka-python (the default) or confluent-kafka (the optional extra, ~5x less CPU per record)
    client_library: str = "kafka-python"
    # replicas of each topic ``--create-topics`` creates; None: the broker's
    # ``default.replication.factor`` (what kafka-topics.sh does without --replication-factor)
    replication_factor: int | None = None
    # ``monitor run --create-topics`` (a flag, no key of the file): the topics were created at
    # start; an error for a missing topic says what that process does about it
    create_topics: bool = False

    @property
    def sampler_group_id(self) -> str:
        """The consumer group of ``--role sampler`` processes: ``<group_id>-sampler``."""
        return f"{self.group_id}-sampler"


@dataclass(frozen=True)
class MetricsConfig:
    """Where /metrics, /healthz and /readyz are served."""

    listen_address: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class AlertmanagerConfig:
    """Where the daemon pushes its own alert decisions (Alertmanager v2 API); off without a URL.

    ``url`` is Alertmanager's base URL (``http://alertmanager:9093``); the daemon posts to
    ``{url}/api/v2/alerts`` from a background thread (``monitor.io.alertmanager``), each attempt
    waiting at most ``timeout_s``.
    """

    url: str | None = None
    timeout_s: float = 5.0


@dataclass(frozen=True)
class ModelConfig:
    """How one model is audited and estimated."""

    name: str
    alpha: float = 0.5  # F_alpha: 1 precision, 0 recall, 0.5 F1
    threshold: float = 0.5  # pred = score >= threshold when the record has no pred
    labels_per_hour: float = 10.0  # label budget
    defensive: float = 0.1  # lambda: share of uniform sampling mixed into q*
    expected_records_per_hour: float = 100_000.0  # traffic guess used until traffic is measured
    recalibrate: bool = True  # q* at scores recalibrated from the labels (DESIGN.md, round 2)
    segment_maps: bool = True  # segments whose labels reject the model's map get their own
    keep_calibrated_scores: bool = True  # labels that do not reject the scores keep them
    refresh_records: int = 1000  # refresh at record N, 2N, 4N.. of a bucket and by age; 0: off
    # ratio | model_assisted: GREG with p_hat over all traffic (monitor.stats.greg) where usable
    estimator: str = "ratio"
    alerts: AlertConfig = field(default_factory=AlertConfig)  # floors, baseline, error control


@dataclass(frozen=True)
class WindowsConfig:
    """Tumbling buckets by event time, and the rolling windows reported over them."""

    bucket_s: int = 3600
    report: tuple[tuple[str, int], ...] = (("1h", 3600), ("24h", 86_400), ("7d", 604_800))


@dataclass(frozen=True)
class Config:
    """Everything the daemon needs, validated at start-up."""

    kafka: KafkaConfig = KafkaConfig()
    metrics: MetricsConfig = MetricsConfig()
    alertmanager: AlertmanagerConfig = AlertmanagerConfig()  # push of the daemon's own alerts
    data_dir: Path = Path("data")
    windows: WindowsConfig = WindowsConfig()
    models: Mapping[str, ModelConfig] = field(
        default_factory=lambda: {"default": ModelConfig(name="default")}
    )
    default_model: str = "default"  # used for records without a ``model`` field
    level: float = 0.95  # confidence level of every interval
    label_deadline_s: float = 7 * 86_400.0  # unanswered requests count as missing after this
    salt: str = "activeaudit"  # hash salt of the deterministic audit decisions
    max_segments_per_model: int = 100  # more distinct segments are folded into "__other__"
    # HMAC key for the request token a label must echo (issue 6); None: tokens not required
    label_token_secret: str | None = field(default=None, repr=False)
    label_park_grace_s: float = 3600.0  # a label for a not-yet-known request waits this long
    label_park_max: int = 100_000  # at most this many labels wait for their request

    def model(self, name: str) -> ModelConfig:
        """The settings of model ``name``; the defaults for a model not in the configuration.

        Records naming an unknown model are rejected at decoding, so this fallback only serves
        state written under an older configuration (a model since removed).
        """
        return self.models.get(name) or ModelConfig(name=name)


# --------------------------------------------------------------------------------------------
# Loading and validation: YAML -> plain data -> the frozen dataclasses above, every problem
# collected with its key path and reported at once (kafka-python's strict config,
# pve-exporter's collect-all-then-report).
# --------------------------------------------------------------------------------------------
