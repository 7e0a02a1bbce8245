"""Generate the Grafana dashboard of activeaudit-monitor from code.

The committed ``deploy/grafana/dashboards/activeaudit-monitor.json`` is the output of this
script; ``tests/unit/test_deploy.py`` checks that they are equal and that every metric a panel
queries is one the daemon exports (or a recording rule of ``deploy/prometheus/rules``).

Usage::

    python deploy/grafana/generate.py            # rewrite the JSON
    python deploy/grafana/generate.py --check    # exit 1 if the committed JSON is stale

Plain dictionaries and ``json.dumps``: no dependency. The layout targets Grafana's file
provisioning with dashboard ``schemaVersion`` 39 (Grafana 10.4 / 11.0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

Json = dict[str, Any]

SCHEMA_VERSION = 39
UID = "activeaudit-monitor"
OUTPUT = Path(__file__).resolve().parent / "dashboards" / "activeaudit-monitor.json"
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
# Selector of the chosen model and segment; "window" is added where a panel is repeated per
# window. A regex match on the segment: its "All" is "^$", the whole model's empty label value.
MS = 'model="$model",segment=~"$segment"'
MSW = 'model="$model",segment=~"$segment",window="$window"'
GRID_WIDTH = 24


def target(expr: str, legend: str, ref: str) -> Json:
    """One Prometheus query of a panel."""
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
    }


def targets(*queries: tuple[str, str]) -> list[Json]:
    """Queries with refIds A, B, C... in order."""
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def band_overrides(pairs: list[tuple[str, str]]) -> list[Json]:
    """Draw an interval as a shaded band: fill from each upper series down to its lower one."""
    overrides: list[Json] = []
    for lower, upper in pairs:
        overrides.append(
            {
                "matcher": {"id": "byName", "options": upper},
                "properties": [
                    {"id": "custom.fillBelowTo", "value": lower},
                    {"id": "custom.lineWidth", "value": 0},
                    {"id": "custom.fillOpacity", "value": 20},
                ],
            }
        )
        overrides.append(
            {
                "matcher": {"id": "byName", "options": lower},
                "properties": [
                    {"id": "custom.lineWidth", "value": 0},
                    {
                        "id": "custom.hideFrom",
                        "value": {"legend": True, "tooltip": False, "viz": False},
                    },
                ],
            }
        )
    return overrides


def timeseries(
    title: str,
    description: str,
    queries: list[Json],
    *,
    unit: str = "short",
    unit_range: tuple[float, float] | None = None,
    overrides: list[Json] | None = None,
    stack: bool = False,
    draw_style: str = "line",
) -> Json:
    """A time-series panel (position and id are set by ``layout``)."""
    defaults: Json = {
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": draw_style,
            "fillOpacity": 10 if stack else 0,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        },
        "unit": unit,
    }
    if unit_range is not None:
        defaults["min"], defaults["max"] = unit_range
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": queries,
        "title": title,
        "type": "timeseries",
    }


def stat(title: str, description: str, queries: list[Json], *, unit: str = "short") -> Json:
    """A single-value panel showing the latest value."""
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {
            "defaults": {"color": {"mode": "thresholds"}, "unit": unit},
            "overrides": [],
        },
        "options": {
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        "targets": queries,
        "title": title,
        "type": "stat",
    }


def per_window(panel: Json) -> Json:
    """Repeat a panel once per selected window (each copy has exactly one band)."""
    return {**panel, "repeat": "window", "repeatDirection": "h", "maxPerRow": 3}


def row(title: str) -> Json:
    """A row header."""
    return {"collapsed": False, "panels": [], "title": title, "type": "row"}


def quality_panels() -> list[Json]:
    """The estimates: F with its interval, precision and recall, trust, drift."""
    f_band = per_window(
        timeseries(
            "F estimate and confidence interval ($window)",
            "Audited F_alpha of the window (line) and its confidence interval (band). The "
            "critical alert fires when the upper bound stays below the floor. With "
            "estimator: model_assisted, 'ratio' is the plain ratio estimate beside it.",
            targets(
                (f"monitor_f_measure{{{MSW}}}", "F"),
                (f"monitor_f_measure_ci_lower{{{MSW}}}", "lower"),
                (f"monitor_f_measure_ci_upper{{{MSW}}}", "upper"),
                (f"monitor_f_measure_ratio{{{MSW}}}", "ratio"),
            ),
            unit="percentunit",
            unit_range=(0.0, 1.0),
            overrides=band_overrides([("lower", "upper")]),
        )
    )
    pr_band = per_window(
        timeseries(
            "Precision and recall ($window)",
            "Audited precision and recall of the window with their confidence intervals.",
            targets(
                (f"monitor_precision{{{MSW}}}", "precision"),
                (f"monitor_precision_ci_lower{{{MSW}}}", "precision lower"),
                (f"monitor_precision_ci_upper{{{MSW}}}", "precision upper"),
                (f"monitor_recall{{{MSW}}}", "recall"),
                (f"monitor_recall_ci_lower{{{MSW}}}", "recall lower"),
                (f"monitor_recall_ci_upper{{{MSW}}}", "recall upper"),
            ),
            unit="percentunit",
            unit_range=(0.0, 1.0),
            overrides=band_overrides(
                [("precision lower", "precision upper"), ("recall lower", "recall upper")]
            ),
        )
    )
    intrinsic = timeseries(
        "Intrinsic vs audited F",
        "Label-free F_alpha computed from the scores of all traffic (as if the scores were "
        "calibrated) against the audited estimate. A gap beyond the interval means the scores "
        "are no longer calibrated; 'scores disagree' is 1 where the gap is beyond the interval "
        "at 1%, and the intervals of F and recall then allow for false negatives the design "
        "missed.",
        targets(
            (f"monitor_intrinsic_f_measure{{{MS}}}", "intrinsic {{window}}"),
            (f"monitor_f_measure{{{MS}}}", "audited {{window}}"),
            (f"monitor_scores_disagree{{{MS}}}", "scores disagree {{window}}"),
        ),
        unit="percentunit",
        unit_range=(0.0, 1.0),
        overrides=[  # a 0/1 flag, not a share: no percent on its values
            {
                "matcher": {"id": "byRegexp", "options": "^scores disagree"},
                "properties": [{"id": "unit", "value": "none"}],
            }
        ],
    )
    likelihood = timeseries(
        "Model likelihood",
        "Likelihood of the audit labels under the model's scores (per label); it falls when "
        "the scores stop being trustworthy.",
        targets((f"monitor_model_likelihood{{{MS}}}", "{{window}}")),
    )
    ess = timeseries(
        "Effective sample size",
        "Effective number of labels behind each estimate, (sum v)^2 / sum v^2 of the audit "
        "weights.",
        targets((f"monitor_effective_sample_size{{{MS}}}", "{{window}}")),
    )
    drift = timeseries(
        "Score drift (PSI)",
        "Population stability index of the score histogram against the preceding window. "
        "Above 0.2 the traffic changed markedly.",
        targets((f"monitor_score_psi{{{MS}}}", "{{window}}")),
    )
    share = timeseries(
        "Defensive share",
        "Share of the audit budget new decisions draw uniformly under the model's calibration "
        "map. 0.8: the last 24 h of labels found positives among the low scores that the map "
        "does not expect (new mistakes the scores do not show).",
        targets(('monitor_calibration_defensive_share{model="$model"}', "{{instance}}")),
        unit="percentunit",
        unit_range=(0.0, 1.0),
    )
    return [f_band, pr_band, intrinsic, likelihood, ess, drift, share]


def label_panels() -> list[Json]:
    """The audit: budget spent, requests and their fate."""
    budget = timeseries(
        "Label budget: requested vs budget",
        "Audit requests issued and labels received per hour (averaged over 1 h) against the "
        "configured budget. MonitorLabelBudgetExhausted fires above 1.5x over 6 h.",
        targets(
            (
                'job_model:monitor_audit_requests_per_hour:rate1h{model="$model"}',
                "requests per hour",
            ),
            (
                'job_model:monitor_labels_received_per_hour:rate1h{model="$model"}',
                "labels per hour",
            ),
            ('max(monitor_label_budget_per_hour{model="$model"})', "budget per hour"),
        ),
    )
    spent = stat(
        "Budget spent (1 h)",
        "Requests issued over the last hour as a share of the budget.",
        targets(('job_model:monitor_label_budget_spent:ratio1h{model="$model"}', "spent")),
        unit="percentunit",
    )
    fate = timeseries(
        "Audit requests: answered, pending, missing",
        "Per window: labels received, requests still waiting (before their deadline) and "
        "requests past their deadline without a label. Many missing labels can bias the "
        "estimate if auditors skip hard items.",
        targets(
            (f"monitor_window_audit_requests{{{MS}}}", "requested {{window}}"),
            (f"monitor_window_labels{{{MS}}}", "answered {{window}}"),
            (f"monitor_labels_pending{{{MS}}}", "pending {{window}}"),
            (f"monitor_labels_missing{{{MS}}}", "missing {{window}}"),
        ),
    )
    completion = timeseries(
        "Label completion",
        "Labels received / audit requests issued, per window.",
        targets((f"monitor_label_completion_ratio{{{MS}}}", "{{window}}")),
        unit="percentunit",
        unit_range=(0.0, 1.0),
    )
    answers = per_window(
        timeseries(
            "Answer rate per prediction stratum ($window)",
            "Answered / issued audit requests of the window, for predicted negatives and "
            "positives. The estimate reweights each class of requests by its answer rate and "
            "assumes answers are missing at random within a class: very different or low rates "
            "(auditors skipping one stratum) make that assumption matter; compare with the "
            "worst-case bounds.",
            targets((f"monitor_answer_rate{{{MSW}}}", "pred={{pred}}")),
            unit="percentunit",
            unit_range=(0.0, 1.0),
        )
    )
    pending = timeseries(
        "Pending and missing shares of the window's weight",
        "Share of the window's sampling weight sum(1/pi) in requests not answered yet (how much "
        "of the estimate still rests on labels to come) and past their deadline without a label "
        "(skipped or lost: the estimate assumes they are missing at random within their class).",
        targets(
            (f"monitor_pending_weight_ratio{{{MS}}}", "pending {{window}}"),
            (f"monitor_missing_weight_ratio{{{MS}}}", "missing {{window}}"),
        ),
        unit="percentunit",
        unit_range=(0.0, 1.0),
    )
    worst = per_window(
        timeseries(
            "F-measure: worst case over unanswered labels ($window)",
            "The estimate with its confidence interval, and the lowest and highest value the "
            "estimate could take whatever the unanswered labels turn out to be (no assumption on "
            "why they are missing).",
            targets(
                (f"monitor_f_measure{{{MSW}}}", "estimate"),
                (f"monitor_f_measure_worst_case_lower{{{MSW}}}", "worst case low"),
                (f"monitor_f_measure_worst_case_upper{{{MSW}}}", "worst case high"),
            ),
            unit="percentunit",
            unit_range=(0.0, 1.0),
        )
    )
    latency = timeseries(
        "Label latency (median, 90th percentile)",
        "Event time from a record to its accepted label, over the last 6 h.",
        targets(
            (
                "histogram_quantile(0.5, sum by (le) "
                '(rate(monitor_label_latency_seconds_bucket{model="$model"}[6h])))',
                "median",
            ),
            (
                "histogram_quantile(0.9, sum by (le) "
                '(rate(monitor_label_latency_seconds_bucket{model="$model"}[6h])))',
                "p90",
            ),
        ),
        unit="s",
    )
    return [budget, spent, fate, completion, answers, pending, worst, latency]


def pipeline_panels() -> list[Json]:
    """The daemon: throughput, lag, batch time, dead letters, event-time progress."""
    throughput = timeseries(
        "Throughput",
        "Scored records consumed per second (5 min average) and audit requests issued.",
        targets(
            ('job_model:monitor_records:rate5m{model="$model"}', "records/s"),
            (
                'sum by (model) (rate(monitor_audit_requests_total{model="$model"}'
                "[$__rate_interval]))",
                "requests/s",
            ),
        ),
        unit="ops",
    )
    window_records = timeseries(
        "Records per window",
        "Scored records counted in each reported window.",
        targets((f"monitor_window_records{{{MS}}}", "{{window}}")),
    )
    lag = timeseries(
        "Consumer lag",
        "Records not yet consumed, summed per topic. MonitorConsumerLagGrowing fires when it "
        "keeps growing for 30 min. Below it, records deleted before they were read over the "
        "last hour (MonitorRecordsSkipped).",
        targets(
            ("job_topic:monitor_consumer_lag:sum", "{{topic}}"),
            (
                "sum by (topic) (increase(monitor_records_skipped_total[1h])) > 0",
                "skipped: {{topic}}",
            ),
        ),
    )
    batch = timeseries(
        "Batch processing time",
        "Time to process one polled batch (decode, decide, produce, store).",
        targets(
            (
                "histogram_quantile(0.5, sum by (le) "
                "(rate(monitor_batch_seconds_bucket[$__rate_interval])))",
                "p50",
            ),
            (
                "histogram_quantile(0.99, sum by (le) "
                "(rate(monitor_batch_seconds_bucket[$__rate_interval])))",
                "p99",
            ),
        ),
        unit="s",
    )
    dead_letters = timeseries(
        "Dead letters by reason",
        "Input records rejected to the dead-letter topic per second, by input topic and reason.",
        targets(
            (
                "sum by (input, reason) "
                "(rate(monitor_invalid_records_total[$__rate_interval])) > 0",
                "{{input}}: {{reason}}",
            )
        ),
        unit="ops",
        stack=True,
    )
    watermark = timeseries(
        "Event-time delay",
        "Wall clock minus the model's watermark (latest event time seen): how far behind "
        "real time the estimates are.",
        targets(('time() - monitor_watermark_timestamp_seconds{model="$model"}', "{{model}}")),
        unit="s",
    )
    folded = timeseries(
        "Records folded into __other__",
        "Scored records per second whose segment was over the per-model segment limit "
        "(sampling.max_segments_per_model) and are reported under the segment __other__.",
        targets(
            (
                'sum by (model) (rate(monitor_segments_folded_total{model="$model"}'
                "[$__rate_interval]))",
                "{{model}}",
            )
        ),
        unit="ops",
    )
    return [throughput, window_records, lag, batch, dead_letters, watermark, folded]


def alert_panels() -> list[Json]:
    """What is firing now, and the daemon's own decisions over time."""
    firing = {
        "datasource": DATASOURCE,
        "description": "Prometheus alerts of the monitor currently firing.",
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"cellHeight": "sm", "showHeader": True},
        "targets": [
            {
                **target('ALERTS{alertstate="firing",alertname=~"Monitor.*"}', "", "A"),
                "format": "table",
                "instant": True,
                "range": False,
            }
        ],
        "title": "Firing alerts",
        "transformations": [
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
            }
        ],
        "type": "table",
    }
    decisions = timeseries(
        "Daemon alert decisions",
        "The daemon's own interval-based decisions (1 = active) for the selected model and "
        "segment.",
        targets(
            (
                f"monitor_alert_active{{{MS}}}",
                "{{alert}} {{segment}} {{window}}",
            )
        ),
        unit_range=(0.0, 1.0),
        draw_style="bars",
    )
    health = stat(
        "Daemon ready",
        "1 when the daemon consumes (monitor_ready), per instance.",
        targets(("monitor_ready", "{{instance}}")),
    )
    push_errors = stat(
        "Alertmanager push failures (24 h)",
        "Alert pushes from the daemon to Alertmanager that failed after their retries "
        "(only when the daemon is configured to push; Prometheus delivers the rules' alerts).",
        targets(("sum(increase(monitor_alertmanager_errors_total[24h]))", "failures")),
    )
    return [firing, decisions, health, push_errors]


def template_variables() -> list[Json]:
    """Data source, model, segment and window pickers."""

    def query_var(name: str, label: str, query: str, *, multi: bool) -> Json:
        return {
            "current": {},
            "datasource": DATASOURCE,
            "definition": query,
            "hide": 0,
            "includeAll": multi,
            "label": label,
            "multi": multi,
            "name": name,
            "options": [],
            "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
            "refresh": 2,
            "regex": "",
            "skipUrlSync": False,
            "sort": 1,
            "type": "query",
        }

    return [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_var(
            "model", "Model", "label_values(monitor_label_budget_per_hour, model)", multi=False
        ),
        # segment="" is the model as a whole, exported as an empty label value, which
        # label_values never lists: "All" (the default) selects it by the regex "^$"
        {
            **query_var(
                "segment",
                "Segment",
                'label_values(monitor_window_records{model="$model"}, segment)',
                multi=False,
            ),
            "includeAll": True,
            "allValue": "^$",
            "current": {"selected": True, "text": "All", "value": "$__all"},
            "description": "All: the model as a whole; a value: that segment alone.",
        },
        query_var(
            "window",
            "Window",
            'label_values(monitor_window_records{model="$model"}, window)',
            multi=True,
        ),
    ]


def layout(sections: list[tuple[str, list[Json]]]) -> list[Json]:
    """Place rows and panels on Grafana's 24-column grid, three panels (8 wide) per line."""
    panels: list[Json] = []
    y = 0
    next_id = 1
    width, height = 8, 8
    for title, section in sections:
        header = row(title)
        header["gridPos"] = {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}
        header["id"] = next_id
        next_id += 1
        panels.append(header)
        y += 1
        for i, panel in enumerate(section):
            x = (i % (GRID_WIDTH // width)) * width
            if i and x == 0:
                y += height
            panels.append(
                {**panel, "gridPos": {"h": height, "w": width, "x": x, "y": y}, "id": next_id}
            )
            next_id += 1
        y += height
    return panels


def dashboard() -> Json:
    """The whole dashboard as a JSON-ready dictionary."""
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": "Live F-measure of a production classifier with its confidence interval, "
        "from few audit labels (activeaudit-monitor).",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": layout(
            [
                ("Quality of the model", quality_panels()),
                ("Audit labels", label_panels()),
                ("Pipeline", pipeline_panels()),
                ("Alerts", alert_panels()),
            ]
        ),
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["activeaudit-monitor", "ml-monitoring"],
        "templating": {"list": template_variables()},
        "time": {"from": "now-7d", "to": "now"},
        "timepicker": {},
        "timezone": "utc",
        "title": "activeaudit-monitor",
        "uid": UID,
        "version": 1,
        "weekStart": "",
    }


def render() -> str:
    """The dashboard as the exact text committed in ``dashboards/``."""
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the dashboard JSON, or with ``--check`` report whether it is up to date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
