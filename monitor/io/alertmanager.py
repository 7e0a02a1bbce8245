"""Forwarding of alert states to Alertmanager's v2 API, off the caller's thread.

``POST {url}/api/v2/alerts`` with a JSON list of ``{labels, annotations, startsAt, endsAt}``:
labels ``alertname`` (the name of the Prometheus rule that reports the same decision,
``RULE_NAMES``), ``alert`` (the daemon's name), ``severity``, ``model``, ``segment``, ``window``
and ``source="activeaudit-monitor"``; annotations ``summary``, ``description``, ``bound``,
``threshold`` and ``runbook_url``. Named as the rules name them, a pushed alert and the rule's
fall into one Alertmanager group and the shipped inhibitions apply to both. A firing alert's
``endsAt`` lies ``3 * resend_s`` ahead and is pushed again every ``resend_s`` (Alertmanager
resolves an alert whose ``endsAt`` has passed, so a dead daemon's alerts resolve on their own),
by the pusher's own thread while no new statuses come (a model whose traffic stopped publishes
no snapshot, and its firing alerts used to resolve three minutes later); an alert that stops
firing is sent once with ``endsAt`` = now.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from monitor.core.alerts import AlertStatus

log = logging.getLogger(__name__)
Key = tuple[str, str, str, str]

#: The rule in deploy/prometheus/rules/alerts.yaml that reports each decision of the daemon
RULE_NAMES = {
    "f_below_floor": "MonitorFMeasureBelowFloor",
    "f_dropped": "MonitorFMeasureDropped",
    "model_untrustworthy": "MonitorModelUntrustworthy",
}
RUNBOOK = "https://github.com/activeaudit/activeaudit-monitor/blob/main/README.md#alert-"


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


class AlertmanagerPusher:
    """Forwards firing and resolved alerts to Alertmanager's v2 API without blocking.

    ``push`` only hands the latest alert list to a background thread; older undelivered lists
    are replaced. Firing alerts are re-sent every ``resend_s``, pushed or not (Alertmanager
    resolves an alert whose ``endsAt`` passes); an alert that stops firing is sent once with
    ``endsAt`` = now. ``clock``: wall time in seconds (``time.time``; injected by tests).
    A POST is retried ``retries`` times with doubling back-off; when all fail, ``on_error(1)``
    is called (wire it to ``Exporter.count_alertmanager_errors``); the next resend tries again.
    """

    def __init__(
        self,
        url: str,
        *,
        on_error: Callable[[int], None] | None = None,
        timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        resend_s: float = 60.0,
        generator_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/api/v2/alerts"
        self._on_error = on_error
        self._timeout_s, self._retries, self._backoff_s = timeout_s, retries, backoff_s
        self._resend_s, self._generator_url = resend_s, generator_url
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] | None = None
        self._closed = False
        self._firing: dict[Key, float] = {}  # key -> wall time first seen firing
        self._last_sent = -math.inf
        self._last_keys: frozenset[Key] = frozenset()
        self._active: list[AlertStatus] = []  # the firing statuses last pushed
        self.delivered = 0  # successful POSTs (for tests and logs)
        self._thread = threading.Thread(target=self._run, name="alertmanager-push", daemon=True)
        self._thread.start()

    def push(self, statuses: Sequence[AlertStatus], now: float | None = None) -> None:
        """Queue the alerts that fire or just resolved; returns immediately."""
        now = self._clock() if now is None else now
        firing = {s.key: s for s in statuses if s.active}
        with self._cond:
            self._active = list(firing.values())
            resolved = [k for k in self._firing if k not in firing]
            keys = frozenset(firing)
            if not resolved and keys == self._last_keys and now - self._last_sent < self._resend_s:
                return
            alerts = self._firing_payloads(now)
            for k in resolved:
                start = self._firing.pop(k)
                alerts.append(self._payload(AlertStatus(*k, active=False), start, now))
            self._last_sent, self._last_keys = now, keys
            if alerts:
                self._pending = alerts
                self._cond.notify()

    def _firing_payloads(self, now: float) -> list[dict[str, Any]]:
        """The firing alerts, each ending ``3 * resend_s`` after ``now`` (lock held)."""
        ends = now + 3 * self._resend_s
        return [self._payload(s, self._firing.setdefault(s.key, now), ends) for s in self._active]

    def _payload(self, s: AlertStatus, starts: float, ends: float) -> dict[str, Any]:
        name = RULE_NAMES.get(s.alert, s.alert)
        annotations = {
            "summary": f"{s.alert} for model {s.model} on window {s.window}",
            "description": s.description,
            "runbook_url": RUNBOOK + name.lower(),
        }
        if not math.isnan(s.bound):
            annotations["bound"] = _fmt(s.bound)
        if not math.isnan(s.threshold):
            annotations["threshold"] = _fmt(s.threshold)
        out: dict[str, Any] = {
            "labels": {
                "alertname": name,
                "alert": s.alert,
                "severity": s.severity,
                "model": s.model,
                "segment": s.segment,
                "window": s.window,
                "source": "activeaudit-monitor",
            },
            "annotations": annotations,
            "startsAt": _iso(starts),
            "endsAt": _iso(ends),
        }
        if self._generator_url:
            out["generatorURL"] = self._generator_url
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    due = self._last_sent + self._resend_s - self._clock()
                    if self._active and due <= 0:  # no push for resend_s: send them again
                        now = self._clock()
                        self._pending, self._last_sent = self._firing_payloads(now), now
                    else:
                        self._cond.wait(due if self._active else None)
                if self._pending is None:
                    return
                alerts, self._pending = self._pending, None
            self._send(alerts)

    def _send(self, alerts: list[dict[str, Any]]) -> None:
        body = json.dumps(alerts).encode()
        delay = self._backoff_s
        for attempt in range(self._retries + 1):
            request = urllib.request.Request(
                self.endpoint, data=body, method="POST",
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=self._timeout_s) as resp:
                    resp.read()
                self.delivered += 1
                return
            # HTTPException: a peer that does not answer HTTP (BadStatusLine ended this thread);
            # URLError is an OSError
            except (OSError, http.client.HTTPException, ValueError) as exc:
                reason = str(exc)
            if attempt < self._retries:
                with self._cond:
                    if self._closed:
                        break
                    self._cond.wait(delay)
                delay *= 2
        log.warning(
            "alertmanager push failed",
            extra={"event": "alertmanager_push_failed", "url": self.endpoint, "error": reason},
        )
        if self._on_error is not None:
            self._on_error(1)

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is pending (within ``timeout_s``) and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
