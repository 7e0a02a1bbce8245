"""The narrow ports between the engines and the outside world: what a step needs of each.

``monitor.io`` implements them with Kafka (kafka-python or confluent-kafka) and Prometheus;
``monitor.testing.fakes`` in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from monitor.config.schema import Config
    from monitor.core.messages import RawRecord
    from monitor.core.snapshot import Snapshot
    from monitor.errors import RejectReason
    from monitor.stats.budget import Calibration

TP = tuple[str, int]  # (topic, partition)
Entry = tuple[int, bytes | None, bytes | None]  # (partition, key, value) of a topic read whole
Assigned = Callable[[Sequence[TP]], None]  # called with a consumer's new assignment


class Source(Protocol):
    """Where an engine's records come from: a consumer (``monitor.io.kafka_io`` and the like)."""

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        """Up to ``max_records`` records, in offset order per partition."""
        ...

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Record the next offsets to consume (after the state they produced is durable)."""
        ...

    def seek(self, offsets: Mapping[TP, int]) -> None:
        """Go back to these next offsets (after a failed batch was rolled back)."""
        ...

    def committed(self) -> dict[TP, int]:
        """The group's committed offsets of the assigned partitions."""
        ...

    def lag(self) -> dict[TP, int]:
        """Records not yet consumed per assigned partition (when known)."""
        ...

    def skipped(self) -> dict[TP, int]:
        """Records deleted before they were read, per partition, since the last call (logged)."""
        ...

    def assigned(self) -> bool:
        """Whether the source has partitions to read."""
        ...

    def caught_up(self, topics: Collection[str]) -> bool:
        """Whether every assigned partition of ``topics`` is known to have lag 0."""
        ...

    def assignment(self) -> list[TP]:
        """The assigned topic-partitions (none while unassigned)."""
        ...

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of ``topic`` (1 when unknown)."""
        ...

    def probe(self, timeout_s: float) -> None:
        """Ask the broker for end offsets; ``BrokerUnavailable`` when it does not answer.

        ``TopicsNotReady`` when a subscribed topic does not exist (deleted, or never created)
        or the broker's ACLs do not allow this client to read it.
        """
        ...

    def close(self) -> None:
        """Leave the group and release the connection."""
        ...


class Sink(Protocol):
    """Where requests, dead letters and bucket states go (a producer)."""

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        *,
        fallback: bytes | None = None,
    ) -> None:
        """Queue one record (to ``partition``, or by key hash when None).

        When the broker refuses it as too large (the topic's ``max.message.bytes``),
        ``fallback`` is written instead, with no key; without one that is ``TopicsNotReady``.
        """
        ...

    def fallbacks(self) -> int:
        """How many records were written as their ``fallback`` since the last call."""
        ...

    def flush(self, timeout_s: float) -> None:
        """Wait until every queued record is acknowledged; ``BrokerUnavailable`` otherwise."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class TopicReader(Protocol):
    """One topic read outside any group: some partitions from the beginning, then what follows."""

    def read(self, select: Callable[[int], Collection[int]]) -> list[Entry]:
        """Every record of the partitions ``select(n)`` (of n), in log order per partition."""
        ...

    def follow(self) -> list[Entry]:
        """Records appended to those partitions since the last ``read``/``follow``; no wait."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class Metrics(Protocol):
    """The exporter facade (``monitor.io.exporter.Exporter``) as the loop uses it."""

    def publish(self, snapshot: Snapshot) -> None: ...  # noqa: D102
    def count_records(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_requests(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_labels(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def observe_label_latency(self, per_model: Mapping[str, Sequence[float]]) -> None: ...  # noqa: D102
    def count_rejects(self, per_input: Mapping[tuple[str, RejectReason], int]) -> None: ...  # noqa: D102
    def count_segments_folded(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_duplicate_ids(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_maps_ignored(self, model: str, reason: str) -> None: ...  # noqa: D102
    def set_calibration(  # noqa: D102
        self, model: str, calibration: Calibration, defensive: float
    ) -> None: ...
    def observe_batch(self, seconds: float) -> None: ...  # noqa: D102
    def set_lags(self, lags: Mapping[TP, int]) -> None: ...  # noqa: D102
    def count_skipped(self, skipped: Mapping[TP, int]) -> None: ...  # noqa: D102
    def count_deadletters_minimal(self, n: int) -> None: ...  # noqa: D102
    def set_ready(self, ready: bool) -> None: ...  # noqa: D102


class Loop(Protocol):
    """What ``Daemon`` drives: an ``Engine`` or a ``monitor.runtime.sampler_role.SamplerEngine``."""

    config: Config
    metrics: Metrics
    standby_ok: bool  # ready while the group assigns it no partition (samplers: a standby)

    def offsets(self) -> Mapping[TP, int]: ...  # noqa: D102
    def set_partitions(self, n: int) -> None: ...  # noqa: D102
    def step(self, source: Source, sink: Sink) -> int: ...  # noqa: D102
    def rollback(self, source: Source) -> None: ...  # noqa: D102
    def shutdown(self, source: Source | None, sink: Sink | None) -> None: ...  # noqa: D102


Connect = Callable[[Callable[[], Mapping[TP, int]]], tuple[Source, Sink]]
