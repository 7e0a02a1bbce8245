"""The examples in the docstrings of ``monitor/`` run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import monitor

# every module but the entry points, which run their command on import
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(monitor.__path__, "monitor.")
    if not m.name.endswith("__main__")
)


def test_some_modules_have_examples() -> None:
    """The collection below is not empty (a broken walk would pass every case)."""
    finder = doctest.DocTestFinder()
    with_examples = [
        name
        for name in MODULES
        if any(t.examples for t in finder.find(importlib.import_module(name)))
    ]
    assert len(with_examples) >= 5, with_examples


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
