"""Typed, validated settings of the daemon (loaded from YAML by ``load_config``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TopicsConfig:
    """Kafka topic names."""

    scored: str = "predictions"
    requests: str = "audit-requests"
    labels: str = "audit-labels"
    deadletter: str = "monitor-deadletter"


@dataclass(frozen=True)
class KafkaConfig:
    """Connection and consumption settings; ``client`` passes through to kafka-python."""

    bootstrap_servers: tuple[str, ...] = ("127.0.0.1:9092",)
    group_id: str = "activeaudit-monitor"
    topics: TopicsConfig = TopicsConfig()
    poll_timeout_ms: int = 500
    max_poll_records: int = 500
    # security settings (ssl_*, sasl_*, security_protocol...) for KafkaConsumer/KafkaProducer;
    # may hold secrets, so never shown in repr or logs
    client: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class MetricsConfig:
    """Where /metrics, /healthz and /readyz are served."""

    listen_address: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class ModelConfig:
    """How one model is audited and estimated."""

    name: str
    alpha: float = 0.5  # F_alpha: 1 precision, 0 recall, 0.5 F1
    threshold: float = 0.5  # pred = score >= threshold when the record has no pred
    labels_per_hour: float = 10.0  # label budget
    defensive: float = 0.1  # lambda: share of uniform sampling mixed into q*
    expected_records_per_hour: float = 100_000.0  # traffic guess used until traffic is measured


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
