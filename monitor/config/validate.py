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
from collections.abc import Collection, Mapping
from typing import Any

import yaml

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")


class StrictLoader(yaml.SafeLoader):
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
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


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
            self.problems.add(self.where(key), f"expected a number, {got(value)}")
            return default
        where = self.where(key)
        ok = in_range(self.problems, where, float(value), lo, hi, lo_open=lo_open, hi_open=hi_open)
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
        self, key: str, default: float, *, integer: bool = False, positive: bool = True
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
        if not in_range(self.problems, where, seconds, 0.0, None, lo_open=positive):
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
    bad = (
        not math.isfinite(value)
        or (lo is not None and (value <= lo if lo_open else value < lo))
        or (hi is not None and (value >= hi if hi_open else value > hi))
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
