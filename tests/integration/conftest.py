"""Fixtures of the integration tests that start daemon processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.test_scale_out import Proc


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """The ``monitor run`` processes a test starts (killed at the end if still running)."""
    started: list[Proc] = []
    yield started
    for p in started:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()
