"""Prometheus exposition: the only module importing ``prometheus_client``.

Two kinds of metrics live in one injectable ``CollectorRegistry``:

- Estimates come from the latest published ``Snapshot`` (and alert list). Publishing is one
  reference swap; a custom collector renders whatever is current at scrape time, so a scrape never
  sees half-updated ``value/lower/upper`` and series of expired windows disappear on their own.
  Undefined (NaN) estimates are omitted, never exported as 0.
- Process counters, the batch histogram and gauges are ordinary client metrics; every
  ``RejectReason`` child of ``monitor_invalid_records_total`` exists from start-up at 0.

``start_http`` serves ``/metrics``, ``/healthz`` (200 while the process is alive) and ``/readyz``
(200 once ``set_ready(True)``, else 503) from a WSGI server in a daemon thread; ``stop`` shuts it
down.
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor import __version__
from monitor.config.schema import Config
from monitor.core.alerts import AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate
from monitor.errors import ConfigError, RejectReason
from monitor.io.http_server import REQUEST_TIMEOUT_S, OneLineErrors
from monitor.stats.budget import Calibration
from monitor.stats.estimate import Estimate

log = logging.getLogger(__name__)

WINDOW_LABELS = ("model", "segment", "window")
ALERT_LABELS = ("alert", "model", "segment", "window")
#: label latency histogram buckets, seconds of event time (1 min .. 1 week)
LATENCY_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
                   172800.0, 604800.0)  # fmt: skip
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# (family suffix, help) of the three interval-valued measures; rendered as NAME, NAME_ci_lower
# and NAME_ci_upper
_MEASURES: tuple[tuple[str, str, Callable[[WindowEstimate], Estimate]], ...] = (
    ("f_measure", "Estimated F_alpha of the audited model", lambda w: w.f),
    ("precision", "Estimated precision of the audited model", lambda w: w.precision),
    ("recall", "Estimated recall of the audited model", lambda w: w.recall),
)


def alpha_label(alpha: float) -> str:
    """The ``alpha`` label value: shortest decimal form (0.5 -> "0.5", 1.0 -> "1")."""
    return format(alpha, "g")


def _finite(value: float) -> bool:
    return not math.isnan(value)


class _Families:
    """Gauge families being filled for one scrape, created on first use."""

    def __init__(self) -> None:
        self._families: dict[str, GaugeMetricFamily] = {}

    def add(
        self, name: str, doc: str, labels: Sequence[str], values: Sequence[str], value: float
    ) -> None:
        """Add one sample unless ``value`` is NaN (missing estimates are omitted)."""
        family = self._families.get(name)
        if family is None:
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            self._families[name] = family
        if _finite(value):
            family.add_metric(list(values), float(value))

    def __iter__(self) -> Iterator[Metric]:
        return iter(f for f in self._families.values() if f.samples)


class SnapshotCollector(Collector):
    """Renders the latest ``Snapshot`` and alert list at scrape time."""

    def __init__(self) -> None:
        self._snapshot = Snapshot()
        self._alerts: tuple[AlertStatus, ...] = ()

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot (one reference assignment, atomic under the GIL)."""
        self._snapshot = snapshot

    def publish_alerts(self, alerts: Sequence[AlertStatus]) -> None:
        """Swap in a new alert list."""
        self._alerts = tuple(alerts)

    def describe(self) -> list[Metric]:
        """No fixed description: the families depend on the snapshot."""
        return []

    def collect(self) -> Iterable[Metric]:
        """Build every gauge family from the current snapshot and alerts."""
        snapshot, alerts = self._snapshot, self._alerts  # read each reference once
        fam = _Families()
        for w in snapshot.windows:
            _render_window(fam, w)
        for model, ts in sorted(snapshot.watermarks.items()):
            fam.add(
                "monitor_watermark_timestamp_seconds",
                "Largest event time seen on the scored stream of the model",
                ("model",),
                (model,),
                ts,
            )
        for a in alerts:
            values = (a.alert, a.model, a.segment, a.window)
            fam.add(
                "monitor_alert_active",
                "1 while the alert holds for the (model, segment, window), else 0",
                ALERT_LABELS,
                values,
                1.0 if a.active else 0.0,
            )
            fam.add(
                "monitor_alert_bound",
                "Confidence bound (or statistic) the alert decision was taken on",
                ALERT_LABELS,
                values,
                a.bound,
            )
            fam.add(
                "monitor_alert_threshold",
                "Threshold the alert bound is compared with (floor, reference, likelihood floor)",
                ALERT_LABELS,
                values,
                a.threshold,
            )
        return list(fam)


def _render_answers(fam: _Families, w: WindowEstimate, base: tuple[str, str, str]) -> None:
    """Answer rates per prediction stratum, pending weight and worst-case bounds (issue 11)."""
    for pred, rate in zip(("0", "1"), w.answer_rate, strict=True):
        fam.add(
            "monitor_answer_rate",
            "Answered / issued audit requests of the window, per prediction stratum",
            (*WINDOW_LABELS, "pred"),
            (*base, pred),
            rate,
        )
    fam.add(
        "monitor_pending_weight_ratio",
        "Share of the window's sampling weight sum(1/pi) in requests not answered yet",
        WINDOW_LABELS,
        base,
        w.pending_weight,
    )
    fam.add(
        "monitor_missing_weight_ratio",
        "Share of the window's sampling weight sum(1/pi) in requests past their deadline "
        "without a label (skipped or lost)",
        WINDOW_LABELS,
        base,
        w.missing_weight,
    )
    with_alpha = (*WINDOW_LABELS, "alpha")
    alpha_values = (*base, alpha_label(w.alpha))
    for name, doc, (low, high) in (
        ("f_measure", "F_alpha", w.worst.f),
        ("precision", "Precision", w.worst.precision),
        ("recall", "Recall", w.worst.recall),
    ):
        labels, values = (
            (with_alpha, alpha_values) if name == "f_measure" else (WINDOW_LABELS, base)
        )
        text = f"{doc} whatever the unanswered labels turn out to be"
        fam.add(f"monitor_{name}_worst_case_lower", f"{text}: lowest", labels, values, low)
        fam.add(f"monitor_{name}_worst_case_upper", f"{text}: highest", labels, values, high)


def _render_ratio(fam: _Families, w: WindowEstimate, base: tuple[str, str, str]) -> None:
    """With ``estimator: model_assisted``: the ratio estimates beside the exported ones."""
    if w.ratio is None:
        return
    with_alpha = (*WINDOW_LABELS, "alpha")
    alpha_values = (*base, alpha_label(w.alpha))
    for (name, doc, _), est, used in zip(_MEASURES, w.ratio, w.assisted, strict=True):
        labels, values = (
            (with_alpha, alpha_values) if name == "f_measure" else (WINDOW_LABELS, base)
        )
        text = f"{doc} by the ratio estimator (for comparison)"
        fam.add(f"monitor_{name}_ratio", text, labels, values, est.value)
        fam.add(f"monitor_{name}_ratio_ci_lower", f"{text}: lower bound", labels, values, est.lower)
        fam.add(f"monitor_{name}_ratio_ci_upper", f"{text}: upper bound", labels, values, est.upper)
        fam.add(
            "monitor_estimate_model_assisted",
            "1 when the exported measure is the model-assisted estimate, 0 when the ratio one",
            (*WINDOW_LABELS, "measure"),
            (*base, name),
            1.0 if used else 0.0,
        )


def _render_window(fam: _Families, w: WindowEstimate) -> None:
    base = (w.model, w.segment, w.window)
    with_alpha = (*WINDOW_LABELS, "alpha")
    alpha_values = (*base, alpha_label(w.alpha))
    _render_ratio(fam, w, base)
    for name, doc, get in _MEASURES:
        labels, values = (
            (with_alpha, alpha_values) if name == "f_measure" else (WINDOW_LABELS, base)
        )
        est = get(w)
        fam.add(f"monitor_{name}", doc, labels, values, est.value)
        fam.add(
            f"monitor_{name}_ci_lower", f"{doc}: lower confidence bound", labels, values, est.lower
        )
        fam.add(
            f"monitor_{name}_ci_upper", f"{doc}: upper confidence bound", labels, values, est.upper
        )
    fam.add(
        "monitor_intrinsic_f_measure",
        "Label-free F_alpha the model believes it has, from the scores of all traffic",
        with_alpha,
        alpha_values,
        w.intrinsic_f,
    )
    fam.add(
        "monitor_intrinsic_f_measure_recalibrated",
        "Label-free F_alpha from the scores recalibrated on the audited labels, all traffic",
        with_alpha,
        alpha_values,
        w.intrinsic_f_recalibrated,
    )
    gauges: tuple[tuple[str, str, float], ...] = (
        (
            "monitor_calibration_error",
            "Design-weighted expected calibration error of the scores on the audited items",
            w.calibration_error,
        ),
        ("monitor_model_likelihood", "Model likelihood on the audited items", w.likelihood),
        ("monitor_effective_sample_size", "Effective sample size of the labelled items", w.ess),
        ("monitor_window_records", "Scored records in the window", float(w.records)),
        (
            "monitor_window_audit_requests",
            "Audit requests issued for the window",
            float(w.requests),
        ),
        ("monitor_window_labels", "Labels received for the window", float(w.labels)),
        ("monitor_labels_pending", "Audit requests not answered yet", float(w.pending)),
        (
            "monitor_labels_missing",
            "Audit requests past their deadline unanswered",
            float(w.missing),
        ),
        (
            "monitor_label_completion_ratio",
            "Labels received / audit requests of the window",
            w.labels / w.requests if w.requests > 0 else math.nan,
        ),
        ("monitor_score_psi", "Population stability index of the scores", w.psi),
        (
            "monitor_scores_disagree",
            "1 when the scores' label-free F is outside the audited interval at 1% and the "
            "intervals of F and recall also allow for false negatives the design missed",
            float(w.scores_disagree),
        ),
    )
    for name, doc, value in gauges:
        fam.add(name, doc, WINDOW_LABELS, base, value)
    _render_answers(fam, w, base)
    c = w.confusion
    for cell, value in (("tp", c.tp), ("fp", c.fp), ("fn", c.fn), ("tn", c.tn)):
        fam.add(
            "monitor_confusion_estimate",
            "Estimated confusion counts over the window's traffic",
            (*WINDOW_LABELS, "cell"),
            (*base, cell),
            value,
        )


class _QuietHandler(WSGIRequestHandler):
    """Request handler that does not print one line per scrape, nor waits on a silent client."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _ThreadingServer(OneLineErrors, ThreadingMixIn, WSGIServer):
    """One daemon thread per request: a stuck scrape never blocks shutdown."""

    daemon_threads = True


class _IPv6Server(_ThreadingServer):
    address_family = socket.AF_INET6


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Exporter:
    """The daemon's only window on Prometheus (see the module docstring)."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self._collector = SnapshotCollector()
        self.registry.register(self._collector)
        self._ready = False
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        r = self.registry
        models = sorted(config.models)

        self._records = Counter("monitor_records", "Scored records consumed", ["model"], registry=r)
        self._requests = Counter(
            "monitor_audit_requests", "Audit requests produced", ["model"], registry=r
        )
        self._labels = Counter(
            "monitor_labels_received", "Valid labels joined to a request", ["model"], registry=r
        )
        for model in models:
            for counter in (self._records, self._requests, self._labels):
                counter.labels(model=model)
        self._rejects = Counter(
            "monitor_invalid_records",
            "Input records sent to the dead-letter topic, by input topic (scored, labels, "
            "requests, aggregates) and reason",
            ["input", "reason"],
            registry=r,
        )
        for reason in RejectReason:  # what a rule divides by exists before the first reject
            for source in ("scored", "labels"):
                self._rejects.labels(input=source, reason=reason.value)
        self._minimal = Counter(
            "monitor_deadletters_minimal",
            "Dead letters the dead-letter topic refused as too large (its max.message.bytes), "
            "written with only the reason, the source record's place and its sizes",
            registry=r,
        )
        self._folded = Counter(
            "monitor_segments_folded",
            "Scored records whose new segment was over the per-model limit (reported as __other__)",
            ["model"],
            registry=r,
        )
        for model in models:
            self._folded.labels(model=model)
        self._duplicate_ids = Counter(
            "monitor_duplicate_record_ids",
            "Audited records whose id an earlier audited record of the model had with another "
            "score, event time or segment (the earlier request stands)",
            ["model"],
            registry=r,
        )
        for model in models:
            self._duplicate_ids.labels(model=model)
        self._maps_ignored = Counter(
            "monitor_calibration_maps_ignored",
            "Calibration maps a sampler read but did not take: a version below the one it holds "
            "(older), equal to it with other parameters (conflicting), or in a later release's "
            "format (later_format); 0 unless two estimators publish or an upgrade took the "
            "estimator before the samplers",
            ["model", "reason"],
            registry=r,
        )
        for model in models:
            if config.models[model].recalibrate:
                for why in ("older", "conflicting", "later_format"):
                    self._maps_ignored.labels(model=model, reason=why)
        self._cal_version = Gauge(
            "monitor_calibration_version",
            "Version of the calibration map new audit decisions of the model use (0: none yet)",
            ["model"],
            registry=r,
        )
        self._segment_map = Gauge(
            "monitor_calibration_segment_map",
            "1 for each segment whose labels rejected the model's calibration map and that is "
            "recalibrated by a map of its own",
            ["model", "segment"],
            registry=r,
        )
        self._share = Gauge(
            "monitor_calibration_defensive_share",
            "Share of the model's audit budget new decisions draw uniformly under its calibration "
            "(the configured share while no map is in force; a score shift may raise a control's)",
            ["model"],
            registry=r,
        )
        self._segment_maps: dict[str, set[str]] = {}
        for model in models:
            if config.models[model].recalibrate:
                self._cal_version.labels(model=model)
                self._share.labels(model=model).set(config.models[model].defensive)
        self._am_errors = Counter(
            "monitor_alertmanager_errors",
            "Alert pushes to Alertmanager that failed after their retries",
            registry=r,
        )
        self._batch = Histogram(
            "monitor_batch_seconds",
            "Wall time to process one consumed batch",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self._latency = Histogram(
            "monitor_label_latency_seconds",
            "Event time from a record to its accepted label (the watermark at acceptance)",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._lag = Gauge(
            "monitor_consumer_lag",
            "Records between the consumer position and the end of the partition, per "
            "partition assigned to this process",
            ["topic", "partition"],
            registry=r,
        )
        self._lag_keys: set[tuple[str, int]] = set()
        self._skipped = Counter(
            "monitor_records_skipped",
            "Records deleted (retention, delete-records) before this process read them: in no "
            "count or estimate",
            ["topic", "partition"],
            registry=r,
        )
        budget = Gauge(
            "monitor_label_budget_per_hour",
            "Configured audit label budget (labels per hour)",
            ["model"],
            registry=r,
        )
        expected = Gauge(
            "monitor_expected_records_per_hour",
            "Configured total traffic of the model (expected_records_per_hour), records per hour",
            ["model"],
            registry=r,
        )
        for model in models:
            budget.labels(model=model).set(config.models[model].labels_per_hour)
            expected.labels(model=model).set(config.models[model].expected_records_per_hour)
        self._ready_gauge = Gauge(
            "monitor_ready",
            "1 once connected and state loaded and consuming (a sampler: or a standby), else 0",
            registry=r,
        )
        info = Gauge(
            "monitor_build_info", "Version of the running monitor", ["version"], registry=r
        )
        info.labels(version=__version__).set(1)

    # --- estimates -----------------------------------------------------------------------

    def publish(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the one rendered by the next scrape (atomic reference swap)."""
        self._collector.publish(snapshot)

    def publish_alerts(self, alerts: Sequence[AlertStatus]) -> None:
        """Make ``alerts`` the alert state rendered by the next scrape."""
        self._collector.publish_alerts(alerts)

    # --- process metrics -----------------------------------------------------------------

    def count_records(self, per_model: Mapping[str, int]) -> None:
        """Add consumed scored records per model."""
        _add(self._records, ("model",), {(m,): n for m, n in per_model.items()})

    def count_requests(self, per_model: Mapping[str, int]) -> None:
        """Add produced audit requests per model."""
        _add(self._requests, ("model",), {(m,): n for m, n in per_model.items()})

    def count_labels(self, per_model: Mapping[str, int]) -> None:
        """Add valid labels received per model."""
        _add(self._labels, ("model",), {(m,): n for m, n in per_model.items()})

    def observe_label_latency(self, per_model: Mapping[str, Sequence[float]]) -> None:
        """Record the event-time latencies of accepted labels per model."""
        for model, latencies in per_model.items():
            child = self._latency.labels(model=model)
            for seconds in latencies:
                child.observe(seconds)

    def count_rejects(self, per_input: Mapping[tuple[str, RejectReason], int]) -> None:
        """Add dead-lettered records per (input, reason) (``TopicsConfig.input_of``)."""
        _add(
            self._rejects, ("input", "reason"), {(i, str(r)): n for (i, r), n in per_input.items()}
        )

    def count_segments_folded(self, per_model: Mapping[str, int]) -> None:
        """Add scored records folded into ``__other__`` by the segment limit, per model."""
        _add(self._folded, ("model",), {(m,): n for m, n in per_model.items()})

    def count_duplicate_ids(self, per_model: Mapping[str, int]) -> None:
        """Add audited records whose id came again with other content, per model."""
        _add(self._duplicate_ids, ("model",), {(m,): n for m, n in per_model.items()})

    def count_maps_ignored(self, model: str, reason: str) -> None:
        """Add one calibration map a sampler ignored (older, conflicting or later_format)."""
        self._maps_ignored.labels(model=model, reason=reason).inc()

    def set_calibration(self, model: str, calibration: Calibration, defensive: float) -> None:
        """Show the calibration in force: version, defensive share, segments with their own map.

        The share is ``Calibration.share`` of the configured ``defensive``.
        """
        self._cal_version.labels(model=model).set(calibration.version)
        self._share.labels(model=model).set(calibration.share(defensive))
        now = {g for g, _ in calibration.segments}
        for gone in self._segment_maps.get(model, set()) - now:
            self._segment_map.remove(model, gone)
        for g in sorted(now):
            self._segment_map.labels(model=model, segment=g).set(1)
        self._segment_maps[model] = now

    def count_alertmanager_errors(self, n: int = 1) -> None:
        """Add failed Alertmanager pushes (callback for ``AlertmanagerPusher(on_error=...)``)."""
        if n > 0:
            self._am_errors.inc(n)

    def observe_batch(self, seconds: float) -> None:
        """Record the wall time of one processed batch."""
        self._batch.observe(seconds)

    def set_lags(self, lags: Mapping[tuple[str, int], int]) -> None:
        """Set the consumer lag of each topic-partition in ``lags`` and drop the others' series.

        ``lags`` holds the partitions assigned now: one a rebalance moved to another process
        must not keep exporting the lag it had then (summed per topic, it counted twice).
        """
        for topic, partition in self._lag_keys - lags.keys():
            self._lag.remove(topic, str(partition))
        for (topic, partition), lag in lags.items():
            self._lag.labels(topic=topic, partition=str(partition)).set(lag)
        self._lag_keys = set(lags)

    def count_skipped(self, skipped: Mapping[tuple[str, int], int]) -> None:
        """Add the records deleted before they were read, per topic-partition."""
        for (topic, partition), n in skipped.items():
            self._skipped.labels(topic=topic, partition=str(partition)).inc(n)

    def count_deadletters_minimal(self, n: int) -> None:
        """Add the dead letters written in their minimal form (``Sink.fallbacks``)."""
        if n:
            self._minimal.inc(n)

    def set_ready(self, ready: bool) -> None:
        """Flip readiness (``/readyz`` and ``monitor_ready``)."""
        self._ready = bool(ready)
        self._ready_gauge.set(1 if ready else 0)

    # --- HTTP ----------------------------------------------------------------------------

    def wsgi_app(self) -> WsgiApp:
        """The WSGI application behind ``start_http`` (also usable in another server)."""
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                try:
                    body: Iterable[bytes] = metrics_app(environ, start_response)
                except Exception:  # a collector's fault: one log event, not wsgiref's traceback
                    log.exception("metrics not rendered", extra={"event": "metrics_render_failed"})
                    return _text(
                        start_response, "500 Internal Server Error", b"metrics not rendered\n"
                    )
                return body
            if path == "/healthz":
                return _text(start_response, "200 OK", b"ok\n")
            if path == "/readyz":
                if self._ready:
                    return _text(start_response, "200 OK", b"ready\n")
                return _text(start_response, "503 Service Unavailable", b"not ready\n")
            return _text(start_response, "404 Not Found", b"not found: try /metrics\n")

        return app

    @property
    def port(self) -> int | None:
        """The port actually bound (useful with ``metrics.port: 0``), None before start."""
        return None if self._server is None else int(self._server.server_address[1])

    def start_http(self) -> None:
        """Serve /metrics, /healthz and /readyz on ``metrics.listen_address:metrics.port``.

        Raises:
            ConfigError: the address cannot be bound (port in use, address not local...).
        """
        if self._server is not None:
            return
        host, port = self.config.metrics.listen_address, self.config.metrics.port
        server_class = _IPv6Server if ":" in host else _ThreadingServer
        try:
            server = make_server(
                host, port, self.wsgi_app(), server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "metrics.port", "another process is using the port"
            else:  # e.g. EADDRNOTAVAIL: an address of no interface of this machine
                why = "metrics.listen_address", "use an address of this machine, or 0.0.0.0"
            msg = f"{why[0]}: cannot listen on {host}:{port} ({exc.strerror or exc}); {why[1]}"
            raise ConfigError(msg) from exc
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http"
        )
        thread.daemon = True
        thread.start()
        self._server, self._thread = server, thread
        log.info(
            "metrics served",
            extra={"event": "metrics_http_started", "address": host, "port": self.port},
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Shut the HTTP server down (idempotent, bounded by ``timeout_s``)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout_s)
        log.info("metrics server stopped", extra={"event": "metrics_http_stopped"})


def _add(counter: Counter, labels: tuple[str, ...], amounts: Mapping[tuple[str, ...], int]) -> None:
    """Add each amount to the child of its label values (``labels`` names them, in order)."""
    for values, n in amounts.items():
        if n < 0:
            where = " ".join(f"{k}={v}" for k, v in zip(labels, values, strict=True))
            msg = f"counter {where}: cannot add a negative amount ({n})"
            raise ValueError(msg)
        if n:
            counter.labels(*(str(v) for v in values)).inc(n)


def _text(start_response: Callable[..., Any], status: str, body: bytes) -> list[bytes]:
    start_response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [body]
