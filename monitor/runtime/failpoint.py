"""A test hook that kills the process between two effects of a step (crash tests)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from monitor.errors import ConfigError


class Failpoint:
    """Test hook: run ``action`` (default: SIGKILL this process) at the n-th hit of a stage.

    Stages of a step, in order: ``decode`` (records polled, nothing done), ``produce``
    (requests and dead letters queued, not flushed), ``flush`` (acknowledged by the broker,
    state not written), ``store`` (inside the store transaction, before COMMIT) and ``commit``
    (after the Kafka offset commit). Only steps that consumed or changed something count.
    """

    ENV = "MONITOR_FAILPOINT"
    STAGES = ("decode", "produce", "flush", "store", "commit")

    def __init__(self, stage: str, n: int, action: Callable[[], None] | None = None) -> None:
        if stage not in self.STAGES or n < 1:
            msg = f"{self.ENV}: expected STAGE:N with STAGE in {', '.join(self.STAGES)} and N >= 1"
            raise ConfigError(msg)
        self.stage = stage
        self.n = n
        self.count = 0
        self.action = action or (lambda: os.kill(os.getpid(), signal.SIGKILL))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Failpoint | None:
        """The failpoint named by ``MONITOR_FAILPOINT`` ("stage:n"), None when unset."""
        spec = environ.get(cls.ENV, "")
        if not spec:
            return None
        stage, _, n = spec.partition(":")
        try:
            count = int(n or "1")
        except ValueError:
            count = 0
        return cls(stage, count)

    def hit(self, stage: str) -> None:
        """Count one passage through ``stage``; act on the n-th."""
        if stage == self.stage:
            self.count += 1
            if self.count == self.n:
                self.action()
