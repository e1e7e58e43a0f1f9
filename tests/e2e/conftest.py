"""E2E fixtures: a lab of real processes — a controller, agents, simulator servers — on loopback."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port

NVML_BUSY = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200-busy.json"


def sim_experiment(name: str, **overrides: Any) -> dict[str, Any]:
    """An experiment against the built-in simulator (a few seconds long)."""
    itl = overrides.pop("itl_ms", 5)
    doc: dict[str, Any] = {
        "name": name,
        "host": {"labels": {"pool": "e2e"}},
        "server": {
            "command": [sys.executable, "-m", "tunelab.bench.simulator"],
            "flags": {
                "--port": "{port}",
                "--startup-seconds": 0.3,
                "--model": "sim",
                "--itl-ms": itl,
                "--ttft-ms": 20,
            },
            "ready": {"model": "sim", "timeout": "1m"},
            "stop_grace": "5s",
        },
        "benchmark": {"concurrency": [1, 4], "requests": 8, "input_len": 16, "output_len": 16},
        "max_duration": "3m",
    }
    doc.update(overrides)
    return doc


class Lab:
    """Agents and a controller in one temporary directory, torn down (processes included)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.agents: dict[str, AgentProcess] = {}
        self.controller: ControllerProcess | None = None

    def start_controller(self, **env: str) -> ControllerProcess:
        self.controller = ControllerProcess(self.root / "controller", env=env).start()
        return self.controller

    def add_agent(
        self,
        name: str,
        labels: str = "pool=e2e",
        env: dict[str, str] | None = None,
        nvml: Path | None = NVML_BUSY,
    ) -> AgentProcess:
        """An agent as a process, registered; ``nvml=None``: no snapshot, so on a machine
        without NVIDIA's driver a host with no GPU."""
        metrics = free_port()
        snapshot = ["--nvml-snapshot", str(nvml)] if nvml is not None else []
        agent = AgentProcess(
            self.root / name, ["--metrics-listen", f"127.0.0.1:{metrics}", *snapshot], env=env
        ).start()
        agent.metrics_port = metrics  # type: ignore[attr-defined]
        self.agents[name] = agent
        assert self.controller is not None
        added = self.controller.cli(
            "hosts", "add", name, agent.address, "--label", labels,
            "--metrics-url", f"http://127.0.0.1:{metrics}/metrics",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        return agent

    def submit(self, *experiments: dict[str, Any], wait: bool = False) -> list[dict[str, Any]]:
        assert self.controller is not None
        spec = self.root / f"spec-{len(list(self.root.glob('spec-*')))}.yaml"
        spec.write_text(yaml.safe_dump(list(experiments), sort_keys=False))
        args = ["submit", str(spec), "--json"] + (["--wait"] if wait else [])
        result = self.controller.cli(*args, timeout=300)
        assert result.returncode in (0, 1), result.stderr
        import json

        return list(json.loads(result.stdout))

    def close(self) -> None:
        if self.controller is not None and self.controller.proc is not None:
            self.controller.terminate()
        for agent in self.agents.values():
            if agent.proc is not None and agent.proc.poll() is None:
                agent.terminate()
        # servers and bench processes outlive agents by design: end the ones this lab started
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if str(self.root) in proc.cwd() or any(str(self.root) in a for a in proc.cmdline()):
                    proc.kill()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path)
    try:
        yield lab
    finally:
        lab.close()
