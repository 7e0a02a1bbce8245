"""The core is pure: importing ``monitor.stats`` or ``monitor.core`` pulls in no broker, metrics or
database code."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("kafka", "prometheus_client", "sqlite3")
MODULES = (
    "monitor.stats.falpha",
    "monitor.stats.sample",
    "monitor.stats.interval",
    "monitor.stats.measures",
    "monitor.stats.selection",
    "monitor.stats.stratified",
    "monitor.stats.likelihood",
    "monitor.stats.drift",
    "monitor.stats.estimate",
    "monitor.sim.simulate",
)


def test_importing_the_core_imports_no_io_modules() -> None:
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import monitor.core, monitor.stats\n"
        f"for name in {MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "for pkg in (monitor.stats, monitor.core):\n"
        "    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == []
