"""``monitor demo --queue labelstudio`` against the session's Label Studio (``--labelstudio-url``).

The demo routes a share of the daemon's requests to Label Studio by request id; every task it
made must be one of that share, and the demo must say where to label.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_server import LabelStudioServer
from monitor.sim.auditors import request_uniform
from monitor.sim.embedded_broker import EmbeddedBroker

pytestmark = pytest.mark.integration

SHARE = 0.25
SEED = 3


def test_demo_sends_its_share_to_labelstudio(
    broker: EmbeddedBroker, labelstudio: LabelStudioServer
) -> None:
    # the session broker fixture only proves the Tansu binary is there; the demo starts its own
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    title = "Audit (demo): default"
    for project in [p for p in client.projects() if p["title"] == title]:
        client.call("DELETE", f"/api/projects/{project['id']}")  # an earlier demo's
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "demo",
            "--queue",
            "labelstudio",
            "--labelstudio-url",
            labelstudio.url,
            "--labelstudio-share",
            str(SHARE),
            "--records",
            "6000",
            "--duration-s",
            "12",
            "--metrics-port",
            "0",
            "--seed",
            str(SEED),
        ],
        env={**os.environ, "LABEL_STUDIO_TOKEN": labelstudio.token},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"Label Studio: {labelstudio.url}" in out.stdout
    went = re.search(r"([\d,]+) requests went to Label Studio", out.stdout)
    requests = re.search(r"audit requests ([\d,]+)", out.stdout)
    assert went is not None and requests is not None, out.stdout[-2000:]
    n_went, n_requests = int(went[1].replace(",", "")), int(requests[1].replace(",", ""))
    assert 0 < n_went < n_requests
    open_line = re.search(r"/projects/(\d+)/data \((\d+) tasks open", out.stdout)
    assert open_line is not None
    tasks = list(client.tasks(int(open_line[1])))
    assert len(tasks) == int(open_line[2]) > 0  # the rest expired and were removed
    for t in tasks:
        assert request_uniform(SEED, "drop", t["meta"]["request_id"]) < SHARE
