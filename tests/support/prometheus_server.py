"""A real Prometheus (Debian's ``prometheus`` package) as a child process, and its HTTP API."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.ports import free_port


class PrometheusServer:
    def __init__(self, config: Path, workdir: Path) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus missing: install Debian's prometheus package (.ci/run does)"
        self.port = free_port()
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"http://127.0.0.1:{self.port}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:  # 400 on a bad query: the body says why
            return json.loads(exc.read())

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready:\n{self.log()}")

    def wait_targets_up(self, jobs: set[str], timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every active target, once each job in ``jobs`` has one and all of them are up."""
        deadline = time.monotonic() + timeout
        active: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            active = self.get("/api/v1/targets")["data"]["activeTargets"]
            if {t["labels"]["job"] for t in active} >= jobs and all(
                t["health"] == "up" for t in active
            ):
                return active
            time.sleep(0.3)
        raise AssertionError(f"targets not up: {json.dumps(active)[:3000]}")

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        reply = self.get("/api/v1/query", **params)
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def query_range(self, promql: str, start: float, end: float, step: float) -> dict[str, Any]:
        """The raw reply: ``status`` is ``error`` (with ``error``) when the query does not parse."""
        reply: dict[str, Any] = self.get(
            "/api/v1/query_range", query=promql, start=start, end=end, step=step
        )
        return reply

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        reply = self.get(
            f"/api/v1/label/{label}/values", **{"match[]": match}, start=start, end=end
        )
        assert reply["status"] == "success", reply
        return list(reply["data"])

    def metric_names(self) -> set[str]:
        return set(self.get("/api/v1/label/__name__/values")["data"])

    def wait_value(self, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The query's result once it is non-empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.3)
        raise AssertionError(f"{promql} stayed empty; log:\n{self.log()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def finite_points(reply: dict[str, Any]) -> int:
    """How many finite values a query_range reply holds (NaN and Inf are not data)."""
    count = 0
    for series in reply.get("data", {}).get("result", []):
        count += sum(1 for _, value in series.get("values", []) if math.isfinite(float(value)))
    return count
