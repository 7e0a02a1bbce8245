# ruff: noqa: E501
"""Configuration: the reference file loads, every bad value is named by its key path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from monitor.cli import build_parser
from monitor.config.kafka_client import (
    confluent_client_options,
    kafka_client_options,
    unused_security_settings,
)
from monitor.config.load import OVERRIDES, load_config, parse_config
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.config.validate import parse_duration
from monitor.daemon import config_overrides
from monitor.errors import ConfigError, MonitorError
from monitor.io.kafka_io import KafkaSink, new_client
from monitor.sim.kafka_broker import encrypt_key, make_tls_files
from tests.conftest import missing_component

REFERENCE = Path(__file__).resolve().parents[2] / "config" / "monitor.yaml"


def problems_of(data: Any, overrides: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml", overrides)
    head, *lines = str(info.value).split("\n")
    assert re.fullmatch(r"test\.yaml: \d+ problems?", head)
    assert int(head.split(": ")[1].split()[0]) == len(lines)
    return [line.strip() for line in lines]


def test_reference_config_loads_and_matches_the_documented_defaults() -> None:
    config = load_config(REFERENCE)
    assert config == Config()
    assert config.kafka.bootstrap_servers == ("127.0.0.1:9092",)
    assert config.default_model == "default"
    assert set(config.models) == {"default"}
    assert config.windows.report == (("1h", 3600), ("24h", 86_400), ("7d", 604_800))


def test_reference_config_mentions_every_key_the_loader_accepts() -> None:
    from monitor.config import load as module

    text = REFERENCE.read_text()
    keys = (
        *module._TOP_KEYS,
        *module._KAFKA_KEYS,
        *module._TOPIC_KEYS,
        *module._MODEL_KEYS,
        *module._LABEL_KEYS,
        "listen_address",
        "port",
        "data_dir",
        "bucket_s",
        "report",
        "level",
        "salt",
        "max_segments_per_model",
    )
    missing = [k for k in keys if not re.search(rf"\b{k}:", text)]
    assert missing == []


def test_no_file_gives_the_defaults() -> None:
    assert load_config(None) == Config()
    assert parse_config(None, "empty") == Config()


def test_full_custom_config(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        """
kafka:
  bootstrap_servers: "10.0.0.1:9092, broker-2:9093"
  topics: {scored: s, requests: r, labels: l, deadletter: d}
  replication_factor: 3
windows:
  bucket_s: 30m
  report: ["1h", "6h", "2d"]
labels: {deadline_s: 2d, park_grace_s: 0}
models:
  fraud: {beta: 2, labels_per_day: 480, threshold: 0.7, defensive: 1}
  churn: {alpha: 1, estimator: model_assisted}
default_model: fraud
"""
    )
    config = load_config(path)
    assert config.kafka.bootstrap_servers == ("10.0.0.1:9092", "broker-2:9093")
    assert config.kafka.topics.labels == "l"
    assert config.kafka.replication_factor == 3
    assert config.windows.bucket_s == 1800
    assert config.windows.report == (("1h", 3600), ("6h", 21_600), ("2d", 172_800))
    assert config.label_deadline_s == 172_800.0
    assert config.label_park_grace_s == 0.0
    fraud = config.models["fraud"]
    assert fraud.alpha == pytest.approx(0.2)  # 1 / (1 + 2^2)
    assert fraud.labels_per_hour == pytest.approx(20.0)
    assert fraud.name == "fraud"
    assert config.models["churn"].alpha == 1.0
    assert config.models["churn"].estimator == "model_assisted"
    assert fraud.estimator == "ratio"
    assert config.default_model == "fraud"


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"models": {"fraud": {"alpha": 1.5}}}, r"^models\.fraud\.alpha: must be in \[0, 1\], got 1\.5$"),
        ({"models": {"m": {"alpha": -0.1}}}, r"^models\.m\.alpha: must be in \[0, 1\], got -0\.1$"),
        ({"models": {"m": {"beta": -1}}}, r"^models\.m\.beta: must be >= 0, got -1$"),
        ({"models": {"m": {"alpha": 0.5, "beta": 1}}}, r"^models\.m: set alpha or beta, not both"),
        ({"models": {"m": {"labels_per_hour": -5}}}, r"^models\.m\.labels_per_hour: must be in \(0, 1000000000\], got -5$"),
        ({"models": {"m": {"labels_per_hour": 1e12}}}, r"^models\.m\.labels_per_hour: must be in \(0, 1000000000\], got 1000000000000$"),
        ({"models": {"m": {"labels_per_day": 0}}}, r"^models\.m\.labels_per_day: must be in \(0, 24000000000\], got 0$"),
        ({"models": {"m": {"labels_per_day": 5, "labels_per_hour": 1}}}, r"^models\.m: set labels_per_hour or labels_per_day"),
        ({"models": {"m": {"threshold": 1.01}}}, r"^models\.m\.threshold: must be in \[0, 1\], got 1\.01$"),
        ({"models": {"m": {"defensive": 0}}}, r"^models\.m\.defensive: must be in \(0, 1\], got 0$"),
        ({"models": {"m": {"expected_records_per_hour": 0}}}, r"^models\.m\.expected_records_per_hour: must be in \[0\.001, 1000000000\]"),
        ({"models": {"m": {"expected_records_per_hour": 1e-300}}}, r"^models\.m\.expected_records_per_hour: must be in \[0\.001,"),
        ({"models": {"m": {"estimator": "greg"}}}, r"^models\.m\.estimator: expected one of ratio, model_assisted, got 'greg' \(a string\)$"),
        ({"models": {"m": {"estimator": 1}}}, r"^models\.m\.estimator: expected a non-empty string, got 1"),
        ({"models": {"m": {"alpha": ".5"}}}, r"^models\.m\.alpha: expected a number, got '\.5' \(a string\)$"),
        ({"models": {"m": {"alpha": True}}}, r"^models\.m\.alpha: expected a number, got true \(a boolean\)$"),
        ({"models": {"m": {"alpha": float("nan")}}}, r"^models\.m\.alpha: must be in \[0, 1\], got nan$"),
        ({"models": {"m": {"aplha": 0.5}}}, r"^models\.m\.aplha: unknown key \(did you mean 'alpha'\?\)$"),
        ({"models": {"bad name": {}}}, r"^models\.bad name: model names must start with"),
        ({"models": {}}, r"^models: must configure at least one model$"),
        ({"models": ["a"]}, r"^models: expected a mapping, got a list$"),
        ({"models": {"a": {}, "b": {}}}, r"^default_model: required when several models"),
        ({"default_model": "defualt"}, r"^default_model: 'defualt' is not a configured model \(did you mean 'default'\?\)$"),
        ({"sampling": {"budgt": 3}}, r"^sampling\.budgt: unknown key"),
        ({"sampling": {"salt": ""}}, r"^sampling\.salt: expected a non-empty string"),
        ({"sampling": {"max_segments_per_model": 0}}, r"^sampling\.max_segments_per_model: must be >= 1, got 0$"),
        ({"metrics": {"port": 70000}}, r"^metrics\.port: must be in \[1, 65535\], got 70000$"),
        ({"metrics": {"port": 0}}, r"^metrics\.port: must be in \[1, 65535\], got 0$"),
        ({"metrics": {"port": "9464"}}, r"^metrics\.port: expected an integer, got '9464' \(a string\)$"),
        ({"metrics": {"listen_address": "not an address!"}}, r"^metrics\.listen_address: expected an IP address or host name"),
        ({"metrcs": {}}, r"^metrcs: unknown key \(did you mean 'metrics'\?\)$"),
        ({"windows": {"bucket_s": 7 * 60}}, r"^windows\.report\.1h: must be a whole number of buckets \(windows\.bucket_s = 420 s\), got 3600 s$"),
        ({"windows": {"bucket_s": "2h", "report": {"1h": 3600}}}, r"^windows\.report\.1h: must be a whole number of buckets"),
        ({"windows": {"bucket_s": -60}}, r"^windows\.bucket_s: must be > 0, got -60$"),
        ({"windows": {"bucket_s": 0.5}}, r"^windows\.bucket_s: must be a whole number of seconds, got 0\.5$"),
        ({"windows": {"bucket_s": "1 fortnight"}}, r'^windows\.bucket_s: expected seconds or a duration like "30m"'),
        ({"windows": {"report": {}}}, r"^windows\.report: must list at least one window$"),
        ({"windows": {"report": {"1h": "zz"}}}, r"^windows\.report\.1h: expected a positive whole duration"),
        ({"estimation": {"level": 1.0}}, r"^estimation\.level: must be in \(0, 1\), got 1$"),
        ({"labels": {"deadline_s": 0}}, r"^labels\.deadline_s: must be in \(0, 31622400\], got 0$"),
        ({"labels": {"deadline_s": 1e19}}, r"^labels\.deadline_s: must be in \(0, 31622400\], got 1e\+19$"),
        ({"kafka": {"client": {"compression_type": "zzz"}}}, r"^kafka\.client\.compression_type: expected one of none, gzip, snappy, lz4, zstd, got 'zzz' \(a string\)$"),
        ({"labels": {"max_parked": -1}}, r"^labels\.max_parked: must be >= 0, got -1$"),
        ({"labels": {"token_secret": "short"}}, r"^labels\.token_secret: expected a string of at least 16 characters, got 5 characters$"),
        ({"kafka": {"bootstrap_servers": "host"}}, r'^kafka\.bootstrap_servers\[0\]: expected "host:port", got \'host\''),
        ({"kafka": {"bootstrap_servers": ["h:1", "h:99999"]}}, r"^kafka\.bootstrap_servers\[1\]: port must be in \[1, 65535\], got 99999$"),
        ({"kafka": {"bootstrap_servers": 9092}}, r'^kafka\.bootstrap_servers: expected "host:port" or a list of them, got 9092$'),
        ({"kafka": {"group_id": 5}}, r"^kafka\.group_id: expected a non-empty string, got 5$"),
        ({"kafka": {"poll_timeout_ms": 0}}, r"^kafka\.poll_timeout_ms: must be in \[1, 600000\], got 0$"),
        ({"kafka": {"max_poll_records": 2.5}}, r"^kafka\.max_poll_records: expected an integer, got 2\.5$"),
        ({"kafka": {"replication_factor": 0}}, r"^kafka\.replication_factor: must be in \[1, 32767\], got 0$"),
        ({"kafka": {"replication_factor": "3"}}, r"^kafka\.replication_factor: expected an integer, got '3'"),
        ({"kafka": {"topics": {"scored": "a b"}}}, r"^kafka\.topics\.scored: expected a Kafka topic name"),
        ({"kafka": {"topics": {"labels": "predictions"}}}, r"^kafka\.topics: scored and labels must be different topics, both are 'predictions'$"),
        ({"kafka": {"topic": {}}}, r"^kafka\.topic: unknown key \(did you mean 'topics'\?\)$"),
        ({"kafka": {"client": {"sasl_plain_pasword": "x"}}}, r"^kafka\.client\.sasl_plain_pasword: unknown key \(did you mean 'sasl_plain_password'\?\)$"),
        ({"kafka": {"client": {"group_id": "g"}}}, r"^kafka\.client\.group_id: not allowed here: set it with kafka\.group_id$"),
        ({"kafka": {"client": {"enable_auto_commit": True}}}, r"^kafka\.client\.enable_auto_commit: not allowed here"),
        ({"models": {"m": {"labels_per_hour": "1e3"}}}, r"^models\.m\.labels_per_hour: expected a number, got '1e3' \(a string\) \(YAML reads 1e3 as text: write 1000 or 1\.0e\+03\)$"),
        ({"kafka": {"client": {"acks": 1}}}, r"^kafka\.client\.acks: not allowed here: the monitor's producer waits for every in-sync replica"),
        ({"kafka": {"client": {"enable_idempotence": False}}}, r"^kafka\.client\.enable_idempotence: not allowed here: the monitor's producer is idempotent"),
        ({"kafka": {"client": {"session_timeout_ms": "2s"}}}, r"^kafka\.client\.session_timeout_ms: expected an integer, got '2s'"),
        ({"kafka": {"client": {"ssl_check_hostname": "yes"}}}, r"^kafka\.client\.ssl_check_hostname: expected a boolean"),
        ({"kafka": {"client": {"sasl_plain_password": {"env": "X", "default": "y"}}}}, r"^kafka\.client\.sasl_plain_password: a mapping here must be exactly \{env: VARIABLE_NAME\}$"),
        ({"kafka": "127.0.0.1:9092"}, r"^kafka: expected a mapping, got '127\.0\.0\.1:9092' \(a string\)$"),
        ([1, 2], r"^<top level>: expected a mapping of sections, got a list$"),
        ({1: "x"}, r"^1: keys must be strings, got an integer$"),
        ({"metrics": {"port": 10**400}}, r"^metrics\.port: must be in \[1, 65535\], got an integer of 401 digits$"),
        ({"models": {"m": {"alpha": -(10**400)}}}, r"^models\.m\.alpha: must be in \[0, 1\], got an integer of 401 digits$"),
        ({"labels": {"deadline_s": "\u00b2"}}, r'^labels\.deadline_s: expected seconds or a duration like "30m"'),
        ({"labels": {"deadline_s": "\u0663h"}}, r'^labels\.deadline_s: expected seconds or a duration like "30m"'),
        ({"kafka": {"bootstrap_servers": "h:\u0663"}}, r'^kafka\.bootstrap_servers\[0\]: expected "host:port"'),
        ({"kafka": {"topics": {"scored": ".."}}}, r"^kafka\.topics\.scored: expected a Kafka topic name .*not '\.' or '\.\.'"),
        ({"storage": {"data_dir": "a\x00b"}}, r"^storage\.data_dir: expected a directory path \(no NUL\)"),
        ({"models": {"m": {"alerts": {"reference_lag_s": "30m"}}}}, r"^models\.m\.alerts\.reference_lag_s: 1800 s is shorter than every alerted window \(1h 3600 s, 24h 86400 s, 7d 604800 s\): .* use at least 3600 or 0"),
        ({"models": {"m": {"alerts": {"reference_lag_s": "2h", "windows": ["24h"]}}}}, r"^models\.m\.alerts\.reference_lag_s: 7200 s is shorter than every alerted window \(24h 86400 s\)"),
        ({"models": {"m": {"alerts": {"reference_lag_s": "1d", "baseline": 0.8}}}}, r"^models\.m\.alerts\.reference_lag_s: 86400 s beside baseline 0\.8: f_dropped compares with one reference, .*; set one of them$"),
    ],
)  # fmt: skip
def test_each_bad_value_is_named_by_its_key_path(data: Any, pattern: str) -> None:
    problems = problems_of(data)
    assert any(re.search(pattern, p) for p in problems), problems


def test_all_problems_are_reported_at_once() -> None:
    problems = problems_of(
        {
            "kafka": {"client": {"sasl_plain_pasword": "x"}},
            "metrics": {"port": -1},
            "sampling": {"budgt": 3},
            "windows": {"bucket_s": 7 * 60},
            "models": {"fraud": {"alpha": 1.5, "labels_per_hour": -1}},
            "default_model": "nope",
        }
    )
    heads = [p.split(":")[0] for p in problems]
    # 1h and 24h are not multiples of 420 s; 7d (1440 buckets) is
    assert heads == [
        "kafka.client.sasl_plain_pasword",
        "metrics.port",
        "windows.report.1h",
        "windows.report.24h",
        "sampling.budgt",
        "default_model",
        "models.fraud.alpha",
        "models.fraud.labels_per_hour",
    ]


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read the configuration file"):
        load_config(missing)
    with pytest.raises(ConfigError, match=r"cannot read the configuration file"):
        load_config(tmp_path)  # a directory
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kafka: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"bin\.yaml: not UTF-8 text"):
        load_config(binary)


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kafka:\n  group_id: a\n  topics: [unclosed\nmetrics: {}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML at line \d+, column \d+"):
        load_config(path)
    path.write_text("kafka:\n  group_id: a\n group: b\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line 3"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("storage: {data_dir: 2024-02-30}\n", r"line 1, column 21: cannot read '2024-02-30' as a YAML timestamp \(day is out of range for month\); quote it"),
        ("sampling:\n  salt: 2001-12-14 25:00:00\n", r"line 2, column 9: cannot read '2001-12-14 25:00:00' as a YAML timestamp"),
        ("metrics: {port: !!int abc}\n", r"line 1, column 17: cannot read 'abc' as a YAML int"),
        ("sampling: {salt: !!bool maybe}\n", r"cannot read 'maybe' as a YAML bool"),
        ("sampling: {salt: !!timestamp abc}\n", r"cannot read 'abc' as a YAML timestamp"),
        (f"sampling: {{salt: {'9' * 5000}}}\n", r"cannot read '9{37}\.\.\.' as a YAML int \(Exceeds the limit \(4300 digits\) for integer string conversion: value has 5000 digits\); quote"),
        ("sampling: {salt: " + "[" * 5000 + "]" * 5000 + "}\n", r"invalid YAML: nested too deeply for a configuration file$"),
    ],
)  # fmt: skip
def test_a_value_yaml_cannot_read_is_a_yaml_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"odd\.yaml: invalid YAML") as info:
        load_config(path)
    assert re.search(message, str(info.value)), str(info.value)
    assert "set_int_max_str_digits" not in str(info.value)


def test_duplicate_key_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("metrics:\n  port: 1\n  port: 2\n")
    with pytest.raises(
        ConfigError, match=r"invalid YAML at line 3, column 3: duplicate key 'port'"
    ):
        load_config(path)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert load_config(path) == Config()


def test_null_values_take_the_default() -> None:
    config = parse_config({"metrics": {"port": None}, "kafka": None}, "t")
    assert config.metrics.port == 9464
    assert config.kafka == KafkaConfig()


def test_null_client_setting_keeps_the_kafka_python_default() -> None:
    config = parse_config(
        {"kafka": {"client": {"ssl_cafile": None, "security_protocol": None}}}, "t"
    )
    assert dict(config.kafka.client) == {}


def test_single_model_is_the_default_model() -> None:
    config = parse_config({"models": {"fraud": {}}}, "t")
    assert config.default_model == "fraud"


def test_command_line_overrides_win_and_are_validated(tmp_path: Path) -> None:
    config = load_config(
        REFERENCE,
        {
            "bootstrap_servers": "127.0.0.1:19092,127.0.0.1:19093",
            "metrics_port": "19464",
            "metrics_address": "0.0.0.0",
            "data_dir": tmp_path,
        },
    )
    assert config.kafka.bootstrap_servers == ("127.0.0.1:19092", "127.0.0.1:19093")
    assert config.metrics.port == 19_464
    assert config.metrics.listen_address == "0.0.0.0"
    assert config.data_dir == tmp_path
    assert load_config(REFERENCE, {"metrics_port": None}) == Config()
    problems = problems_of({}, {"metrics_port": 0, "bootstrap_servers": "nohost"})
    assert "kafka.bootstrap_servers[0] (from --bootstrap-servers): " in problems[0]
    assert problems[1] == "metrics.port (from --metrics-port): must be in [1, 65535], got 0"
    problems = problems_of({}, {"metric_port": 1})
    assert problems == ["override 'metric_port': unknown key (did you mean 'metrics_port'?)"]
    # each override is a flag of monitor run
    argv = ["run", "--config", str(REFERENCE), "--metrics-address", "0.0.0.0"]
    run = build_parser().parse_args([*argv, "--metrics-port", "19464", "--data-dir", "d"])
    flags = config_overrides(run)
    assert set(flags) == set(OVERRIDES)
    assert load_config(REFERENCE, flags).metrics.listen_address == "0.0.0.0"
    # and of monitor check-config, which reads the data directory `run` would
    check = build_parser().parse_args(["check-config", *argv[1:], "--data-dir", "d"])
    assert config_overrides(check) == {**flags, "metrics_port": None}


@pytest.mark.parametrize(
    ("given", "bound"), [("::1", "::1"), ("[::1]", "::1"), ("::", "::"), ("fe80::1", "fe80::1")]
)
def test_an_ipv6_listen_address_is_bound_without_brackets(given: str, bound: str) -> None:
    """ "::" was refused and "[::1]" passed the check but could not be bound (its brackets)."""
    config = load_config(REFERENCE, {"metrics_address": given})
    assert config.metrics.listen_address == bound
    for wrong in ("[::1", "::1]", "1::2::3", "[]", "a:b"):
        assert problems_of({"metrics": {"listen_address": wrong}}) == [
            f"metrics.listen_address: expected an IP address or host name, got {wrong!r} (a string)"
        ]


def test_group_instance_id_flag_sets_the_client_key_and_keeps_the_others() -> None:
    data = {"kafka": {"client": {"session_timeout_ms": 20_000}}}
    config = parse_config(data, "t", {"group_instance_id": "monitor-0"})
    assert config.kafka.client == {"session_timeout_ms": 20_000, "group_instance_id": "monitor-0"}
    assert data == {"kafka": {"client": {"session_timeout_ms": 20_000}}}  # the input is not changed
    assert parse_config({}, "t", {"group_instance_id": "m-1"}).kafka.client == {
        "group_instance_id": "m-1"
    }
    # a client section that is not a mapping is reported as such, not overwritten by the flag
    problems = problems_of({"kafka": {"client": "x"}}, {"group_instance_id": "monitor-0"})
    assert len(problems) == 1
    assert problems[0].startswith("kafka.client: ")


def test_secrets_come_from_the_environment_and_never_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "hunter2-kafka")
    monkeypatch.setenv("TEST_TOKEN_SECRET", "s3cret-s3cret-s3cret")
    config = parse_config(
        {
            "kafka": {
                "client": {
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "PLAIN",
                    "sasl_plain_username": "monitor",
                    "sasl_plain_password": {"env": "TEST_KAFKA_PASSWORD"},
                    "ssl_password": "inline-key-pass",
                    "session_timeout_ms": 2000,
                    "linger_ms": 5,
                    "api_version": [2, 8, 0],
                }
            },
            "labels": {"token_secret": {"env": "TEST_TOKEN_SECRET"}},
        },
        "t",
    )
    assert config.kafka.client["sasl_plain_password"] == "hunter2-kafka"
    assert config.kafka.client["api_version"] == (2, 8, 0)
    assert config.label_token_secret == "s3cret-s3cret-s3cret"
    for shown in (repr(config), str(config), repr(config.kafka), repr(config.kafka.client)):
        assert "hunter2" not in shown
        assert "s3cret" not in shown
        assert "inline-key-pass" not in shown
    assert "<redacted>" in repr(config.kafka.client)
    assert "'monitor'" in repr(config.kafka.client)  # non-secret values stay readable
    consumer = kafka_client_options(config.kafka, "consumer")
    producer = kafka_client_options(config.kafka, "producer")
    assert consumer["session_timeout_ms"] == 2000 and "linger_ms" not in consumer
    assert producer["linger_ms"] == 5 and "session_timeout_ms" not in producer
    assert producer["sasl_plain_password"] == "hunter2-kafka"


def test_missing_environment_variable_names_key_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TEST_ABSENT_VAR", raising=False)
    problems = problems_of(
        {
            "kafka": {"client": {"sasl_plain_password": {"env": "TEST_ABSENT_VAR"}}},
            "labels": {"token_secret": {"env": "TEST_ABSENT_VAR"}},
        }
    )
    assert problems == [
        "kafka.client.sasl_plain_password: environment variable 'TEST_ABSENT_VAR' is not set",
        "labels.token_secret: environment variable 'TEST_ABSENT_VAR' is not set",
    ]


def test_bad_secret_value_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TIMEOUT", "soon-hunter2")
    problems = problems_of(
        {
            "kafka": {
                "client": {"request_timeout_ms": {"env": "TEST_TIMEOUT"}, "ssl_password": 12345}
            }
        }
    )
    assert problems == [
        "kafka.client.request_timeout_ms: expected an integer, got a string",
        "kafka.client.ssl_password: expected a string, got an integer",
    ]
    assert "hunter2" not in "\n".join(problems) and "12345" not in "\n".join(problems)


def test_environment_values_are_coerced_to_the_setting_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_TIMEOUT_MS", "2500")
    monkeypatch.setenv("TEST_CHECK", "false")
    config = parse_config(
        {
            "kafka": {
                "client": {
                    "request_timeout_ms": {"env": "TEST_TIMEOUT_MS"},
                    "ssl_check_hostname": {"env": "TEST_CHECK"},
                }
            }
        },
        "t",
    )
    assert config.kafka.client["request_timeout_ms"] == 2500
    assert config.kafka.client["ssl_check_hostname"] is False


def test_tls_files_that_cannot_be_read_stop_the_start_naming_key_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both clients read them only when connecting: kafka-python failed every connection and
    the daemon retried "Unable to bootstrap" forever; librdkafka did not start ("ssl.ca.location
    failed: ... BIO lib"), retried the same way. Neither named the file."""
    not_a_cert = tmp_path / "ca.pem"
    not_a_cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("TEST_KEY_PATH", str(tmp_path / "from-env.key"))
    for protocol in ("SASL_SSL", "SSL", "ssl"):
        client = {
            "security_protocol": protocol,
            "ssl_cafile": str(not_a_cert),
            "ssl_certfile": str(tmp_path),
            "ssl_keyfile": {"env": "TEST_KEY_PATH"},
            "ssl_crlfile": str(tmp_path / "missing.crl"),
        }
        assert problems_of({"kafka": {"client": client}}) == [
            f"kafka.client.ssl_cafile: {str(not_a_cert)!r} holds no PEM certificate; it must be "
            "the CA certificate (PEM) that signed the brokers' certificates",
            f"kafka.client.ssl_certfile: cannot read {str(tmp_path)!r}: Is a directory; it must be "
            "this client's certificate (PEM)",
            "kafka.client.ssl_keyfile: cannot read the file named in the environment: No such file "
            "or directory; it must be this client's private key (PEM)",
            f"kafka.client.ssl_crlfile: cannot read {str(tmp_path / 'missing.crl')!r}: No such "
            "file or directory; it must be a certificate revocation list (PEM)",
        ]


@pytest.fixture(scope="module")
def client_tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client certificate and key (``make_tls_files``), the key encrypted, another CA's key."""
    tls = tmp_path_factory.mktemp("tls")
    try:
        make_tls_files(tls)
        make_tls_files(tls / "other")
        encrypt_key(tls / "client.key", tls / "encrypted.key", "right-password")
    except MonitorError as exc:
        missing_component(str(exc))
    return tls


def test_a_client_key_that_does_not_load_stops_the_start_naming_the_setting(
    client_tls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both clients load the certificate and key only when they connect, and say "PEM lib":
    kafka-python failed every connection and the daemon retried it as a broker outage forever
    (a wrong ssl_password, measured on Apache Kafka 4.1.1); librdkafka refused to start.
    Neither named the setting to fix."""
    cert, key, encrypted = (
        str(client_tls / x) for x in ("client.crt", "client.key", "encrypted.key")
    )
    monkeypatch.setenv("TEST_KEY_PASSWORD", "right-password")

    def client(**settings: Any) -> dict[str, Any]:
        return {"kafka": {"client": {"security_protocol": "SSL", "ssl_certfile": cert, **settings}}}

    for good in (
        client(ssl_keyfile=key),
        client(ssl_keyfile=encrypted, ssl_password={"env": "TEST_KEY_PASSWORD"}),
    ):
        assert parse_config(good, "t").kafka.client["ssl_certfile"] == cert
    for bad, problem in (
        (
            client(ssl_keyfile=encrypted, ssl_password="wrong-password"),
            f"kafka.client.ssl_keyfile: {encrypted!r} holds no PEM private key that "
            "kafka.client.ssl_password decrypts",
        ),
        (
            client(ssl_keyfile=encrypted),
            f"kafka.client.ssl_keyfile: {encrypted!r} holds no unencrypted PEM private key (an "
            "encrypted one needs ssl_password)",
        ),
        (
            client(ssl_keyfile=str(client_tls / "other" / "client.key")),
            f"kafka.client.ssl_keyfile: {str(client_tls / 'other' / 'client.key')!r} is not the "
            "private key of the certificate in kafka.client.ssl_certfile",
        ),
        (
            client(),  # the key in ssl_certfile, kafka-python's rule without ssl_keyfile
            f"kafka.client.ssl_certfile: {cert!r} holds no unencrypted PEM private key (an "
            "encrypted one needs ssl_password)",
        ),
        (
            client(ssl_certfile=key, ssl_keyfile=key),
            f"kafka.client.ssl_certfile: {key!r} holds no PEM certificate; it must be this "
            "client's certificate (PEM)",
        ),
    ):
        assert problems_of(bad) == [problem]


@pytest.mark.parametrize("protocol", [None, "PLAINTEXT", "SASL_PLAINTEXT"])
def test_tls_files_are_not_read_without_tls(protocol: str | None, tmp_path: Path) -> None:
    """Neither client reads them then: a leftover path does not stop the start."""
    client = {"security_protocol": protocol, "ssl_cafile": str(tmp_path / "missing.pem")}
    config = parse_config({"kafka": {"client": client}}, "t")
    assert config.kafka.client["ssl_cafile"] == str(tmp_path / "missing.pem")


@pytest.mark.parametrize(
    ("client", "unused"),
    [
        ({"ssl_cafile": "/ca.pem", "sasl_mechanism": "PLAIN"}, "ssl_cafile, sasl_mechanism"),
        ({"security_protocol": "sasl_plaintext", "ssl_cafile": "/ca.pem"}, "ssl_cafile"),
        ({"security_protocol": "SSL", "sasl_plain_username": "u"}, "sasl_plain_username"),
        (
            {
                "security_protocol": "SASL_SSL",
                "ssl_check_hostname": False,
                "sasl_mechanism": "PLAIN",
            },
            None,
        ),
        ({"security_protocol": "SSL", "ssl_check_hostname": False}, None),
        ({"client_id": "m"}, None),
    ],
)
def test_tls_and_sasl_keys_the_protocol_ignores_are_named(
    client: dict[str, Any], unused: str | None
) -> None:
    """Both clients connect without them (PLAINTEXT when unset) and neither says so."""
    found = unused_security_settings(parse_config({"kafka": {"client": client}}, "t").kafka.client)
    if unused is None:
        assert found is None
    else:
        protocol = str(client.get("security_protocol", "PLAINTEXT")).upper()
        assert found is not None
        assert found.startswith(f"kafka.client sets {unused} but security_protocol is {protocol}")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(3600, 3600.0), ("90s", 90.0), ("30m", 1800.0), ("1h", 3600.0), ("24h", 86_400.0),
     ("7d", 604_800.0), ("1w", 604_800.0), ("1h30m", 5400.0), ("0.5h", 1800.0), ("600", 600.0)],
)  # fmt: skip
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "-1h", "1h-", True, None, [1]])
def test_parse_duration_rejects(text: Any) -> None:
    assert parse_duration(text) is None


def test_alerts_block_is_parsed_per_model() -> None:
    config = parse_config(
        {
            "models": {
                "default": {"alerts": {"floor": 0.6, "measure": "recall", "windows": ["24h"]}}
            }
        },
        "x.yaml",
    )
    alerts = config.models["default"].alerts
    assert (alerts.floor, alerts.measure, alerts.windows) == (0.6, "recall", ("24h",))


def test_alerts_block_problems_name_their_key_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"models": {"m": {"alerts": {"floor": 1.5, "flor": 0.5}}}},
            "x.yaml",
        )
    text = str(info.value)
    assert "models.m.alerts.floor: must be in [0, 1], got 1.5" in text
    assert "models.m.alerts.flor: unknown key" in text
    with pytest.raises(ConfigError, match=r"models\.m\.alerts\.windows: unknown window '2h'"):
        parse_config({"models": {"m": {"alerts": {"windows": ["2h"]}}}}, "x.yaml")


def test_confluent_client_gets_librdkafka_names_per_client_kind() -> None:
    config = parse_config(
        {
            "kafka": {
                "client_library": "confluent-kafka",
                "client": {
                    "security_protocol": "SASL_SSL",
                    "sasl_plain_password": "pw",
                    "session_timeout_ms": 7000,
                    "linger_ms": 20,
                },
            }
        },
        "test.yaml",
    )
    assert config.kafka.client_library == "confluent-kafka"
    assert confluent_client_options(config.kafka, "consumer") == {
        "security.protocol": "SASL_SSL",
        "sasl.password": "pw",
        "session.timeout.ms": 7000,
    }
    assert confluent_client_options(config.kafka, "producer") == {
        "security.protocol": "SASL_SSL",
        "sasl.password": "pw",
        "linger.ms": 20,
    }


def test_confluent_client_reads_the_revocation_list_the_readme_lists(tmp_path: Path) -> None:
    """``ssl_crlfile`` was refused with confluent-kafka, the hint naming no way to pass it."""
    crl = tmp_path / "brokers.crl"
    crl.write_text("-----BEGIN X509 CRL-----\n-----END X509 CRL-----\n")
    client = {"security_protocol": "SSL", "ssl_crlfile": str(crl)}
    data = {"kafka": {"client_library": "confluent-kafka", "client": client}}
    config = parse_config(data, "test.yaml")
    for kind in ("consumer", "producer"):
        assert confluent_client_options(config.kafka, kind)["ssl.crl.location"] == str(crl)


def test_confluent_client_refuses_settings_it_cannot_translate() -> None:
    problems = problems_of(
        {
            "kafka": {
                "client_library": "confluent-kafka",
                "client": {"metadata_max_age_ms": 5},
            }
        }
    )
    assert len(problems) == 1
    assert problems[0].startswith(
        "kafka.client.metadata_max_age_ms: not supported with kafka.client_library "
        "confluent-kafka (supported: client_id, "
    )
    assert problems[0].endswith("; remove it, or set kafka.client_library: kafka-python")
    assert problems_of({"kafka": {"client_library": "librdkafka"}}) == [
        "kafka.client_library: expected kafka-python or confluent-kafka, got 'librdkafka' (a string)"
    ]


def test_confluent_client_not_installed_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "confluent_kafka" else real(name, *a),
    )
    assert problems_of({"kafka": {"client_library": "confluent-kafka"}}) == [
        "kafka.client_library: confluent-kafka is not installed: "
        "pip install 'activeaudit-monitor[confluent]'"
    ]


def test_tagged_topics_suffix_every_name() -> None:
    tagged = TopicsConfig(scored="in").tagged("t1")
    assert tagged == TopicsConfig(
        scored="in-t1",
        requests="audit-requests-t1",
        labels="audit-labels-t1",
        deadletter="monitor-deadletter-t1",
        aggregates="audit-aggregates-t1",
    )


def test_client_settings_kafka_python_refuses_stop_the_start_with_a_config_error() -> None:
    """A consistent-looking value kafka-python refuses was retried as a broker outage forever
    (``broker_down``, "cannot connect the consumer: KafkaConfigurationError ...")."""
    options = {"bootstrap_servers": ["127.0.0.1:1"], "request_timeout_ms": 1}
    with pytest.raises(ConfigError, match=r"^kafka\.client: kafka-python refused the consumer"):
        new_client(KafkaConsumer, options, "consumer")


# a producer that needs no broker to start: the broker's version is given
_OFFLINE = {"bootstrap_servers": ["127.0.0.1:1"], "client": {"api_version": [4, 0]}}


def test_the_audit_request_producer_is_idempotent_with_acks_all() -> None:
    sink = KafkaSink(parse_config({"kafka": _OFFLINE}, "t"))
    try:
        assert sink._producer.config["enable_idempotence"] is True
        assert sink._producer.config["acks"] == -1
    finally:
        sink.close()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"retries": 0}, "an integer >= 1, got 0"),
        ({"max_in_flight_requests_per_connection": 6}, r"an integer in \[1, 5\], got 6"),
    ],
)
def test_a_setting_that_would_end_the_producers_idempotence_is_refused_by_the_check(
    setting: dict[str, int], expected: str
) -> None:
    """kafka-python turned idempotence off for these with a warning in its own log: a batch
    retried after a leader change could then write audit requests twice. The producer refused
    them at the first connection, which ``check-config`` had passed as OK."""
    kafka = {**_OFFLINE, "client": {**_OFFLINE["client"], **setting}}  # type: ignore[dict-item]
    (key,) = setting
    with pytest.raises(ConfigError, match=rf"\n  kafka\.client\.{key}: expected {expected}: the"):
        parse_config({"kafka": kafka}, "t")
    fine = {**_OFFLINE, "client": {**_OFFLINE["client"], key: 5}}  # type: ignore[dict-item]
    sink = KafkaSink(parse_config({"kafka": fine}, "t"))
    sink.close()


def test_compression_none_is_each_librarys_own_spelling() -> None:
    config = parse_config({"kafka": {"client": {"compression_type": "none"}}}, "t")
    assert kafka_client_options(config.kafka, "producer") == {"compression_type": None}
    assert confluent_client_options(config.kafka, "producer") == {"compression.type": "none"}
