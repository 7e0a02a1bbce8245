"""``monitor queue labelstudio --config FILE``: run the Label Studio bridge until SIGTERM.

Exit status: 0 after SIGTERM/Ctrl-C, 1 when the loop failed, 2 for a configuration problem, a
refused token or an unreachable Label Studio at start-up (the message says which and how to
fix it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import yaml

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioAuthError, LabelStudioError
from monitor.bridges.ls_config import parse_labelstudio, state_path
from monitor.config.kafka_client import unused_security_settings
from monitor.config.load import load_config
from monitor.errors import ConfigError, MonitorError
from monitor.logs import LOG_LEVELS, log_level, setup_logging

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``monitor queue labelstudio``."""
    queue = sub.add_parser("queue", help="bridges to audit queues where people label")
    kinds = queue.add_subparsers(dest="queue", required=True, metavar="QUEUE")
    p = kinds.add_parser(
        "labelstudio",
        help="Label Studio: label requests become tasks, annotations become labels",
        description="Create one Label Studio task per label request and publish each answered "
        "task as a label; settings in the 'labelstudio:' section of the configuration file, "
        "the API token in the environment variable it names (token_env).",
    )
    p.add_argument("--config", type=Path, required=True, help="YAML configuration file")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers, comma-separated")
    p.add_argument("--data-dir", type=Path, help="directory of the bridge's state file")
    p.add_argument("--log-level", default="INFO", type=log_level, help=", ".join(LOG_LEVELS))
    p.set_defaults(func=run_labelstudio)


def run_labelstudio(args: argparse.Namespace) -> int:
    """Handler of ``monitor queue labelstudio``."""
    config = load_config(
        args.config, {"bootstrap_servers": args.bootstrap_servers, "data_dir": args.data_dir}
    )
    raw = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    ls = parse_labelstudio(raw, str(args.config))
    token = ls.token()
    setup_logging(args.log_level)
    if (unused := unused_security_settings(config.kafka.client)) is not None:
        log.warning(unused, extra={"event": "client_settings_unused"})
    bridge = LabelStudioBridge(config, ls, state_path(ls, config.data_dir), token)
    try:
        bridge.start()
    except LabelStudioAuthError as exc:
        print(f"monitor queue labelstudio: error: {exc}", file=sys.stderr)
        return 2
    except LabelStudioError as exc:
        print(
            f"monitor queue labelstudio: error: {exc}\n  is Label Studio running at {ls.url}? "
            "(labelstudio.url in the configuration file)",
            file=sys.stderr,
        )
        return 2
    except ConfigError:
        raise
    except MonitorError as exc:
        print(f"monitor queue labelstudio: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGHUP (a closed terminal) ended the bridge at once, as it did the daemon
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        while not stop.wait(1.0) and bridge.alive:
            pass
    finally:
        bridge.stop()
    code = 1 if bridge.error is not None else 0
    log.info("stopped", extra={"event": "bridge_stopped", "exit_code": code})
    return code
