"""The daemon's topics as ``--create-topics`` lays them out; errors for missing or refused ones.

Both client modules (``monitor.io.kafka_io``, ``monitor.io.confluent_io``) report a topic the
broker does not know with ``missing_topics``: a subscribed one (a consumer only stops getting
records from it, so without that error a deleted labels topic left the daemon ready and silent
for hours) and one the producer writes to (its flush only waited, so a deleted dead-letter or
requests topic read as a broker outage). The error names each topic and the ``kafka-topics.sh``
command that recreates it as ``--create-topics`` would (``monitor.io.kafka_io.create_topics``
uses the same settings); to a process started with ``--create-topics``, which creates them at its
start only, it says that a restart creates them again. A subscribed topic the broker's ACLs do
not allow this client to read is ``refused_topics``, with the ``kafka-acls.sh`` command granting
it; a topic that refuses a record as too large (its ``max.message.bytes``) is ``too_large``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

from monitor.config.schema import Config
from monitor.errors import TopicsNotReady
from monitor.io.client_errors import principal

# the aggregates topic keeps the latest state per key (monitor.core.aggregates); hourly segments let
# the cleaner compact, since a sampler reads the uncompacted tail back on every rebalance
AGGREGATES_TOPIC_CONFIG: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
}
#: a producer's flush asks this often whether a topic it writes to is missing (``missing_topics``)
FLUSH_CHECK_S = 1.0
#: the requests and labels topics keep their records this long at least (30 days)
KEEP_MIN_MS = 30 * 86_400_000


def keep_ms(config: Config) -> int:
    """Retention of the requests and labels topics: 30 days, or twice the label deadline.

    A broker's default (often 7 days) is the deadline itself: an estimator rebuilt from the
    topics, or the Label Studio bridge, would miss requests still open.
    """
    return max(KEEP_MIN_MS, int(2_000 * config.label_deadline_s))


def topic_config(config: Config, topic: str) -> dict[str, str]:
    """The topic-level settings ``--create-topics`` gives ``topic`` (none for most topics)."""
    topics = config.kafka.topics
    if topic == topics.aggregates:
        return dict(AGGREGATES_TOPIC_CONFIG)
    if topic in (topics.requests, topics.labels):
        return {"retention.ms": str(keep_ms(config))}
    return {}


def missing_topics(
    config: Config,
    missing: Collection[str],
    partitions_for: Callable[[str], int],
    *,
    written: bool = False,
) -> TopicsNotReady:
    """The error for topics that do not exist, with the command creating each.

    ``written``: topics the producer writes to (else the consumer's subscribed ones).

    The scored and aggregates topics have as many partitions as each other (a sampler refuses a
    scored partition without an aggregates partition of its own), so a missing one of the two
    gets the other's count, read with ``partitions_for`` (1 when that one is unknown too);
    every other topic gets one partition, as ``--create-topics`` gives it.
    """
    kc = config.kafka
    twin = {kc.topics.scored: kc.topics.aggregates, kc.topics.aggregates: kc.topics.scored}
    rf = kc.replication_factor
    replicas = "" if rf is None else f" --replication-factor {rf}"  # else the broker's default
    commands = []
    for topic in sorted(missing):
        n = partitions_for(twin[topic]) if topic in twin else 1
        settings = "".join(f" --config {k}={v}" for k, v in topic_config(config, topic).items())
        commands.append(
            f"kafka-topics.sh --bootstrap-server {','.join(kc.bootstrap_servers)} --create "
            f"--topic {topic} --partitions {n}{replicas}{settings}"
        )
    kind, effect = (
        ("topics written to", "the records for them cannot be delivered")
        if written
        else ("subscribed topics", "their records cannot be read")
    )
    if kc.create_topics:  # what it does at start only: the broker lost them since
        fix = (
            "this process runs with --create-topics, which creates the topics at its start "
            "only: restart it to create them again, or create them as it would "
            f"({'; '.join(commands)})"
        )
    else:
        fix = (
            f"create them as --create-topics would ({'; '.join(commands)}), or restart "
            "monitor run with --create-topics"
        )
    msg = (
        f"{kind} missing: {', '.join(sorted(missing))} (deleted, or never created; "
        f"{effect}): {fix}; the monitor goes on by itself once they exist"
    )
    return TopicsNotReady(msg)


def refused_topics(config: Config, refused: Collection[str]) -> TopicsNotReady:
    """The error for subscribed topics the broker does not authorize this client to read.

    A consumer only gets no records from such a topic (kafka-python says nothing, librdkafka
    one error event), so the daemon stayed ready while, say, no label could arrive.
    """
    kc = config.kafka
    user = principal(kc.client)
    commands = "; ".join(
        f"kafka-acls.sh --bootstrap-server {','.join(kc.bootstrap_servers)} --add "
        f"--allow-principal {user} --operation Read --operation Describe --topic {topic}"
        for topic in sorted(refused)
    )
    msg = (
        f"subscribed topics refused: {', '.join(sorted(refused))} (the broker's ACLs do not "
        f"allow this client to read them; no record of theirs arrives): grant {user} Read "
        f"and Describe on them ({commands}); the monitor goes on by itself once it may"
    )
    return TopicsNotReady(msg)


class Queued(NamedTuple):
    """A record a sink queued, kept until its flush says it was written (``too_large``)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None
    fallback: bytes | None

    @property
    def size(self) -> int:
        """Its key's and value's bytes."""
        return len(self.key or b"") + len(self.value or b"")


def too_large(topic: str, size: int, cause: BaseException) -> TopicsNotReady:
    """The error for a record of ``size`` bytes that ``topic`` refuses as too large (``cause``).

    Its topic's ``max.message.bytes`` (or the producer's ``max_request_size``) is below it: no
    retry writes it, and the broker answered, so it is no outage. Dead letters never get here:
    one refused is written in its minimal form (``monitor.core.records.deadletter_minimal``).
    The broker refuses a whole batch, and a client may fail the other records of its flush with
    it, so a sink writes the records refused with others again, one flush each, and only the
    one refused alone is too large (``Queued`` keeps them until then).
    """
    msg = (
        f"{topic} refuses a record of about {size} bytes as too large ({cause}): raise the "
        f"topic's max.message.bytes (kafka-configs.sh --alter --entity-type topics "
        f"--entity-name {topic} --add-config max.message.bytes=...) or kafka.client "
        "max_request_size; the monitor goes on by itself once it fits"
    )
    return TopicsNotReady(msg)
