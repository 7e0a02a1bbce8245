"""The general part of configuration validation: problems collected with their key paths.

Every problem is recorded with its key path (``kafka.topics.scored: reason, got value``) and
validation goes on, so a file with several mistakes is reported at once (kafka-python's strict
config, pve-exporter's collect-all-then-report). ``Section`` reads one mapping of the file with
typed getters that fall back to the default after recording a problem.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import urllib.parse
from collections.abc import Collection, Mapping
from typing import Any

import yaml

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_DURATION_FULL = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[smhdw])+")
_URL_USERINFO = re.compile(r"//[^/?#@]*@")


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also rejects a key repeated in one mapping.

    A value its tag cannot read (``2024-02-30``, ``!!int abc``, a 5,000-digit integer) is a YAML
    error at that value's line, not an exception from PyYAML's constructors.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """``SafeLoader.construct_object``, a failing value reported with its line."""
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, AttributeError, TypeError, OverflowError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            shown = str(node.value) if isinstance(node, yaml.ScalarNode) else "this node"
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            reason = str(exc).split(";")[0]  # not Python's own advice (sys.set_int_max_str_digits)
            problem = (
                f"cannot read {shown!r} as a YAML {tag} ({reason}); quote it to keep it as text"
            )
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from exc


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


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class Problems:
    """Every problem found so far, as ``key.path: reason`` lines (with the flag that set a key)."""

    def __init__(self, origins: Mapping[str, str]) -> None:
        self.lines: list[str] = []
        self._origins = origins

    def add(self, path: str, message: str) -> None:
        """Record ``message`` for the key at ``path``."""
        origin = self._origin(path)
        where = f"{path} (from {origin})" if origin else path
        self.lines.append(f"{where}: {message}")

    def _origin(self, path: str) -> str | None:
        for key, flag in self._origins.items():
            if path == key or path.startswith((f"{key}[", f"{key}.")):
                return flag
        return None


def join_key(path: str, key: str) -> str:
    """The key path of ``key`` inside ``path`` (``kafka`` + ``topics`` -> ``kafka.topics``)."""
    return f"{path}.{key}" if path else key


def got(value: Any, *, secret: bool = False) -> str:
    """``got <value>`` for a message; only the type when ``secret``."""
    if value is None:
        return "got null"
    if isinstance(value, bool):
        return f"got {str(value).lower()} (a boolean)"
    if secret:
        return f"got {with_article(type_name(value))}"
    if isinstance(value, int | float):
        return f"got {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"got {shown!r} (a string)"
    return f"got {with_article(type_name(value))}"


def _yaml_text_number(text: str) -> bool:
    """Whether ``text`` is a number YAML 1.1 reads as a string (``1e3``: no dot before e)."""
    try:
        float(text)
    except ValueError:
        return False
    return "e" in text.lower()


def with_article(noun: str) -> str:
    """``a noun`` or ``an noun``."""
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def type_name(value: Any) -> str:
    """The YAML name of a value's type (``integer``, ``mapping``, ...)."""
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


def fmt_number(x: float) -> str:
    """A number as written in a file: whole numbers without ``.0``."""
    if isinstance(x, int) and abs(x) >= 10**15:
        return f"an integer of {len(str(abs(x)))} digits"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def to_float(value: float) -> float:
    """``float(value)``, an integer too large for a float becoming +-inf (outside any range)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def unknown_key(key: str, allowed: Collection[str]) -> str:
    """The message for an unknown key, with the closest allowed one when there is one."""
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)"
    return f"unknown key (expected one of: {', '.join(sorted(allowed))})"


def as_mapping(problems: Problems, value: Any, path: str) -> dict[str, Any] | None:
    """``value`` as a mapping with string keys (null: empty), or None with a problem."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, f"expected a mapping, {got(value)}")
        return None
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            problems.add(
                join_key(path, str(key)),
                f"keys must be strings, got {with_article(type_name(key))}",
            )
            continue
        out[key] = item
    return out


class Section:
    """One mapping of the file at ``path``: unknown keys reported, typed getters.

    Each getter returns the value when it is valid and otherwise records the problem and
    returns the default, so that validation goes on and every problem is reported at once.
    Null values count as absent (the default applies).
    """

    def __init__(self, problems: Problems, value: Any, path: str, allowed: Collection[str]) -> None:
        self.problems, self.path = problems, path
        found = as_mapping(problems, value, path) or {}
        for key in found:
            if key not in allowed:
                problems.add(join_key(path, key), unknown_key(key, allowed))
        self.values = {k: v for k, v in found.items() if k in allowed and v is not None}

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str) -> Any:
        """The raw value of ``key`` (None when absent or null)."""
        return self.values.get(key)

    def where(self, key: str) -> str:
        """The key path of ``key``."""
        return join_key(self.path, key)

    def integer(self, key: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        """An integer in [lo, hi]."""
        if key not in self.values:
            return default
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(self.where(key), f"expected an integer, {got(value)}")
            return default
        return value if in_range(self.problems, self.where(key), value, lo, hi) else default

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
        """A number in the given range (open ends with ``lo_open``/``hi_open``)."""
        if key not in self.values:
            return default
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            hint = ""
            if isinstance(value, str) and _yaml_text_number(value):
                hint = (
                    f" (YAML reads {value} as text: write {float(value):g} or {float(value):.1e})"
                )
            self.problems.add(self.where(key), f"expected a number, {got(value)}{hint}")
            return default
        where = self.where(key)
        ok = in_range(self.problems, where, value, lo, hi, lo_open=lo_open, hi_open=hi_open)
        return float(value) if ok else default

    def text(
        self,
        key: str,
        default: str,
        pattern: re.Pattern[str] | None = None,
        what: str = "a non-empty string",
    ) -> str:
        """A non-empty string, matching ``pattern`` when given (``what`` names it in messages)."""
        if key not in self.values:
            return default
        value = self.values[key]
        if (
            not isinstance(value, str)
            or not value
            or (pattern is not None and not pattern.fullmatch(value))
        ):
            self.problems.add(self.where(key), f"expected {what}, {got(value)}")
            return default
        return value

    def duration(
        self,
        key: str,
        default: float,
        *,
        integer: bool = False,
        positive: bool = True,
        hi: float | None = None,
    ) -> float:
        """Seconds from a number or a duration string (see ``parse_duration``)."""
        if key not in self.values:
            return default
        value, where = self.values[key], self.where(key)
        seconds = parse_duration(value)
        if seconds is None:
            self.problems.add(
                where, f'expected seconds or a duration like "30m", "1h", "7d", {got(value)}'
            )
            return default
        if not in_range(self.problems, where, seconds, 0.0, hi, lo_open=positive):
            return default
        if integer and not seconds.is_integer():
            self.problems.add(
                where, f"must be a whole number of seconds, got {fmt_number(seconds)}"
            )
            return default
        return seconds


def in_range(
    problems: Problems,
    path: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> bool:
    """True when ``value`` is finite and within the bounds; else record why and return False."""
    x = to_float(value)
    bad = (
        not math.isfinite(x)
        or (lo is not None and (x <= lo if lo_open else x < lo))
        or (hi is not None and (x >= hi if hi_open else x > hi))
    )
    if not bad:
        return True
    if lo is not None and hi is not None:
        bounds = (
            f"{'(' if lo_open else '['}{fmt_number(lo)}, {fmt_number(hi)}{')' if hi_open else ']'}"
        )
        problems.add(path, f"must be in {bounds}, got {fmt_number(value)}")
    elif lo is not None:
        problems.add(
            path, f"must be {'>' if lo_open else '>='} {fmt_number(lo)}, got {fmt_number(value)}"
        )
    else:
        problems.add(path, f"must be a finite number, got {fmt_number(value)}")
    return False


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is a non-empty run of 0-9 (``str.isdigit`` also takes "²" and "٣")."""
    return text.isascii() and text.isdigit()


def parse_duration(value: Any) -> float | None:
    """Seconds from a number of seconds or a string like ``"90s"``, ``"30m"``, ``"1h30m"``.

    Units: s, m, h, d (86400 s), w (7 d). Returns None when ``value`` is not a duration.

    >>> parse_duration("1h30m"), parse_duration(600), parse_duration("7d")
    (5400.0, 600.0, 604800.0)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return to_float(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if ascii_digits(text):
            return float(text)
        if _DURATION_FULL.fullmatch(text):
            return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return None


def shown_url(raw: str) -> str:
    """``raw`` as a message may show it: no ``user:password@``, no query or fragment (tokens)."""
    text = _URL_USERINFO.sub("//***@", raw, count=1)
    base = re.split(r"[?#]", text, maxsplit=1)[0]
    return base if base == text else base + "?***"


def http_url(
    problems: Problems, raw: Any, where: str, example: str, credentials: str
) -> str | None:
    """An http(s) base URL without its trailing slash, or None with the problem recorded.

    No credentials (``credentials`` is the message then), query or fragment; a message never
    shows a credential or a query.
    """
    parts: urllib.parse.SplitResult | None = None
    port_ok = False
    if isinstance(raw, str):
        try:
            parts = urllib.parse.urlsplit(raw)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:  # "http://[::1", a port out of range or not a number
            pass
    shown = got(shown_url(raw)) if isinstance(raw, str) else got(raw)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        problems.add(where, f'expected an http(s) URL like "{example}", {shown}')
    elif parts.username is not None or parts.password is not None:
        problems.add(where, credentials)
    elif not port_ok:
        problems.add(where, f"port must be in [1, 65535], {shown}")
    elif parts.query or parts.fragment:
        problems.add(where, f"expected a base URL without query or fragment, {shown}")
    else:
        return str(raw).rstrip("/")
    return None


def env_ref(problems: Problems, value: Any, path: str) -> tuple[Any, bool]:
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
