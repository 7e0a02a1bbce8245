"""The package layout holds: no import cycle, and each layer imports only the layers below it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "monitor"

# what each package may import from the project (itself always allowed); ``monitor`` alone is
# the package's ``__version__``
ALLOWED: dict[str, set[str]] = {
    "stats": set(),
    "config": {"stats", "errors"},
    "core": {"config", "errors", "stats"},
    "runtime": {"core", "config", "errors", "stats", "io", "throttled_log"},  # io: the Store type
    "io": {"core", "config", "errors", "stats", "runtime", "logs", "monitor"},
    "testing": {"core", "errors", "runtime"},
    "offline": {"errors", "stats", "sim"},
    "sim": {"core", "config", "errors", "logs", "io", "stats", "bridges", "free_ports"},
    # talks to the topics (their messages: core.messages; io: kafka-python's clients as the
    # daemon makes them, and its errors for a missing topic) and the tool only
    "bridges": {"config", "core", "errors", "io", "logs", "free_ports", "throttled_log"},
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every ``monitor.*`` module ``path`` imports, at any depth (function-level too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("monitor"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("monitor"):
            module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield sub if (ROOT.parent / (sub.replace(".", "/") + ".py")).exists() else module


def _graph() -> dict[str, set[str]]:
    return {_module(p): set(_imports(p)) - {_module(p)} for p in ROOT.rglob("*.py")}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "monitor"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def _breaches(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} imports {target}"
        for module, targets in graph.items()
        if _layer(module) in ALLOWED
        for target in targets
        if _layer(target) != _layer(module) and _layer(target) not in ALLOWED[_layer(module)]
    ]


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_each_layer_imports_only_what_it_may() -> None:
    assert _breaches(_graph()) == []


def test_the_checks_catch_a_cycle_and_a_breach() -> None:
    graph = _graph()
    graph["monitor.config.schema"] = graph["monitor.config.schema"] | {"monitor.core.alerts"}
    assert ["monitor.config.schema", "monitor.core.alerts", "monitor.config.schema"] in _cycles(
        graph
    )
    assert "monitor.config.schema imports monitor.core.alerts" in _breaches(graph)
