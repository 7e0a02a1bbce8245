"""A person labels in a browser and the daemon's estimate moves.

Headless Debian ``chromium`` driven by Playwright (never ``playwright install``) logs into the
real Label Studio, opens an audit task the bridge created from one of the daemon's requests,
clicks a choice and submits. The daemon's ``monitor_labels_received_total`` grows by one and
its F-measure estimate changes. The class clicked is chosen so that the estimate must change:
a false positive when the current precision is above 0, a true positive otherwise, on a task
the model predicted positive (a true negative would leave F unchanged). A screenshot of the
task page is kept under ``test-artifacts/`` (its path is printed).
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.schema import TopicsConfig
from monitor.sim.embedded_broker import EmbeddedBroker
from tests.conftest import missing_component
from tests.integration.ls_helpers import (
    DaemonRun,
    annotate,
    stream_into_labelstudio,
    wait_for,
    wait_snapshot_labels,
)

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def cleanup() -> Iterator[list[LabelStudioBridge | DaemonRun]]:
    made: list[LabelStudioBridge | DaemonRun] = []
    yield made
    for thing in made:
        thing.stop()


def _f_value(run: DaemonRun, window: str) -> float | None:
    for line in run.metrics_text().splitlines():
        wanted = f'window="{window}"' in line and 'segment=""' in line
        if line.startswith("monitor_f_measure{") and wanted:
            return float(line.rpartition(" ")[2])
    return None


def test_a_click_in_the_browser_moves_the_estimate(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    cleanup: list[LabelStudioBridge | DaemonRun],
) -> None:
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_component("playwright is not installed (the project's test extra)")
    if chromium is None:
        missing_component("Debian's chromium is not installed (apt-get install chromium)")
    assert chromium is not None
    topics = make_topics()
    run = stream_into_labelstudio(
        broker, topics, labelstudio, tmp_path, cleanup, labels_per_hour=10, seed=8
    )
    daemon, bridge, truth, client, tasks = run.daemon, run.bridge, run.truth, run.client, run.tasks
    tag = run.tag
    positives = [t for t in tasks if t["data"]["prediction"] == "Fraud"]
    assert positives, "no request for a record the model predicted positive"
    target = positives[0]
    for t in tasks:
        if t["id"] != target["id"]:
            annotate(client, t["id"], truth[t["data"]["record_id"]])
    wait_for(
        "the API's answers joined",
        lambda: daemon.sample("monitor_labels_received_total", model="default") == len(tasks) - 1,
    )
    wait_snapshot_labels(daemon, len(tasks) - 1)
    before = _f_value(daemon, "24h")
    assert before is not None and not math.isnan(before)
    click = "Legitimate" if before > 0 else "Fraud"
    project_id = bridge.projects["default"]

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"labelstudio-task-{tag}.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{labelstudio.url}/user/login/")
            page.fill('input[name="email"]', labelstudio.username)
            page.fill('input[name="password"]', labelstudio.password)
            page.click('button[type="submit"]')
            page.wait_for_url(re.compile(r"^(?!.*/user/login).*$"))
            page.goto(f"{labelstudio.url}/projects/{project_id}/data?task={target['id']}")
            page.get_by_text(f"Record {target['data']['record_id']}").wait_for(timeout=60_000)
            page.locator(f'label.lsf-choice__checkbox:has(input[name="{click}"])').click()
            page.screenshot(path=str(shot))
            page.get_by_role("button", name="Submit").click()
            wait_for("the annotation saved", lambda: bool(client.task(target["id"])["annotations"]))
        finally:
            browser.close()
    print(f"screenshot of the task page: {shot}")

    wait_for(
        "the browser's answer joined",
        lambda: daemon.sample("monitor_labels_received_total", model="default") == len(tasks),
    )
    wait_snapshot_labels(daemon, len(tasks))
    after = _f_value(daemon, "24h")
    assert after is not None and (after < before if click == "Legitimate" else after > before)
    saved = client.task(target["id"])["annotations"][0]["result"][0]["value"]["choices"]
    assert saved == ["0" if click == "Legitimate" else "1"]  # the alias, not the wording
