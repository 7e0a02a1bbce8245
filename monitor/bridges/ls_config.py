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
      poll_interval_s: 30s                # polling fallback to the webhook (seconds or "1m")
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

import hashlib
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from monitor.config.validate import Problems, Section, as_mapping, got, http_url
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
#: Label Studio's longest project title
MAX_TITLE = 50
_EXAMPLE = "http://127.0.0.1:8080"


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
        """The project title of ``model``: ``project_title`` with ``{model}`` replaced.

        Label Studio refuses titles over 50 characters, so a longer one keeps its first 41 and
        ends with ``~`` and 8 hex digits of its hash (the same project at every start).
        """
        title = self.project_title.replace("{model}", model)
        if len(title) <= MAX_TITLE:
            return title
        digest = hashlib.blake2b(title.encode("utf-8", "surrogatepass"), digest_size=4)
        return f"{title[: MAX_TITLE - 9]}~{digest.hexdigest()}"

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
        host = "127.0.0.1" if self.listen_address == "0.0.0.0" else self.listen_address
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
    problems = Problems({})
    raw = data.get("labelstudio") if isinstance(data, Mapping) else None
    sec = Section(problems, raw, "labelstudio", _KEYS)
    base = LabelStudioConfig()
    url = _url(sec, "url", base.url)
    annotators = sec.text("annotators", base.annotators)
    if annotators not in ("first", "majority"):
        problems.add(sec.where("annotators"), f"expected 'first' or 'majority', {got(annotators)}")
    hook = _url(sec, "webhook_url", None)
    wording = _wording(sec, base.wording)
    config = LabelStudioConfig(
        url=url or base.url,
        token_env=sec.text("token_env", base.token_env, _ENV_NAME, "an environment variable name"),
        project_title=sec.text("project_title", base.project_title),
        wording=wording,
        model_wording=_models(problems, sec.get("models"), wording),
        annotators="majority" if annotators == "majority" else "first",
        majority_of=sec.integer("majority_of", base.majority_of, 2, 99),
        poll_interval_s=sec.duration("poll_interval_s", base.poll_interval_s),
        listen_address=_ipv4(sec, "listen_address", base.listen_address),
        port=sec.integer("port", base.port, 0, 65_535),
        webhook_url=hook,
        state_file=sec.text("state_file", base.state_file),
        group_id=sec.text("group_id", base.group_id),
    )
    if "{model}" not in config.project_title:
        problems.add(
            sec.where("project_title"),
            f"must contain {{model}} (one project per model), got {config.project_title!r}",
        )
    if config.annotators == "majority" and config.majority_of % 2 == 0:
        problems.add(
            sec.where("majority_of"),
            f"must be odd so that two classes cannot tie, got {config.majority_of}",
        )
    if problems.lines:
        count = len(problems.lines)
        head = f"{source}: {count} problem{'s' if count > 1 else ''}"
        msg = "\n  ".join([head, *problems.lines])
        raise ConfigError(msg)
    return config


def state_path(config: LabelStudioConfig, data_dir: Path) -> Path:
    """Where the bridge's SQLite file lives: ``state_file``, relative to the data directory."""
    path = Path(config.state_file)
    return path if path.is_absolute() else data_dir / path


def _url(sec: Section, key: str, default: str | None) -> str | None:
    """An http(s) URL without credentials, trailing slash removed."""
    if key not in sec:
        return default
    checked = http_url(
        sec.problems,
        sec.get(key),
        sec.where(key),
        _EXAMPLE,
        "must not contain credentials (user:password@); use token_env",
    )
    return checked or default


def _ipv4(sec: Section, key: str, default: str) -> str:
    """An IPv4 address the bridge's HTTP server can bind (it listens on IPv4 only)."""
    value = sec.text(key, default)
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        sec.problems.add(
            sec.where(key),
            f"expected an IPv4 address such as 127.0.0.1 or 0.0.0.0 (the bridge listens on "
            f"IPv4 only), got {value!r}",
        )
        return default
    return value


def _wording(sec: Section, base: Wording) -> Wording:
    wording = Wording(
        positive=sec.text("positive", base.positive),
        negative=sec.text("negative", base.negative),
        instructions=sec.text("instructions", base.instructions),
    )
    if wording.positive == wording.negative:
        sec.problems.add(sec.path, "'positive' and 'negative' must differ")
    return wording


def _models(problems: Problems, value: Any, base: Wording) -> dict[str, Wording]:
    models = as_mapping(problems, value, "labelstudio.models") or {}
    return {
        name: _wording(Section(problems, spec, f"labelstudio.models.{name}", _WORDING_KEYS), base)
        for name, spec in models.items()
    }
