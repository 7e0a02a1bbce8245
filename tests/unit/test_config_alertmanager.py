"""Configuration: the ``alertmanager`` section (push of the daemon's own alert decisions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config.load import load_config, parse_config
from monitor.config.schema import AlertmanagerConfig, Config
from monitor.errors import ConfigError

REFERENCE = Path(__file__).resolve().parents[2] / "config" / "monitor.yaml"


def problems_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml")
    return [line.strip() for line in str(info.value).split("\n")[1:]]


def test_push_is_off_by_default_and_in_the_reference_file() -> None:
    assert Config().alertmanager == AlertmanagerConfig(url=None, timeout_s=5.0)
    assert load_config(REFERENCE).alertmanager == AlertmanagerConfig()
    assert parse_config({"alertmanager": None}, "t").alertmanager.url is None
    assert parse_config({"alertmanager": {"url": None}}, "t").alertmanager.url is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://alertmanager:9093", "http://alertmanager:9093"),
        ("http://127.0.0.1:9093/", "http://127.0.0.1:9093"),
        ("https://am.example.internal/prefix/", "https://am.example.internal/prefix"),
        ("http://[::1]:9093", "http://[::1]:9093"),
    ],
)
def test_a_valid_url_is_kept_without_trailing_slash(url: str, expected: str) -> None:
    config = parse_config({"alertmanager": {"url": url, "timeout_s": "2s"}}, "t")
    assert config.alertmanager == AlertmanagerConfig(url=expected, timeout_s=2.0)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("alertmanager:9093", "expected an http(s) URL"),
        ("ftp://alertmanager:9093", "expected an http(s) URL"),
        ("http://", "expected an http(s) URL"),
        (9093, "expected an http(s) URL"),
        ("http://am:99999", "port must be in [1, 65535]"),
        ("http://am:9093/?x=1", "without query or fragment"),
        ("http://[::1", "expected an http(s) URL"),
        ("http://am:port", "port must be in [1, 65535]"),
    ],
)
def test_a_bad_url_is_named_by_its_key_path(value: object, reason: str) -> None:
    (line,) = problems_of({"alertmanager": {"url": value}})
    assert line.startswith("alertmanager.url: ")
    assert reason in line


def test_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    (line,) = problems_of({"alertmanager": {"url": "http://ops:hunter2secret@am:9093"}})
    assert line == "alertmanager.url: must not contain credentials (user:password@)"
    assert "hunter2secret" not in line


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("htp://ops:hunter2secret@am:9093", "got 'htp://***@am:9093' (a string)"),
        ("http://am:9093/?token=hunter2secret", "got 'http://am:9093/?***' (a string)"),
        ("http://am:9093/#hunter2secret", "got 'http://am:9093/?***' (a string)"),
    ],
)
def test_no_message_echoes_a_credential_or_a_query(value: str, shown: str) -> None:
    (line,) = problems_of({"alertmanager": {"url": value}})
    assert line.endswith(shown)
    assert "hunter2secret" not in line


def test_bad_timeout_and_unknown_keys_are_all_reported() -> None:
    lines = problems_of({"alertmanager": {"timeout_s": 0, "resend": 60}, "metrics": {"port": 0}})
    assert len(lines) == 3
    assert any(x.startswith("alertmanager.timeout_s: must be > 0") for x in lines)
    assert any(x.startswith("alertmanager.resend: unknown key") for x in lines)
    # problems are listed in the order of the reference file: metrics before alertmanager
    assert lines[0].startswith("metrics.port")


def test_section_must_be_a_mapping() -> None:
    assert problems_of({"alertmanager": "http://am:9093"}) == [
        "alertmanager: expected a mapping, got 'http://am:9093' (a string)"
    ]
