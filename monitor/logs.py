"""Structured logging: one JSON object per line, one line per event.

Call sites pass structured fields through ``extra``::

    log.info("batches processed", extra={"event": "batches_processed", "records": 500})
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

# attributes every LogRecord has; anything else on a record came from ``extra``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Render a record as ``{"ts", "level", "logger", "msg", "event", ...extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        """Format one record as a single JSON line."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(value: str) -> str:
    """``--log-level``'s type: a level name Python's logging knows, in any case (``WARN`` too).

    Anything else is a usage error, exit 2 (it was a traceback once the configuration loaded).
    """
    if value.upper() not in logging.getLevelNamesMapping():
        msg = f"{value!r} is not a log level: use one of {', '.join(LOG_LEVELS)}"
        raise argparse.ArgumentTypeError(msg)
    return value.upper()


def setup_logging(level: str = "INFO") -> None:
    """Send JSON lines to stderr at ``level`` (replaces any handler already installed)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # the daemon reports broker state changes itself, once per change; kafka-python would log
    # every failed reconnect attempt of an outage
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
