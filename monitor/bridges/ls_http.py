"""The bridge's HTTP endpoint: Label Studio's webhook, ``/metrics``, ``/healthz``, ``/readyz``.

``POST /webhook`` takes any Label Studio webhook body and only extracts task ids from it
(``task.id``, ``annotation.task``, ``annotations[].task``, ``tasks[].id``); the bridge then
reads those tasks back through the API. A webhook is thus a hint to look now, never a source
of labels: a forged or replayed call cannot publish anything Label Studio does not hold.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from monitor.io.http_server import REQUEST_TIMEOUT_S, OneLineErrors

log = logging.getLogger(__name__)
_MAX_BODY = 8 * 1024 * 1024


class BridgeMetrics:
    """The bridge's Prometheus series (prefix ``labelstudio_bridge_``)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "labelstudio_bridge"
        self.tasks_created = Counter(f"{p}_tasks_created", "Tasks created", ["model"], registry=r)
        self.tasks_adopted = Counter(
            f"{p}_tasks_adopted",
            "Tasks found in Label Studio that the state file lacked (recorded, not created)",
            ["model"],
            registry=r,
        )
        self.duplicates = Counter(
            f"{p}_tasks_duplicate",
            "Second tasks of one request removed (an import Label Studio committed after the "
            "bridge gave up on it, imported again)",
            ["model"],
            registry=r,
        )
        self.requests_repeated = Counter(
            f"{p}_requests_repeated",
            "Requests that already had a task (replay, restart): not created again",
            registry=r,
        )
        self.requests_invalid = Counter(
            f"{p}_requests_invalid", "Request records that are not valid requests", registry=r
        )
        self.answers_read = Counter(
            f"{p}_answers_read", "Answered annotations read", ["model"], registry=r
        )
        self.labels_published = Counter(
            f"{p}_labels_published", "Labels published to the label topic", ["model"], registry=r
        )
        self.edits = Counter(
            f"{p}_edits",
            "Labels published again after an edit changed a task's answer (the daemon counts "
            "them as conflicting labels)",
            ["model"],
            registry=r,
        )
        self.declined = Counter(
            f"{p}_declined",
            "Skipped or cancelled annotations (never a label)",
            ["model"],
            registry=r,
        )
        self.unreadable = Counter(
            f"{p}_unreadable_answers",
            "Annotations without exactly one of the two choices (never a label)",
            ["model"],
            registry=r,
        )
        self.expired = Counter(
            f"{p}_tasks_expired", "Open tasks removed past their deadline", ["model"], registry=r
        )
        self.deleted = Counter(
            f"{p}_tasks_deleted", "Open tasks deleted in Label Studio", ["model"], registry=r
        )
        self.queue_depth = Gauge(f"{p}_queue_depth", "Open tasks", ["model"], registry=r)
        self.requests_held = Gauge(
            f"{p}_requests_held",
            "Requests read but not imported: the model's project refuses imports",
            ["model"],
            registry=r,
        )
        self.latency = Histogram(
            f"{p}_answer_latency_seconds",
            "Wall time from task creation to its label being published",
            ["model"],
            buckets=(10, 30, 60, 300, 900, 1800, 3600, 7200, 21_600, 86_400, 259_200, 604_800),
            registry=r,
        )
        self.webhooks = Counter(f"{p}_webhooks_received", "Webhook calls received", registry=r)
        self.up = Gauge(
            f"{p}_labelstudio_up", "1 when the last Label Studio call worked", registry=r
        )
        self.errors = Counter(
            f"{p}_labelstudio_errors", "Failed Label Studio calls (retried)", registry=r
        )
        self.kafka_up = Gauge(
            f"{p}_kafka_up", "1 when the last Kafka call (probe, send, commit) worked", registry=r
        )
        self.kafka_up.set(1)
        self.ready = Gauge(
            f"{p}_ready",
            "1 while /readyz answers 200: Label Studio and Kafka answer, the topics exist and the "
            "state file takes writes",
            registry=r,
        )

    def set_depth(self, depth: Mapping[str, int], models: Iterable[str]) -> None:
        """Set the queue depth of every model (0 for those without open tasks)."""
        for model in set(models) | set(depth):
            self.queue_depth.labels(model).set(depth.get(model, 0))


def task_ids(body: Any) -> set[int]:
    """Every task id named in a Label Studio webhook body."""
    out: set[int] = set()

    def add(value: Any) -> None:
        if isinstance(value, Mapping):
            value = value.get("id")
        if isinstance(value, int) and not isinstance(value, bool):
            out.add(value)

    if not isinstance(body, Mapping):
        return out
    add(body.get("task"))
    for key, field in (("annotation", "task"), ("annotations", "task"), ("tasks", "id")):
        items = body.get(key)
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, Mapping):
                add(item.get(field) if field == "task" else item)
    return out


class _Server(OneLineErrors, ThreadingHTTPServer):
    """A threaded server whose failed requests are one log event each."""


class BridgeServer:
    """A threaded HTTP server; webhook task ids go to ``hints`` for the bridge loop."""

    def __init__(
        self,
        address: str,
        port: int,
        metrics: BridgeMetrics,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
    ) -> None:
        self.hints: queue.Queue[int] = queue.Queue()
        self.metrics = metrics
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"loop stalled\n")
                elif path == "/readyz":
                    ok = ready()
                    self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
                else:
                    self._send(404, b"not found\n")

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != "/webhook":
                    self._send(404, b"not found\n")
                    return
                text = self.headers.get("Content-Length") or "0"
                length = int(text) if text.isdigit() else -1
                if length < 0:
                    self._send(400, f"Content-Length {text[:20]!r} is not a byte count\n".encode())
                    return
                if length > _MAX_BODY:
                    self._send(413, b"too large\n")
                    return
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except (ValueError, RecursionError):  # nested too deep: RecursionError
                    self._send(400, b"not JSON\n")
                    return
                metrics.webhooks.inc()
                for task_id in task_ids(body):
                    server.hints.put(task_id)
                self._send(200, b"ok\n")

        self._httpd = _Server((address.strip("[]"), port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="bridge-http", daemon=True
        )

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return int(self._httpd.server_address[1])

    def start(self) -> BridgeServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()
