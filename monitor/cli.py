"""The ``monitor`` command line: one subcommand per job, each registered by its own module.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)``, which adds its
subcommands and sets ``func`` (``Callable[[argparse.Namespace], int]``) on each parser.
Exit status: 0 success, 1 crash, 2 usage, configuration or input errors.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

import prometheus_client

from monitor import __version__
from monitor.errors import ConfigError, InputFileError, StoreError

COMMAND_MODULES = (
    "monitor.offline.cli",
    "monitor.daemon",
    "monitor.sim.auditors",
    "monitor.sim.demo",
    "monitor.bridges.cli",
)

EXIT_OK = 0
EXIT_USAGE = 2  # an uncaught exception exits 1

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="monitor",
        description="Active-audit monitor: the F-measure of a production classifier, live, "
        "with a confidence interval, from few audit labels.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # a counter's ``*_created`` twin is one more series per label set that no rule reads
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        status: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except (ConfigError, InputFileError, StoreError) as exc:
        print(f"monitor {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:  # ``monitor estimate ... | head``: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_OK
    return status
