"""The ``labelstudio:`` section of the monitor's YAML file: settings of the Label Studio bridge.

::

    labelstudio:
      url: http://127.0.0.1:8080          # Label Studio's base URL
      token_env: LABEL_STUDIO_TOKEN       # NAME of the environment variable holding the API token
      project_title: "Audit: {model}"     # one project per model; {model} is replaced
      positive: Positive                  # the two choices an auditor sees
      negative: Negative
      instructions: "Is this record really positive?"
      annotators: first                   # first | majority
      majority_of: 3                      # with majority: answers needed per task
      poll_interval_s: 30                 # polling fallback to the webhook
      listen_address: 127.0.0.1           # webhook, /metrics, /healthz, /readyz
      port: 9465
      webhook_url: null                   # what Label Studio calls; default http://ADDR:PORT/webhook
      state_file: labelstudio-bridge.sqlite   # relative to storage.data_dir
      group_id: activeaudit-labelstudio   # consumer group on the request topic
      models:                             # per-model wording (optional)
        fraud: {positive: Fraud, negative: Legitimate, instructions: "..."}

Every problem is reported at once, with its key path, as a ``ConfigError``.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from monitor.errors import ConfigError

Policy = Literal["first", "majority"]

_KEYS = (
    "url",
    "token_env",
    "project_title",
    "positive",
    "negative",
    "instructions",
    "annotators",
    "majority_of",
    "poll_interval_s",
    "listen_address",
    "port",
    "webhook_url",
    "state_file",
    "group_id",
    "models",
)
_WORDING_KEYS = ("positive", "negative", "instructions")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class Wording:
    """What an auditor reads: the two choices and the instructions."""

    positive: str = "Positive"
    negative: str = "Negative"
    instructions: str = (
        "Read the record and choose its true class. The model's score and prediction are shown "
        "for context only; answer what the record really is. Skip it if you cannot tell."
    )


@dataclass(frozen=True)
class LabelStudioConfig:
    """Validated settings of ``monitor queue labelstudio``; the token itself is not kept here."""

    url: str = "http://127.0.0.1:8080"
    token_env: str = "LABEL_STUDIO_TOKEN"
    project_title: str = "Audit: {model}"
    wording: Wording = Wording()
    model_wording: Mapping[str, Wording] = field(default_factory=dict)
    annotators: Policy = "first"
    majority_of: int = 3
    poll_interval_s: float = 30.0
    listen_address: str = "127.0.0.1"
    port: int = 9465
    webhook_url: str | None = None
    state_file: str = "labelstudio-bridge.sqlite"
    group_id: str = "activeaudit-labelstudio"

    def title(self, model: str) -> str:
        """The project title of ``model``."""
        return self.project_title.replace("{model}", model)

    def wording_of(self, model: str) -> Wording:
        """The wording for ``model`` (its own, else the section's)."""
        return self.model_wording.get(model, self.wording)

    @property
    def answers_needed(self) -> int:
        """Annotations per task Label Studio should collect: 1, or ``majority_of``."""
        return 1 if self.annotators == "first" else self.majority_of

    def hook_url(self, port: int) -> str:
        """The URL Label Studio posts webhooks to (``port``: the port actually bound)."""
        if self.webhook_url is not None:
            return self.webhook_url
        host = self.listen_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port}/webhook"

    def token(self) -> str:
        """The API token from the environment variable ``token_env``.

        Raises:
            ConfigError: the variable is unset or empty (its value is never shown).
        """
        value = os.environ.get(self.token_env, "")
        if not value.strip():
            msg = (
                f"labelstudio.token_env: environment variable '{self.token_env}' is not set; "
                "export it with the API token of a Label Studio user (Account & Settings -> "
                "Access Token)"
            )
            raise ConfigError(msg)
        return value.strip()


def parse_labelstudio(data: Any, source: str) -> LabelStudioConfig:
    """Validate the ``labelstudio`` section (``data``: the whole parsed YAML file).

    Raises:
        ConfigError: ``"{source}: N problem(s)"`` and one ``labelstudio.key: reason`` per line.
    """
    problems: list[str] = []
    section = data.get("labelstudio") if isinstance(data, Mapping) else None
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        problems.append(f"labelstudio: expected a mapping, got {type(section).__name__}")
        section = {}
    values = {k: v for k, v in section.items() if v is not None}
    for key in values:
        if key not in _KEYS:
            problems.append(f"labelstudio.{key}: unknown key (expected one of: {', '.join(_KEYS)})")
    base = LabelStudioConfig()
    get = _Getter(values, problems)
    url = get.text("url", base.url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(f'labelstudio.url: expected an http(s) URL like "{base.url}", got {url!r}')
    elif parts.username is not None or parts.password is not None:
        problems.append("labelstudio.url: must not contain credentials; use token_env")
    annotators = get.text("annotators", base.annotators)
    if annotators not in ("first", "majority"):
        problems.append(
            f"labelstudio.annotators: expected 'first' or 'majority', got {annotators!r}"
        )
        annotators = base.annotators
    hook = values.get("webhook_url")
    if hook is not None and (
        not isinstance(hook, str) or urllib.parse.urlsplit(hook).scheme not in ("http", "https")
    ):
        problems.append(f"labelstudio.webhook_url: expected an http(s) URL, got {hook!r}")
        hook = None
    wording = _wording(get, base.wording)
    config = LabelStudioConfig(
        url=url.rstrip("/"),
        token_env=get.text("token_env", base.token_env, _ENV_NAME, "an environment variable name"),
        project_title=get.text("project_title", base.project_title),
        wording=wording,
        model_wording=_models(values.get("models"), problems, wording),
        annotators="majority" if annotators == "majority" else "first",
        majority_of=get.integer("majority_of", base.majority_of, 2, 99),
        poll_interval_s=get.number("poll_interval_s", base.poll_interval_s, 0.1, 86_400.0),
        listen_address=get.text("listen_address", base.listen_address, _HOST, "an IP address"),
        port=get.integer("port", base.port, 0, 65_535),
        webhook_url=hook,
        state_file=get.text("state_file", base.state_file),
        group_id=get.text("group_id", base.group_id),
    )
    if config.annotators == "majority" and config.majority_of % 2 == 0:
        problems.append(
            f"labelstudio.majority_of: must be odd so that two classes cannot tie, "
            f"got {config.majority_of}"
        )
    if problems:
        head = f"{source}: {len(problems)} problem{'s' if len(problems) > 1 else ''}"
        msg = "\n  ".join([head, *problems])
        raise ConfigError(msg)
    return config


def state_path(config: LabelStudioConfig, data_dir: Path) -> Path:
    """Where the bridge's SQLite file lives: ``state_file``, relative to the data directory."""
    path = Path(config.state_file)
    return path if path.is_absolute() else data_dir / path


class _Getter:
    def __init__(self, values: Mapping[str, Any], problems: list[str], path: str = "labelstudio"):
        self.values, self.problems, self.path = values, problems, path

    def text(
        self, key: str, default: str, pattern: re.Pattern[str] | None = None, what: str = ""
    ) -> str:
        value = self.values.get(key, default)
        if not isinstance(value, str) or not value.strip():
            self.problems.append(f"{self.path}.{key}: expected a non-empty string, got {value!r}")
            return default
        if pattern is not None and not pattern.fullmatch(value):
            self.problems.append(f"{self.path}.{key}: expected {what}, got {value!r}")
            return default
        return value

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        value = self.values.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.problems.append(
                f"{self.path}.{key}: expected an integer in [{lo}, {hi}], got {value!r}"
            )
            return default
        return value

    def number(self, key: str, default: float, lo: float, hi: float) -> float:
        value = self.values.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            self.problems.append(
                f"{self.path}.{key}: expected a number in [{lo:g}, {hi:g}], got {value!r}"
            )
            return default
        return float(value)


def _wording(get: _Getter, base: Wording) -> Wording:
    wording = Wording(
        positive=get.text("positive", base.positive),
        negative=get.text("negative", base.negative),
        instructions=get.text("instructions", base.instructions),
    )
    if wording.positive == wording.negative:
        get.problems.append(f"{get.path}: 'positive' and 'negative' must differ")
    return wording


def _models(value: Any, problems: list[str], base: Wording) -> dict[str, Wording]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append("labelstudio.models: expected a mapping of model name -> wording")
        return {}
    out: dict[str, Wording] = {}
    for name, spec in value.items():
        path = f"labelstudio.models.{name}"
        if not isinstance(spec, Mapping):
            problems.append(f"{path}: expected a mapping with {', '.join(_WORDING_KEYS)}")
            continue
        for key in spec:
            if key not in _WORDING_KEYS:
                problems.append(
                    f"{path}.{key}: unknown key (expected one of: positive, negative, instructions)"
                )
        values = {k: v for k, v in spec.items() if v is not None}
        out[str(name)] = _wording(_Getter(values, problems, path), base)
    return out
