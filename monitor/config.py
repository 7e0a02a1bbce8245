"""Typed, validated settings of the daemon (loaded from YAML by ``load_config``)."""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
import urllib.parse
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from monitor.alerts import AlertConfig, alert_config_from_mapping
from monitor.errors import ConfigError


@dataclass(frozen=True)
class TopicsConfig:
    """Kafka topic names."""

    scored: str = "predictions"
    requests: str = "audit-requests"
    labels: str = "audit-labels"
    deadletter: str = "monitor-deadletter"
    aggregates: str = "audit-aggregates"

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
    ``{url}/api/v2/alerts`` from a background thread (``monitor.alertmanager``), each attempt
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


# --------------------------------------------------------------------------------------------
# Loading and validation: YAML -> plain data -> the frozen dataclasses above, every problem
# collected with its key path and reported at once (kafka-python's strict config,
# pve-exporter's collect-all-then-report).
# --------------------------------------------------------------------------------------------

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_WINDOW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,31}")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")
_MIN_TOKEN_SECRET = 16
_REDACTED = "<redacted>"

_TOP_KEYS = (
    "kafka",
    "metrics",
    "alertmanager",
    "storage",
    "windows",
    "estimation",
    "labels",
    "sampling",
    "default_model",
    "models",
)
_KAFKA_KEYS = (
    "bootstrap_servers",
    "group_id",
    "topics",
    "poll_timeout_ms",
    "max_poll_records",
    "client",
    "client_library",
)
_TOPIC_KEYS = ("scored", "requests", "labels", "deadletter", "aggregates")
_MODEL_KEYS = (
    "alpha",
    "beta",
    "threshold",
    "labels_per_hour",
    "labels_per_day",
    "defensive",
    "expected_records_per_hour",
    "alerts",
)
_LABEL_KEYS = ("deadline_s", "token_secret", "park_grace_s", "max_parked")

# command-line override -> (key path in the file, flag named in messages)
OVERRIDES: Mapping[str, tuple[str, str]] = {
    "bootstrap_servers": ("kafka.bootstrap_servers", "--bootstrap-servers"),
    "metrics_port": ("metrics.port", "--metrics-port"),
    "metrics_address": ("metrics.listen_address", "--metrics-address"),
    "data_dir": ("storage.data_dir", "--data-dir"),
}

# kafka-python settings the monitor sets itself: not accepted under ``kafka.client``
_RESERVED_CLIENT: Mapping[str, str] = {
    "bootstrap_servers": "set it with kafka.bootstrap_servers",
    "group_id": "set it with kafka.group_id",
    "max_poll_records": "set it with kafka.max_poll_records",
    "enable_auto_commit": "the monitor commits offsets itself, after its state is durable",
    "transactional_id": "the monitor does not use Kafka transactions",
    "consumer_timeout_ms": "the monitor polls with kafka.poll_timeout_ms",
    "key_deserializer": "the monitor decodes records itself",
    "value_deserializer": "the monitor decodes records itself",
    "key_serializer": "the monitor encodes records itself",
    "value_serializer": "the monitor encodes records itself",
    "default_offset_commit_callback": "not settable from a file",
    "partition_assignment_strategy": "not settable from a file",
    "partitioner": "not settable from a file",
    "kafka_client": "not settable from a file",
    "selector": "not settable from a file",
    "metric_reporters": "not settable from a file",
    "sasl_oauth_token_provider": "not settable from a file",
    "ssl_context": "not settable from a file",
    "socket_options": "not settable from a file",
}


class ClientSettings(Mapping[str, Any]):
    """Read-only kafka-python settings whose secrets never show in ``repr`` or ``str``.

    Values read from the environment, and every key naming a password, secret or token, are
    shown as ``<redacted>``; the real values are only handed to kafka-python.
    """

    def __init__(self, values: Mapping[str, Any], secret_keys: Collection[str] = ()) -> None:
        self._values = dict(values)
        self._secret = frozenset(secret_keys) | {k for k in self._values if _secret_name(k)}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: (_REDACTED if k in self._secret else v) for k, v in self._values.items()}
        return f"ClientSettings({shown!r})"

    __str__ = __repr__


def _secret_name(key: str) -> bool:
    return any(word in key.lower() for word in ("password", "secret", "token"))


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read, validate and return the configuration; ``path=None`` means the built-in defaults.

    Args:
        path: the YAML file (see ``config/monitor.yaml``), or None for defaults only.
        overrides: command-line values that win over the file, by name: ``bootstrap_servers``
            (list or comma-separated string), ``metrics_port``, ``metrics_address``,
            ``data_dir``. None values are ignored.

    Raises:
        ConfigError: the file cannot be read or parsed (with the line), or any value is
            invalid; the message has one ``key.path: reason`` line per problem.
    """
    if path is None:
        return parse_config({}, "built-in defaults", overrides)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise ConfigError(msg) from exc
    except OSError as exc:
        msg = f"{path}: cannot read the configuration file: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        msg = f"{path}: invalid YAML{where}: {exc.problem or exc.context}"
        raise ConfigError(msg) from exc
    except yaml.YAMLError as exc:
        msg = f"{path}: invalid YAML: {exc}"
        raise ConfigError(msg) from exc
    return parse_config(data, str(path), overrides)


def parse_config(data: Any, source: str, overrides: Mapping[str, Any] | None = None) -> Config:
    """Validate already-parsed YAML data (``source`` names it in messages) into a ``Config``.

    A null value means "use the default". Every problem is collected before raising.

    Raises:
        ConfigError: ``"{source}: N problem(s)"`` then one ``key.path: reason`` line each.
    """
    origins: dict[str, str] = {}
    problems = _Problems(origins)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.add("<top level>", f"expected a mapping of sections, {_got(data)}")
        data = {}
    data = dict(data)
    _apply_overrides(problems, data, overrides or {}, origins)
    config = _build(problems, data)
    if problems.lines:
        count = len(problems.lines)
        head = f"{source}: {count} problem{'s' if count > 1 else ''}"
        msg = "\n  ".join([head, *sorted(problems.lines, key=_file_order)])
        raise ConfigError(msg)
    return config


def kafka_client_options(
    kafka: KafkaConfig, role: Literal["consumer", "producer", "admin"]
) -> dict[str, Any]:
    """The ``kafka.client`` settings that apply to one kafka-python client class.

    A key valid for the consumer only (``session_timeout_ms``) is left out of the producer's
    settings and vice versa, since kafka-python rejects unknown settings.
    """
    return {k: v for k, v in kafka.client.items() if k in _client_defaults(role)}


LIBRARIES = ("kafka-python", "confluent-kafka")
_LIBRARY = re.compile("|".join(re.escape(x) for x in LIBRARIES))


_BOTH = frozenset({"consumer", "producer"})
_CONSUMER = frozenset({"consumer"})
_PRODUCER = frozenset({"producer"})
# kafka.client key (kafka-python's name) -> (librdkafka property, the clients it applies to)
CONFLUENT_OPTIONS: Mapping[str, tuple[str, frozenset[str]]] = {
    "security_protocol": ("security.protocol", _BOTH),
    "sasl_mechanism": ("sasl.mechanism", _BOTH),
    "sasl_plain_username": ("sasl.username", _BOTH),
    "sasl_plain_password": ("sasl.password", _BOTH),
    "ssl_cafile": ("ssl.ca.location", _BOTH),
    "ssl_certfile": ("ssl.certificate.location", _BOTH),
    "ssl_keyfile": ("ssl.key.location", _BOTH),
    "ssl_password": ("ssl.key.password", _BOTH),
    "client_id": ("client.id", _BOTH),
    "reconnect_backoff_ms": ("reconnect.backoff.ms", _BOTH),
    "reconnect_backoff_max_ms": ("reconnect.backoff.max.ms", _BOTH),
    "retry_backoff_ms": ("retry.backoff.ms", _BOTH),
    "session_timeout_ms": ("session.timeout.ms", _CONSUMER),
    "heartbeat_interval_ms": ("heartbeat.interval.ms", _CONSUMER),
    # static group membership: a restarted member with the same id takes its partitions back
    # without waiting for its old session to expire (one id per process of a group)
    "group_instance_id": ("group.instance.id", _CONSUMER),
    "max_poll_interval_ms": ("max.poll.interval.ms", _CONSUMER),
    "fetch_max_bytes": ("fetch.max.bytes", _CONSUMER),
    "max_partition_fetch_bytes": ("max.partition.fetch.bytes", _CONSUMER),
    "request_timeout_ms": ("request.timeout.ms", _PRODUCER),
    "linger_ms": ("linger.ms", _PRODUCER),
    "compression_type": ("compression.type", _PRODUCER),
}


def confluent_client_options(
    kafka: KafkaConfig, role: Literal["consumer", "producer"]
) -> dict[str, Any]:
    """The ``kafka.client`` settings as librdkafka properties, for one client kind.

    Keys are kafka-python's names (the same file serves both libraries); the configuration
    refuses a key without a translation here when ``client_library`` is confluent-kafka.
    """
    out: dict[str, Any] = {}
    for key, value in kafka.client.items():
        name, roles = CONFLUENT_OPTIONS.get(key, ("", frozenset()))
        if role in roles:
            out[name] = value
    return out


def _client_defaults(role: str) -> Mapping[str, Any]:
    if role == "consumer":
        from kafka import KafkaConsumer  # noqa: PLC0415 - kafka only when a config is loaded

        return cast(Mapping[str, Any], KafkaConsumer.DEFAULT_CONFIG)
    if role == "producer":
        from kafka import KafkaProducer  # noqa: PLC0415 - kafka only when a config is loaded

        return cast(Mapping[str, Any], KafkaProducer.DEFAULT_CONFIG)
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    return cast(Mapping[str, Any], KafkaAdminClient.DEFAULT_CONFIG)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also rejects a key repeated in one mapping."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable: SafeLoader reports it
            continue
        if duplicate:
            context = "while constructing a mapping"
            raise yaml.constructor.ConstructorError(
                context,
                node.start_mark,
                f"duplicate key {key!r}",
                key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Problems:
    def __init__(self, origins: Mapping[str, str]) -> None:
        self.lines: list[str] = []
        self._origins = origins

    def add(self, path: str, message: str) -> None:
        origin = self._origin(path)
        where = f"{path} (from {origin})" if origin else path
        self.lines.append(f"{where}: {message}")

    def _origin(self, path: str) -> str | None:
        for key, flag in self._origins.items():
            if path == key or path.startswith((f"{key}[", f"{key}.")):
                return flag
        return None


def _file_order(line: str) -> int:
    """Problems sorted by section in the order of the reference file (stable otherwise)."""
    head = line.split(".", 1)[0].split(":", 1)[0].split("[", 1)[0].split(" ", 1)[0]
    return _TOP_KEYS.index(head) if head in _TOP_KEYS else len(_TOP_KEYS)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _got(value: Any, *, secret: bool = False) -> str:
    if value is None:
        return "got null"
    if isinstance(value, bool):
        return f"got {str(value).lower()} (a boolean)"
    if secret:
        return f"got {_article(_type_name(value))}"
    if isinstance(value, int | float):
        return f"got {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"got {shown!r} (a string)"
    return f"got {_article(_type_name(value))}"


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def _unknown_key(key: str, allowed: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)"
    return f"unknown key (expected one of: {', '.join(sorted(allowed))})"


def _mapping(problems: _Problems, value: Any, path: str) -> dict[str, Any] | None:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, f"expected a mapping, {_got(value)}")
        return None
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            problems.add(
                _join(path, str(key)), f"keys must be strings, got {_article(_type_name(key))}"
            )
            continue
        out[key] = item
    return out


class _Section:
    """One mapping of the file at ``path``: unknown keys reported, typed getters.

    Each getter returns the value when it is valid and otherwise records the problem and
    returns the default, so that validation goes on and every problem is reported at once.
    Null values count as absent (the default applies).
    """

    def __init__(
        self, problems: _Problems, value: Any, path: str, allowed: Collection[str]
    ) -> None:
        self.problems, self.path = problems, path
        found = _mapping(problems, value, path) or {}
        for key in found:
            if key not in allowed:
                problems.add(_join(path, key), _unknown_key(key, allowed))
        self.values = {k: v for k, v in found.items() if k in allowed and v is not None}

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def where(self, key: str) -> str:
        return _join(self.path, key)

    def integer(self, key: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        if key not in self.values:
            return default
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(self.where(key), f"expected an integer, {_got(value)}")
            return default
        return value if _in_range(self.problems, self.where(key), value, lo, hi) else default

    def number(
        self,
        key: str,
        default: float,
        lo: float | None = None,
        hi: float | None = None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> float:
        if key not in self.values:
            return default
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.add(self.where(key), f"expected a number, {_got(value)}")
            return default
        where = self.where(key)
        ok = _in_range(self.problems, where, float(value), lo, hi, lo_open=lo_open, hi_open=hi_open)
        return float(value) if ok else default

    def text(
        self,
        key: str,
        default: str,
        pattern: re.Pattern[str] | None = None,
        what: str = "a non-empty string",
    ) -> str:
        if key not in self.values:
            return default
        value = self.values[key]
        if (
            not isinstance(value, str)
            or not value
            or (pattern is not None and not pattern.fullmatch(value))
        ):
            self.problems.add(self.where(key), f"expected {what}, {_got(value)}")
            return default
        return value

    def duration(
        self, key: str, default: float, *, integer: bool = False, positive: bool = True
    ) -> float:
        if key not in self.values:
            return default
        value, where = self.values[key], self.where(key)
        seconds = parse_duration(value)
        if seconds is None:
            self.problems.add(
                where, f'expected seconds or a duration like "30m", "1h", "7d", {_got(value)}'
            )
            return default
        if not _in_range(self.problems, where, seconds, 0.0, None, lo_open=positive):
            return default
        if integer and not seconds.is_integer():
            self.problems.add(where, f"must be a whole number of seconds, got {_num(seconds)}")
            return default
        return seconds


def _in_range(
    problems: _Problems,
    path: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> bool:
    bad = (
        not math.isfinite(value)
        or (lo is not None and (value <= lo if lo_open else value < lo))
        or (hi is not None and (value >= hi if hi_open else value > hi))
    )
    if not bad:
        return True
    if lo is not None and hi is not None:
        bounds = f"{'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
        problems.add(path, f"must be in {bounds}, got {_num(value)}")
    elif lo is not None:
        problems.add(path, f"must be {'>' if lo_open else '>='} {_num(lo)}, got {_num(value)}")
    else:
        problems.add(path, f"must be a finite number, got {_num(value)}")
    return False


def parse_duration(value: Any) -> float | None:
    """Seconds from a number of seconds or a string like ``"90s"``, ``"30m"``, ``"1h30m"``.

    Units: s, m, h, d (86400 s), w (7 d). Returns None when ``value`` is not a duration.

    >>> parse_duration("1h30m"), parse_duration(600), parse_duration("7d")
    (5400.0, 600.0, 604800.0)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text.isdigit():
            return float(text)
        if _DURATION_FULL.fullmatch(text):
            return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return None


def _env_ref(problems: _Problems, value: Any, path: str) -> tuple[Any, bool]:
    """Resolve ``{env: VAR}`` to the variable's value; returns (value, came_from_env)."""
    if not isinstance(value, Mapping):
        return value, False
    if set(value) != {"env"} or not isinstance(value["env"], str) or not value["env"]:
        problems.add(path, "a mapping here must be exactly {env: VARIABLE_NAME}")
        return None, True
    name = value["env"]
    if name not in os.environ:
        problems.add(path, f"environment variable '{name}' is not set")
        return None, True
    return os.environ[name], True


def _apply_overrides(
    problems: _Problems,
    data: dict[str, Any],
    overrides: Mapping[str, Any],
    origins: dict[str, str],
) -> None:
    for name, given in overrides.items():
        if name not in OVERRIDES:
            problems.add(f"override {name!r}", _unknown_key(name, OVERRIDES))
            continue
        if given is None:
            continue
        path, flag = OVERRIDES[name]
        section, key = path.split(".")
        value: Any = str(given) if isinstance(given, Path) else given
        if name == "metrics_port" and isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        current = data.get(section)
        if current is None:
            current = {}
        if not isinstance(current, Mapping):
            continue  # the section itself is reported as invalid
        data[section] = {**current, key: value}
        origins[path] = flag


def _build(problems: _Problems, data: Mapping[str, Any]) -> Config:
    top = _Section(problems, data, "", _TOP_KEYS)
    metrics = _Section(problems, top.get("metrics"), "metrics", ("listen_address", "port"))
    storage = _Section(problems, top.get("storage"), "storage", ("data_dir",))
    estimation = _Section(problems, top.get("estimation"), "estimation", ("level",))
    labels = _Section(problems, top.get("labels"), "labels", _LABEL_KEYS)
    sampling = _Section(
        problems, top.get("sampling"), "sampling", ("salt", "max_segments_per_model")
    )
    models = _models(problems, top.get("models"))
    windows = _windows(problems, top.get("windows"))
    reported = {name for name, _ in windows.report}
    for name, model in models.items():
        for window in model.alerts.windows:
            if window not in reported:
                problems.add(
                    f"models.{name}.alerts.windows",
                    f"unknown window {window!r} (reported: {', '.join(sorted(reported))})",
                )
    base = Config()
    return Config(
        kafka=_kafka(problems, top.get("kafka")),
        metrics=MetricsConfig(
            listen_address=metrics.text(
                "listen_address",
                base.metrics.listen_address,
                _HOST_NAME,
                "an IP address or host name",
            ),
            port=metrics.integer("port", base.metrics.port, 1, 65_535),
        ),
        alertmanager=_alertmanager(problems, top.get("alertmanager")),
        data_dir=Path(storage.text("data_dir", str(base.data_dir))),
        windows=windows,
        models=models,
        default_model=_default_model(problems, top.get("default_model"), models),
        level=estimation.number("level", base.level, 0.0, 1.0, lo_open=True, hi_open=True),
        label_deadline_s=labels.duration("deadline_s", base.label_deadline_s),
        salt=sampling.text("salt", base.salt),
        max_segments_per_model=sampling.integer(
            "max_segments_per_model", base.max_segments_per_model, 1
        ),
        label_token_secret=_token_secret(problems, labels),
        label_park_grace_s=labels.duration("park_grace_s", base.label_park_grace_s, positive=False),
        label_park_max=labels.integer("max_parked", base.label_park_max, 0),
    )


def _alertmanager(problems: _Problems, value: Any) -> AlertmanagerConfig:
    """The ``alertmanager`` section: an http(s) base URL without credentials, a timeout."""
    sec = _Section(problems, value, "alertmanager", ("url", "timeout_s"))
    base = AlertmanagerConfig()
    url = base.url
    if "url" in sec:
        raw, where = sec.get("url"), sec.where("url")
        parts = urllib.parse.urlsplit(raw) if isinstance(raw, str) else None
        try:
            port_ok = parts is not None and (parts.port is None or parts.port > 0)
        except ValueError:
            port_ok = False
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            problems.add(
                where, f'expected an http(s) URL like "http://alertmanager:9093", {_got(raw)}'
            )
        elif parts.username is not None or parts.password is not None:
            # never echo the value: it holds a credential
            problems.add(where, "must not contain credentials (user:password@)")
        elif not port_ok:
            problems.add(where, f"port must be in [1, 65535], {_got(raw)}")
        elif parts.query or parts.fragment:
            problems.add(where, f"expected a base URL without query or fragment, {_got(raw)}")
        else:
            url = raw.rstrip("/")
    timeout = sec.duration("timeout_s", base.timeout_s)
    return AlertmanagerConfig(url=url, timeout_s=timeout)


def _token_secret(problems: _Problems, labels: _Section) -> str | None:
    where = labels.where("token_secret")
    secret, _ = _env_ref(problems, labels.get("token_secret"), where)
    if secret is None:
        return None
    if not isinstance(secret, str) or len(secret) < _MIN_TOKEN_SECRET:
        problems.add(
            where,
            f"expected a string of at least {_MIN_TOKEN_SECRET} characters, "
            f"{_got(secret, secret=True)}",
        )
        return None
    return secret


def _kafka(problems: _Problems, value: Any) -> KafkaConfig:
    sec = _Section(problems, value, "kafka", _KAFKA_KEYS)
    base = KafkaConfig()
    topics = _Section(problems, sec.get("topics"), "kafka.topics", _TOPIC_KEYS)
    what = "a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)"
    names = {k: topics.text(k, getattr(base.topics, k), _TOPIC_NAME, what) for k in _TOPIC_KEYS}
    for i, first in enumerate(_TOPIC_KEYS):
        for second in _TOPIC_KEYS[i + 1 :]:
            if names[first] == names[second]:
                problems.add(
                    "kafka.topics",
                    f"{first} and {second} must be different topics, both are {names[first]!r}",
                )
    client = _client(problems, sec.get("client"))
    library = sec.text("client_library", base.client_library, _LIBRARY, " or ".join(LIBRARIES))
    if library == "confluent-kafka":
        for key in client:
            if key not in CONFLUENT_OPTIONS:
                supported = ", ".join(sorted(CONFLUENT_OPTIONS))
                problems.add(
                    f"kafka.client.{key}",
                    f"not supported with kafka.client_library confluent-kafka (supported: "
                    f"{supported}); pass it to librdkafka's settings yourself or use kafka-python",
                )
        if importlib.util.find_spec("confluent_kafka") is None:
            problems.add(
                "kafka.client_library",
                "confluent-kafka is not installed: pip install 'activeaudit-monitor[confluent]'",
            )
    return KafkaConfig(
        bootstrap_servers=_bootstrap(problems, sec.get("bootstrap_servers")),
        group_id=sec.text("group_id", base.group_id),
        topics=TopicsConfig(**names),
        poll_timeout_ms=sec.integer("poll_timeout_ms", base.poll_timeout_ms, 1, 600_000),
        max_poll_records=sec.integer("max_poll_records", base.max_poll_records, 1, 1_000_000),
        client=client,
        client_library=library,
    )


def _bootstrap(problems: _Problems, value: Any) -> tuple[str, ...]:
    path = "kafka.bootstrap_servers"
    if value is None:
        return KafkaConfig().bootstrap_servers
    if isinstance(value, str):
        entries: list[Any] = [part.strip() for part in value.split(",")]
    elif isinstance(value, list | tuple):
        entries = list(value)
    else:
        problems.add(path, f'expected "host:port" or a list of them, {_got(value)}')
        return KafkaConfig().bootstrap_servers
    if not entries:
        problems.add(path, "must name at least one broker")
    good = True
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        host, _, port = entry.rpartition(":") if isinstance(entry, str) else ("", "", "")
        if not host or not _HOST_NAME.fullmatch(host) or not port.isdigit():
            problems.add(where, f'expected "host:port", {_got(entry)}')
            good = False
        elif not 1 <= int(port) <= 65_535:
            problems.add(where, f"port must be in [1, 65535], got {int(port)}")
            good = False
    return tuple(entries) if good and entries else KafkaConfig().bootstrap_servers


def _client(problems: _Problems, value: Any) -> ClientSettings:
    path = "kafka.client"
    found = _mapping(problems, value, path) or {}
    consumer, producer = _client_defaults("consumer"), _client_defaults("producer")
    known = set(consumer) | set(producer)
    out: dict[str, Any] = {}
    secret: set[str] = set()
    for key, raw in found.items():
        where = _join(path, key)
        if key in _RESERVED_CLIENT:
            problems.add(where, f"not allowed here: {_RESERVED_CLIENT[key]}")
            continue
        if key not in known:
            problems.add(where, _unknown_key(key, known - set(_RESERVED_CLIENT)))
            continue
        if raw is None:  # null: kafka-python's default
            continue
        item, from_env = _env_ref(problems, raw, where)
        if from_env:
            secret.add(key)
            if item is None:
                continue
        default = consumer.get(key, producer.get(key))
        if _secret_name(key):
            default = ""  # passwords and tokens are strings
        checked = _client_value(item, default, from_env=from_env)
        if checked is _BAD:
            hidden = from_env or _secret_name(key)
            expected = _expected_client_type(default)
            problems.add(where, f"expected {expected}, {_got(item, secret=hidden)}")
            continue
        out[key] = checked
    return ClientSettings(out, secret)


_BAD = object()


def _client_value(value: Any, default: Any, *, from_env: bool) -> Any:
    """The value coerced to the type of kafka-python's default, or ``_BAD``."""
    if isinstance(default, bool):
        if from_env and isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        return value if isinstance(value, bool) else _BAD
    if isinstance(default, int | float):
        if from_env and isinstance(value, str):
            try:
                return int(value) if isinstance(default, int) else float(value)
            except ValueError:
                return _BAD
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(default, int) and not isinstance(value, int):
            return _BAD
        return value if numeric else _BAD
    if isinstance(default, str):
        return value if isinstance(value, str) else _BAD
    if isinstance(value, list):  # api_version: [2, 8, 0]
        return tuple(value) if all(isinstance(v, int) for v in value) else _BAD
    return value if value is None or isinstance(value, str | int | float) else _BAD


def _expected_client_type(default: Any) -> str:
    if isinstance(default, bool):
        return "a boolean"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    return "a string, number or list of integers"


def _windows(problems: _Problems, value: Any) -> WindowsConfig:
    sec = _Section(problems, value, "windows", ("bucket_s", "report"))
    base = WindowsConfig()
    bucket = sec.duration("bucket_s", base.bucket_s, integer=True)
    report = _report(problems, sec.get("report")) if "report" in sec else base.report
    for name, seconds in report:
        if seconds % int(bucket):
            problems.add(
                f"windows.report.{name}",
                f"must be a whole number of buckets (windows.bucket_s = {_num(bucket)} s), "
                f"got {seconds} s",
            )
    return WindowsConfig(bucket_s=int(bucket), report=report)


def _report(problems: _Problems, value: Any) -> tuple[tuple[str, int], ...]:
    path = "windows.report"
    pairs: list[tuple[Any, Any]]
    if isinstance(value, list | tuple):
        pairs = [(str(v) if isinstance(v, str) else None, v) for v in value]
        pairs = [(name if name else _duration_name(v), v) for name, v in pairs]
    else:
        found = _mapping(problems, value, path)
        if found is None:
            return WindowsConfig().report
        pairs = list(found.items())
    if not pairs:
        problems.add(path, "must list at least one window")
    out: list[tuple[str, int]] = []
    for name, raw in pairs:
        where = _join(path, str(name))
        if not isinstance(name, str) or not _WINDOW_NAME.fullmatch(name):
            problems.add(where, "window names must be letters, digits, '_', '.', ':', '-'")
            continue
        seconds = parse_duration(raw)
        if seconds is None or seconds <= 0 or not seconds.is_integer():
            problems.add(
                where, f'expected a positive whole duration like 3600 or "24h", {_got(raw)}'
            )
            continue
        if any(name == other for other, _ in out):
            problems.add(where, "window listed twice")
            continue
        out.append((name, int(seconds)))
    return tuple(out)


def _duration_name(value: Any) -> str:
    seconds = parse_duration(value)
    if seconds is None or seconds <= 0 or not seconds.is_integer():
        return str(value)
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds) // size}{unit}"
    return f"{int(seconds)}s"


def _models(problems: _Problems, value: Any) -> Mapping[str, ModelConfig]:
    if value is None:
        return Config().models
    found = _mapping(problems, value, "models")
    if found is None:
        return Config().models
    if not found:
        problems.add("models", "must configure at least one model")
    out: dict[str, ModelConfig] = {}
    for name, spec in found.items():
        path = f"models.{name}"
        if not _MODEL_NAME.fullmatch(name):
            problems.add(
                path,
                "model names must start with a letter or digit and use only letters, digits, "
                "'_', '.', ':', '-' (at most 64)",
            )
        out[name] = _model(problems, name, spec, path)
    return out


def _model(problems: _Problems, name: str, spec: Any, path: str) -> ModelConfig:
    sec = _Section(problems, spec, path, _MODEL_KEYS)
    base = ModelConfig(name=name)
    if "alpha" in sec and "beta" in sec:
        problems.add(path, "set alpha or beta, not both (alpha = 1 / (1 + beta^2))")
    alpha = sec.number("alpha", base.alpha, 0.0, 1.0)
    if "beta" in sec and "alpha" not in sec:
        beta = sec.number("beta", math.nan, 0.0)
        if math.isfinite(beta):
            alpha = 1.0 / (1.0 + beta * beta)
    if "labels_per_hour" in sec and "labels_per_day" in sec:
        problems.add(path, "set labels_per_hour or labels_per_day, not both")
    per_hour = sec.number("labels_per_hour", base.labels_per_hour, 0.0, lo_open=True)
    if "labels_per_day" in sec and "labels_per_hour" not in sec:
        per_hour = sec.number("labels_per_day", 24 * per_hour, 0.0, lo_open=True) / 24.0
    alerts, alert_problems = alert_config_from_mapping(sec.get("alerts"), sec.where("alerts"))
    for line in alert_problems:
        where, _, reason = line.partition(": ")
        problems.add(where, reason)
    return ModelConfig(
        name=name,
        alpha=alpha,
        threshold=sec.number("threshold", base.threshold, 0.0, 1.0),
        labels_per_hour=per_hour,
        defensive=sec.number("defensive", base.defensive, 0.0, 1.0, lo_open=True),
        expected_records_per_hour=sec.number(
            "expected_records_per_hour", base.expected_records_per_hour, 0.0, lo_open=True
        ),
        alerts=alerts,
    )


def _default_model(problems: _Problems, value: Any, models: Mapping[str, ModelConfig]) -> str:
    names = list(models)
    if value is None:
        if "default" in models or not names:
            return "default"
        if len(names) == 1:
            return names[0]
        problems.add(
            "default_model",
            f"required when several models are configured and none is named 'default' "
            f"(models: {', '.join(names)})",
        )
        return names[0]
    if not isinstance(value, str) or not value:
        problems.add("default_model", f"expected a model name, {_got(value)}")
        return names[0] if names else "default"
    if names and value not in models:
        close = difflib.get_close_matches(value, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"models: {', '.join(names)}"
        problems.add("default_model", f"{value!r} is not a configured model ({hint})")
    return value
