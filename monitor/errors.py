"""Errors the monitor raises, and the reasons a record is rejected to the dead-letter topic.

Bad input records are data, not exceptions: they become a ``Reject`` (see ``monitor.core.records``)
with one of the ``RejectReason`` values below, go to the dead-letter topic and increment
``monitor_invalid_records_total{input,reason}``. Exceptions are kept for faults of the process
itself.
"""

from __future__ import annotations

import enum


class MonitorError(Exception):
    """Base class of every error the monitor raises on purpose."""


class ConfigError(MonitorError):
    """The configuration is unusable; the message names every bad key path and the reason."""


class InputFileError(MonitorError):
    """An input file (pool, plan) is malformed; the message names the file, line and column."""


class StoreError(MonitorError):
    """The embedded state store cannot be opened, locked or written."""


class BrokerUnavailable(MonitorError):
    """The Kafka broker cannot be reached; retrying later makes sense.

    ``monitor.io.client_errors.unavailable`` makes one from a client error, with its cause.
    """


class TopicsNotReady(BrokerUnavailable):
    """The topics are not laid out as the daemon needs; retried like an outage until fixed."""


class RejectReason(enum.StrEnum):
    """Why an input record went to the dead-letter topic (the ``reason`` metric label)."""

    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"
    OUT_OF_RANGE = "out_of_range"
    BAD_TIMESTAMP = "bad_timestamp"
    UNKNOWN_MODEL = "unknown_model"
    TOO_LARGE = "too_large"
    UNKNOWN_REQUEST = "unknown_request"
    DUPLICATE_LABEL = "duplicate_label"
    CONFLICTING_LABEL = "conflicting_label"
    EXPIRED_REQUEST = "expired_request"
    BAD_TOKEN = "bad_token"
