"""Loading the configuration: YAML -> plain data -> the frozen dataclasses of ``schema``.

Each section has a builder here; the general machinery (key paths, typed getters, did-you-mean)
is ``monitor.config.validate`` and the Kafka client settings ``monitor.config.kafka_client``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import ipaddress
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from monitor.config.kafka_client import CONFLUENT_OPTIONS, LIBRARIES, client_settings
from monitor.config.schema import (
    ESTIMATORS,
    MEASURES,
    AlertConfig,
    AlertmanagerConfig,
    Config,
    KafkaConfig,
    MetricsConfig,
    ModelConfig,
    TopicsConfig,
    WindowsConfig,
)
from monitor.config.validate import (
    Problems,
    Section,
    StrictLoader,
    as_mapping,
    ascii_digits,
    env_ref,
    fmt_number,
    got,
    http_url,
    join_key,
    parse_duration,
    unknown_key,
)
from monitor.errors import ConfigError
from monitor.stats.alerting import SPENDING_RULES
from monitor.stats.falpha import alpha_from_beta

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_WINDOW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,31}")
_TOPIC_NAME = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._-]{1,249}")  # Kafka refuses "." and ".."
_PATH = re.compile(r"[^\x00]+")
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")
#: a host name, an IPv4 address or an IPv6 one, bare or in brackets (bound without them)
_LISTEN_ADDRESS = re.compile(r"[A-Za-z0-9_.-]+|\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?")
_MIN_TOKEN_SECRET = 16
MAX_REPLICATION_FACTOR = 32_767  # a replication factor is a 16-bit field of CreateTopics
_LIBRARY = re.compile("|".join(re.escape(x) for x in LIBRARIES))

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
    "labelstudio",  # read by `monitor queue labelstudio` (monitor.bridges.ls_config), not here
)
_KAFKA_KEYS = (
    "bootstrap_servers",
    "group_id",
    "topics",
    "poll_timeout_ms",
    "max_poll_records",
    "client",
    "client_library",
    "replication_factor",
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
    "recalibrate",
    "segment_maps",
    "keep_calibrated_scores",
    "refresh_records",
    "estimator",
    "alerts",
)
#: the largest rate (labels or records an hour): the fixed-point sums of a bucket stay in int64
MAX_RATE = 1e9
#: the longest label deadline: a year (a request's deadline must stay a time, to year 9999)
MAX_DEADLINE_S = 366 * 86_400.0
_LABEL_KEYS = ("deadline_s", "token_secret", "park_grace_s", "max_parked")

# command-line override -> (key path in the file, flag named in messages)
OVERRIDES: Mapping[str, tuple[str, str]] = {
    "bootstrap_servers": ("kafka.bootstrap_servers", "--bootstrap-servers"),
    "metrics_port": ("metrics.port", "--metrics-port"),
    "metrics_address": ("metrics.listen_address", "--metrics-address"),
    "data_dir": ("storage.data_dir", "--data-dir"),
    "group_instance_id": ("kafka.client.group_instance_id", "--group-instance-id"),
}


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read, validate and return the configuration; ``path=None`` means the built-in defaults.

    Args:
        path: the YAML file (see ``config/monitor.yaml``), or None for defaults only.
        overrides: command-line values that win over the file, by name: ``bootstrap_servers``
            (list or comma-separated string), ``metrics_port``, ``metrics_address``,
            ``data_dir``, ``group_instance_id``. None values are ignored.

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
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        msg = f"{path}: invalid YAML{where}: {exc.problem or exc.context}"
        raise ConfigError(msg) from exc
    except yaml.YAMLError as exc:
        msg = f"{path}: invalid YAML: {exc}"
        raise ConfigError(msg) from exc
    except RecursionError as exc:
        msg = f"{path}: invalid YAML: nested too deeply for a configuration file"
        raise ConfigError(msg) from exc
    return parse_config(data, str(path), overrides)


def parse_config(data: Any, source: str, overrides: Mapping[str, Any] | None = None) -> Config:
    """Validate already-parsed YAML data (``source`` names it in messages) into a ``Config``.

    A null value means "use the default". Every problem is collected before raising.

    Raises:
        ConfigError: ``"{source}: N problem(s)"`` then one ``key.path: reason`` line each.
    """
    origins: dict[str, str] = {}
    problems = Problems(origins)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.add("<top level>", f"expected a mapping of sections, {got(data)}")
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


def _file_order(line: str) -> int:
    """Problems sorted by section in the order of the reference file (stable otherwise)."""
    head = line.split(".", 1)[0].split(":", 1)[0].split("[", 1)[0].split(" ", 1)[0]
    return _TOP_KEYS.index(head) if head in _TOP_KEYS else len(_TOP_KEYS)


def _apply_overrides(
    problems: Problems,
    data: dict[str, Any],
    overrides: Mapping[str, Any],
    origins: dict[str, str],
) -> None:
    for name, given in overrides.items():
        if name not in OVERRIDES:
            problems.add(f"override {name!r}", unknown_key(name, OVERRIDES))
            continue
        if given is None:
            continue
        path, flag = OVERRIDES[name]
        value: Any = str(given) if isinstance(given, Path) else given
        if name == "metrics_port" and isinstance(value, str) and ascii_digits(value.strip()):
            value = int(value)
        if _set_path(data, path.split("."), value):
            origins[path] = flag


def _set_path(data: dict[str, Any], keys: list[str], value: Any) -> bool:
    """Set ``data[k1][k2]...`` to ``value``, copying the mappings on the way.

    False when one of them is not a mapping: the section that reads it reports it as invalid.
    """
    head, *rest = keys
    if not rest:
        data[head] = value
        return True
    current = data.get(head)
    if current is None:
        current = {}
    if not isinstance(current, Mapping):
        return False
    inner = dict(current)
    if not _set_path(inner, rest, value):
        return False
    data[head] = inner
    return True


def _build(problems: Problems, data: Mapping[str, Any]) -> Config:
    top = Section(problems, data, "", _TOP_KEYS)
    metrics = Section(problems, top.get("metrics"), "metrics", ("listen_address", "port"))
    storage = Section(problems, top.get("storage"), "storage", ("data_dir",))
    estimation = Section(problems, top.get("estimation"), "estimation", ("level",))
    labels = Section(problems, top.get("labels"), "labels", _LABEL_KEYS)
    sampling = Section(
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
        _reference_lag(problems, name, model.alerts, windows)
    base = Config()
    return Config(
        kafka=_kafka(problems, top.get("kafka")),
        metrics=MetricsConfig(
            listen_address=_listen_address(
                problems,
                metrics.text(
                    "listen_address",
                    base.metrics.listen_address,
                    _LISTEN_ADDRESS,
                    "an IP address or host name",
                ),
            ),
            port=metrics.integer("port", base.metrics.port, 1, 65_535),
        ),
        alertmanager=_alertmanager(problems, top.get("alertmanager")),
        data_dir=Path(
            storage.text("data_dir", str(base.data_dir), _PATH, "a directory path (no NUL)")
        ),
        windows=windows,
        models=models,
        default_model=_default_model(problems, top.get("default_model"), models),
        level=estimation.number("level", base.level, 0.0, 1.0, lo_open=True, hi_open=True),
        label_deadline_s=labels.duration("deadline_s", base.label_deadline_s, hi=MAX_DEADLINE_S),
        salt=sampling.text("salt", base.salt),
        max_segments_per_model=sampling.integer(
            "max_segments_per_model", base.max_segments_per_model, 1
        ),
        label_token_secret=_token_secret(problems, labels),
        label_park_grace_s=labels.duration("park_grace_s", base.label_park_grace_s, positive=False),
        label_park_max=labels.integer("max_parked", base.label_park_max, 0),
    )


def _alertmanager(problems: Problems, value: Any) -> AlertmanagerConfig:
    """The ``alertmanager`` section: an http(s) base URL without credentials, a timeout."""
    sec = Section(problems, value, "alertmanager", ("url", "timeout_s"))
    base = AlertmanagerConfig()
    url = base.url
    if "url" in sec:
        checked = http_url(
            problems,
            sec.get("url"),
            sec.where("url"),
            "http://alertmanager:9093",
            "must not contain credentials (user:password@)",
        )
        url = checked or url
    timeout = sec.duration("timeout_s", base.timeout_s)
    return AlertmanagerConfig(url=url, timeout_s=timeout)


def _token_secret(problems: Problems, labels: Section) -> str | None:
    where = labels.where("token_secret")
    secret, _ = env_ref(problems, labels.get("token_secret"), where)
    if secret is None:
        return None
    if not isinstance(secret, str) or len(secret) < _MIN_TOKEN_SECRET:
        shown = (
            f"got {len(secret)} characters" if isinstance(secret, str) else got(secret, secret=True)
        )
        problems.add(
            where, f"expected a string of at least {_MIN_TOKEN_SECRET} characters, {shown}"
        )
        return None
    return secret


def _listen_address(problems: Problems, value: str) -> str:
    """``value`` as bound: an IPv6 address without its brackets (refused unless it is one)."""
    if ":" not in value:
        return value
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.IPv6Address(bare)
    except ValueError:
        problems.add("metrics.listen_address", f"expected an IP address or host name, {got(value)}")
    return bare


def _kafka(problems: Problems, value: Any) -> KafkaConfig:
    sec = Section(problems, value, "kafka", _KAFKA_KEYS)
    base = KafkaConfig()
    topics = Section(problems, sec.get("topics"), "kafka.topics", _TOPIC_KEYS)
    what = "a Kafka topic name (letters, digits, '.', '_', '-'; at most 249; not '.' or '..')"
    names = {k: topics.text(k, getattr(base.topics, k), _TOPIC_NAME, what) for k in _TOPIC_KEYS}
    for i, first in enumerate(_TOPIC_KEYS):
        for second in _TOPIC_KEYS[i + 1 :]:
            if names[first] == names[second]:
                problems.add(
                    "kafka.topics",
                    f"{first} and {second} must be different topics, both are {names[first]!r}",
                )
    client = client_settings(problems, sec.get("client"))
    library = sec.text("client_library", base.client_library, _LIBRARY, " or ".join(LIBRARIES))
    if library == "confluent-kafka":
        for key in client:
            if key not in CONFLUENT_OPTIONS:
                supported = ", ".join(sorted(CONFLUENT_OPTIONS))
                problems.add(
                    f"kafka.client.{key}",
                    f"not supported with kafka.client_library confluent-kafka (supported: "
                    f"{supported}); remove it, or set kafka.client_library: kafka-python",
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
        replication_factor=(
            sec.integer("replication_factor", 1, 1, MAX_REPLICATION_FACTOR)
            if "replication_factor" in sec
            else base.replication_factor
        ),
    )


def _bootstrap(problems: Problems, value: Any) -> tuple[str, ...]:
    path = "kafka.bootstrap_servers"
    if value is None:
        return KafkaConfig().bootstrap_servers
    if isinstance(value, str):
        entries: list[Any] = [part.strip() for part in value.split(",")]
    elif isinstance(value, list | tuple):
        entries = list(value)
    else:
        problems.add(path, f'expected "host:port" or a list of them, {got(value)}')
        return KafkaConfig().bootstrap_servers
    if not entries:
        problems.add(path, "must name at least one broker")
    good = True
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        host, _, port = entry.rpartition(":") if isinstance(entry, str) else ("", "", "")
        if not host or not _HOST_NAME.fullmatch(host) or not ascii_digits(port):
            problems.add(where, f'expected "host:port", {got(entry)}')
            good = False
        elif not 1 <= int(port) <= 65_535:
            problems.add(where, f"port must be in [1, 65535], got {int(port)}")
            good = False
    return tuple(entries) if good and entries else KafkaConfig().bootstrap_servers


def _windows(problems: Problems, value: Any) -> WindowsConfig:
    sec = Section(problems, value, "windows", ("bucket_s", "report"))
    base = WindowsConfig()
    bucket = sec.duration("bucket_s", base.bucket_s, integer=True)
    report = _report(problems, sec.get("report")) if "report" in sec else base.report
    for name, seconds in report:
        if seconds % int(bucket):
            problems.add(
                f"windows.report.{name}",
                f"must be a whole number of buckets (windows.bucket_s = {fmt_number(bucket)} s), "
                f"got {seconds} s",
            )
    return WindowsConfig(bucket_s=int(bucket), report=report)


def _report(problems: Problems, value: Any) -> tuple[tuple[str, int], ...]:
    path = "windows.report"
    pairs: list[tuple[Any, Any]]
    if isinstance(value, list | tuple):
        pairs = [(str(v) if isinstance(v, str) else None, v) for v in value]
        pairs = [(name if name else _duration_name(v), v) for name, v in pairs]
    else:
        found = as_mapping(problems, value, path)
        if found is None:
            return WindowsConfig().report
        pairs = list(found.items())
    if not pairs:
        problems.add(path, "must list at least one window")
    out: list[tuple[str, int]] = []
    for name, raw in pairs:
        where = join_key(path, str(name))
        if not isinstance(name, str) or not _WINDOW_NAME.fullmatch(name):
            problems.add(where, "window names must be letters, digits, '_', '.', ':', '-'")
            continue
        seconds = parse_duration(raw)
        if seconds is None or seconds <= 0 or not seconds.is_integer():
            problems.add(
                where, f'expected a positive whole duration like 3600 or "24h", {got(raw)}'
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


def _models(problems: Problems, value: Any) -> Mapping[str, ModelConfig]:
    if value is None:
        return Config().models
    found = as_mapping(problems, value, "models")
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


def _model(problems: Problems, name: str, spec: Any, path: str) -> ModelConfig:
    sec = Section(problems, spec, path, _MODEL_KEYS)
    base = ModelConfig(name=name)
    if "alpha" in sec and "beta" in sec:
        problems.add(path, "set alpha or beta, not both (alpha = 1 / (1 + beta^2))")
    alpha = sec.number("alpha", base.alpha, 0.0, 1.0)
    if "beta" in sec and "alpha" not in sec:
        beta = sec.number("beta", math.nan, 0.0)
        if math.isfinite(beta):
            alpha = alpha_from_beta(beta)
    if "labels_per_hour" in sec and "labels_per_day" in sec:
        problems.add(path, "set labels_per_hour or labels_per_day, not both")
    per_hour = sec.number("labels_per_hour", base.labels_per_hour, 0.0, MAX_RATE, lo_open=True)
    if "labels_per_day" in sec and "labels_per_hour" not in sec:
        per_day = sec.number("labels_per_day", 24 * per_hour, 0.0, 24 * MAX_RATE, lo_open=True)
        per_hour = per_day / 24.0
    alerts = _alerts(problems, sec.get("alerts"), sec.where("alerts"))
    recalibrate = _flag(problems, sec, "recalibrate", base.recalibrate)
    segment_maps = _flag(problems, sec, "segment_maps", base.segment_maps)
    keep_scores = _flag(problems, sec, "keep_calibrated_scores", base.keep_calibrated_scores)
    estimator = sec.text("estimator", base.estimator)
    if estimator not in ESTIMATORS:
        problems.add(
            sec.where("estimator"), f"expected one of {', '.join(ESTIMATORS)}, {got(estimator)}"
        )
        estimator = base.estimator
    return ModelConfig(
        name=name,
        alpha=alpha,
        threshold=sec.number("threshold", base.threshold, 0.0, 1.0),
        labels_per_hour=per_hour,
        defensive=sec.number("defensive", base.defensive, 0.0, 1.0, lo_open=True),
        expected_records_per_hour=sec.number(
            "expected_records_per_hour", base.expected_records_per_hour, 1e-3, MAX_RATE
        ),
        recalibrate=recalibrate,
        segment_maps=segment_maps,
        keep_calibrated_scores=keep_scores,
        refresh_records=sec.integer("refresh_records", base.refresh_records, 0),
        estimator=estimator,
        alerts=alerts,
    )


def _flag(problems: Problems, sec: Section, key: str, default: bool) -> bool:
    """A boolean key of ``sec`` (``default`` when absent or not a boolean, which is reported)."""
    value = sec.get(key) if key in sec else default
    if not isinstance(value, bool):
        problems.add(sec.where(key), f"expected a boolean, {got(value)}")
        return default
    return value


def _alerts(problems: Problems, value: Any, path: str) -> AlertConfig:
    """A model's ``alerts`` block (keys are ``AlertConfig``'s field names)."""
    sec = Section(problems, value, path, [f.name for f in dataclasses.fields(AlertConfig)])
    base = AlertConfig()

    def optional(key: str, default: float | None, **bounds: Any) -> float | None:
        if isinstance(value, Mapping) and key in value and value[key] is None:
            return None  # an explicit null turns the check off
        return sec.number(key, math.nan, **bounds) if key in sec else default

    def choice(key: str, default: str, allowed: tuple[str, ...]) -> str:
        text = sec.text(key, default)
        if text not in allowed:
            problems.add(sec.where(key), f"expected one of {', '.join(allowed)}, {got(text)}")
            return default
        return text

    check_interval = int(sec.duration("check_interval_s", base.check_interval_s, integer=True))
    horizon = int(sec.duration("horizon_s", base.horizon_s, integer=True))
    if horizon < check_interval:
        problems.add(
            sec.where("horizon_s"),
            f"must be >= check_interval_s ({check_interval}), got {horizon}",
        )
    windows = sec.get("windows") or ()
    if not isinstance(windows, list | tuple) or not all(isinstance(w, str) for w in windows):
        problems.add(sec.where("windows"), f"expected a list of window names, {got(windows)}")
        windows = ()
    check_calibration = sec.get("check_calibration")
    if check_calibration is not None and not isinstance(check_calibration, bool):
        problems.add(
            sec.where("check_calibration"), f"expected a boolean, {got(check_calibration)}"
        )
        check_calibration = None
    return AlertConfig(
        measure=choice("measure", base.measure, MEASURES),
        floor=optional("floor", base.floor, lo=0.0, hi=1.0),
        baseline=optional("baseline", base.baseline, lo=0.0, hi=1.0),
        baseline_se=sec.number("baseline_se", base.baseline_se, 0.0, 1.0, hi_open=True),
        reference_lag_s=int(
            sec.duration("reference_lag_s", base.reference_lag_s, integer=True, positive=False)
        ),
        drop_tolerance=sec.number("drop_tolerance", base.drop_tolerance, 0.0, 1.0, hi_open=True),
        likelihood_floor=optional(
            "likelihood_floor", base.likelihood_floor, lo=0.0, hi=1.0, lo_open=True, hi_open=True
        ),
        check_calibration=base.check_calibration
        if check_calibration is None
        else check_calibration,
        min_labels=sec.integer("min_labels", base.min_labels, 2),
        false_alarm_rate=sec.number(
            "false_alarm_rate", base.false_alarm_rate, 0.0, 0.5, lo_open=True
        ),
        spending=choice("spending", base.spending, SPENDING_RULES),
        horizon_s=horizon,
        check_interval_s=check_interval,
        looks_per_window=sec.integer("looks_per_window", base.looks_per_window, 0),
        windows=tuple(windows),
    )


def _reference_lag(
    problems: Problems, model: str, alerts: AlertConfig, windows: WindowsConfig
) -> None:
    """A ``reference_lag_s`` shorter than every alerted window turns f_dropped off everywhere.

    Beside a ``baseline`` it was ignored (the baseline is the reference): refused too.

    The alert compares a window with itself a lag earlier only when the two do not overlap
    (``AlertEvaluator._reference``); a shorter lag left it silently off while it still took its
    share of the false-alarm budget from the other alerts.
    """
    if alerts.reference_lag_s <= 0:
        return
    if alerts.baseline is not None:
        problems.add(
            f"models.{model}.alerts.reference_lag_s",
            f"{alerts.reference_lag_s} s beside baseline {alerts.baseline}: f_dropped compares "
            "with one reference, the baseline or the same window a lag earlier; set one of them",
        )
        return
    alerted = [(n, s) for n, s in windows.report if not alerts.windows or n in alerts.windows]
    if alerted and all(alerts.reference_lag_s < span for _, span in alerted):
        shortest = min(span for _, span in alerted)
        listed = ", ".join(f"{n} {s} s" for n, s in alerted)
        problems.add(
            f"models.{model}.alerts.reference_lag_s",
            f"{alerts.reference_lag_s} s is shorter than every alerted window ({listed}): "
            f"f_dropped would compare overlapping data and never run; use at least {shortest} "
            "or 0 (off)",
        )


def _default_model(problems: Problems, value: Any, models: Mapping[str, ModelConfig]) -> str:
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
        problems.add("default_model", f"expected a model name, {got(value)}")
        return names[0] if names else "default"
    if names and value not in models:
        close = difflib.get_close_matches(value, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"models: {', '.join(names)}"
        problems.add("default_model", f"{value!r} is not a configured model ({hint})")
    return value
