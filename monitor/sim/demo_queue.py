"""``monitor demo --queue labelstudio``: a share of the audit requests goes to Label Studio.

The demo starts Label Studio on 127.0.0.1 (its own virtualenv, ``monitor.bridges.ls_server``;
the first start takes ~80 s, so it is launched before everything else and waited for last), or
uses one already running (``--labelstudio-url`` with the token in ``$LABEL_STUDIO_TOKEN``), and
runs the bridge (``monitor.bridges.labelstudio``) in the demo's process.

Routing is by request id, without coordination: with u = ``request_uniform(seed, "drop", id)``
(``monitor.sim.auditors``), the bridge takes the requests with u < share and the simulated team
drops every request with u < share + (1 - share) * drop_rate. So the team answers none of the
Label Studio share and still drops ``drop_rate`` of the rest.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_config import LabelStudioConfig
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.schema import Config
from monitor.errors import MonitorError
from monitor.free_ports import free_port
from monitor.sim.auditors import request_uniform

DEFAULT_PORT = 8080
TOKEN_ENV = "LABEL_STUDIO_TOKEN"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The demo's options for the audit queue."""
    p.add_argument(
        "--queue",
        choices=("simulated", "labelstudio"),
        default="simulated",
        help="where audit requests go: the simulated team only, or a share to Label Studio",
    )
    p.add_argument(
        "--labelstudio-share",
        type=float,
        default=0.1,
        help="with --queue labelstudio: share of the requests sent to Label Studio",
    )
    p.add_argument(
        "--labelstudio-port",
        type=int,
        default=None,
        help=f"port of the Label Studio the demo starts (default {DEFAULT_PORT} if free)",
    )
    p.add_argument(
        "--labelstudio-url",
        default=None,
        help=f"use this running Label Studio instead (API token in ${TOKEN_ENV})",
    )


def team_drop_rate(share: float, drop_rate: float) -> float:
    """The simulated team's drop rate that leaves the Label Studio share to Label Studio."""
    return share + (1.0 - share) * drop_rate


class LabelStudioQueue:
    """Label Studio (started or attached) and the bridge feeding it."""

    def __init__(self, args: argparse.Namespace, work_dir: Path) -> None:
        if not 0.0 < args.labelstudio_share <= 1.0:
            msg = f"--labelstudio-share must be in (0, 1], got {args.labelstudio_share}"
            raise MonitorError(msg)
        self.share = float(args.labelstudio_share)
        self.seed = int(args.seed)
        self.server: LabelStudioServer | None = None
        self.bridge: LabelStudioBridge | None = None
        self.work_dir = work_dir
        if args.labelstudio_url:
            token = os.environ.get(TOKEN_ENV, "")
            if not token:
                msg = f"--labelstudio-url needs the API token in ${TOKEN_ENV}"
                raise MonitorError(msg)
            self.url, self.token = str(args.labelstudio_url).rstrip("/"), token
            self.login: tuple[str, str] | None = None
        else:
            port = args.labelstudio_port or (DEFAULT_PORT if _free(DEFAULT_PORT) else free_port())
            self.server = LabelStudioServer(work_dir / "labelstudio", port)
            self.url, self.token = self.server.url, self.server.token
            self.login = (self.server.username, self.server.password)

    def launch(self) -> None:
        """Start Label Studio's process (no wait)."""
        if self.server is not None:
            self.server.launch()

    def routes(self, request_id: str) -> bool:
        """True for the requests that go to Label Studio."""
        return request_uniform(self.seed, "drop", request_id) < self.share

    def start_bridge(self, config: Config) -> LabelStudioBridge:
        """Wait for Label Studio, then start the bridge on the daemon's configuration."""
        if self.server is not None:
            self.server.wait()
        ls = LabelStudioConfig(
            url=self.url,
            token_env=TOKEN_ENV,
            project_title="Audit (demo): {model}",
            poll_interval_s=2.0,
            port=0,
            group_id="activeaudit-demo-labelstudio",
        )
        bridge = LabelStudioBridge(
            config, ls, self.work_dir / "labelstudio-bridge.sqlite", self.token, accept=self.routes
        )
        self.bridge = bridge.start()
        return bridge

    def describe(self) -> list[str]:
        """Lines telling a person where to label."""
        lines = [f"Label Studio: {self.url}"]
        if self.bridge is not None:
            self.bridge.settle()
        if self.login is not None:
            lines.append(f"  login: {self.login[0]} / password: {self.login[1]}")
        if self.bridge is not None:
            counts = {
                name: sum(
                    self.bridge.metrics.registry.get_sample_value(
                        f"labelstudio_bridge_tasks_{name}_total", {"model": model}
                    )
                    or 0.0
                    for model in self.bridge.projects
                )
                for name in ("created", "adopted")
            }
            lines.append(
                f"  {int(counts['created'] + counts['adopted']):,} requests went to Label Studio "
                f"({int(counts['adopted']):,} of them found there from an earlier run; the "
                "simulated team's 'dropped' count includes them); tasks past their deadline "
                "are removed"
            )
            for model, project in sorted(self.bridge.projects.items()):
                depth = self.bridge.state.depth().get(model, 0)
                lines.append(
                    f"  project for model {model!r}: {self.url}/projects/{project}/data "
                    f"({depth} tasks open; answers reach the daemon within seconds)"
                )
            lines.append(f"  bridge metrics: http://127.0.0.1:{self.bridge.port}/metrics")
        return lines

    def check(self) -> None:
        """Raise if the bridge stopped."""
        if self.bridge is not None and not self.bridge.alive:
            msg = f"the Label Studio bridge stopped: {self.bridge.error}"
            raise MonitorError(msg)

    def stop(self) -> None:
        """Stop the bridge, then Label Studio (when the demo started it)."""
        if self.bridge is not None:
            self.bridge.stop()
            self.bridge = None
        if self.server is not None:
            self.server.stop()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
