"""A real MLflow tracking server (``mlflow server``, SQLite backend, a local artifact folder) as a
child process on loopback, and the parts of its REST API the tests read back."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from tests.support.ports import free_port

MLFLOW = Path(sys.executable).parent / "mlflow"


class MlflowServer:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "mlflow.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> MlflowServer:
        assert MLFLOW.exists(), f"{MLFLOW} missing: make installs mlflow with the dev extra"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(MLFLOW), "server",
                    "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
                    "--artifacts-destination", str(self.workdir / "artifacts"),
                    "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                ],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.uri}/health", timeout=2),
            ):
                return self
            time.sleep(0.3)
        raise TimeoutError(f"mlflow server not up:\n{self.log()}")

    def stop(self) -> None:
        """The server and every process of its session (it starts its job runner's consumers
        for a while after it is up: one forked while we kill is found by the next look)."""
        if self.proc is None:
            return
        session = self.proc.pid  # started with start_new_session: the session's id
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [p for p in psutil.process_iter() if _session_of(p) == session]
            if not left:
                break
            for proc in left:  # psutil checks pid and start time before it signals
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(left, timeout=2)
        self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def api(self, path: str, body: dict[str, Any] | None = None, **query: Any) -> Any:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=20) as reply:
            return json.loads(reply.read())

    def experiment_id(self, name: str) -> str:
        return str(
            self.api("experiments/get-by-name", experiment_name=name)["experiment"]["experiment_id"]
        )

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        """Every run of the experiment, each with ``params``, ``metrics`` and ``tags`` as dicts."""
        out, token = [], None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": [self.experiment_id(experiment)],
                "max_results": 1000,
            }
            if token:
                body["page_token"] = token
            reply = self.api("runs/search", body)
            for run in reply.get("runs", []):
                data = run.get("data", {})
                out.append(
                    {
                        "info": run["info"],
                        "params": {p["key"]: p["value"] for p in data.get("params", [])},
                        "metrics": {m["key"]: m["value"] for m in data.get("metrics", [])},
                        "tags": {t["key"]: t["value"] for t in data.get("tags", [])},
                    }
                )
            token = reply.get("next_page_token")
            if not token:
                return out

    def metric_history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        return list(
            self.api("metrics/get-history", run_id=run_id, metric_key=key).get("metrics", [])
        )

    def artifacts(self, run_id: str) -> list[str]:
        return [f["path"] for f in self.api("artifacts/list", run_id=run_id).get("files", [])]


def _session_of(proc: psutil.Process) -> int | None:
    with contextlib.suppress(OSError, psutil.Error):
        if proc.status() != psutil.STATUS_ZOMBIE:
            return os.getsid(proc.pid)
    return None
