"""Issue 45.1: what the user sees of a failing control-loop step. The real controller as a
process over its SQLite file: a TPE search on a controller where ``import optuna`` fails (a
stand-in package on its PYTHONPATH) and a Slurm pool whose stored settings cannot be read (a
stand-in ``squeue`` on its PATH) fail their steps at every try; ``search show`` and ``hosts``
say so in one bounded line with the count, and the controller's log holds no failed tick."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.support.controller_proc import ControllerProcess
from tests.unit.controller.test_search_driver import BASE, SEARCH, submit
from tests.unit.controller.test_store_scheduler import queue
from tunelab.controller.states import HostState
from tunelab.controller.store import HostRow, SqliteStore


def stand_ins(root: Path) -> dict[str, str]:
    (root / "py" / "optuna").mkdir(parents=True)
    (root / "py" / "optuna" / "__init__.py").write_text('raise ImportError("no optuna here")\n')
    (root / "bin").mkdir()
    squeue = root / "bin" / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")  # an empty queue
    squeue.chmod(0o755)
    return {
        "PYTHONPATH": f"{root / 'py'}:{os.environ.get('PYTHONPATH', '')}",
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
    }


def test_search_show_and_hosts_say_which_step_fails_and_why(tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path / "c", env=stand_ins(tmp_path / "stand-ins"))
    controller.workdir.mkdir(parents=True)
    store = SqliteStore(controller.db)
    submit(store, BASE + SEARCH.replace("STRATEGY", "tpe"), group="g-tpe")
    store.add_host(HostRow(name="cluster", address="slurm:gpu", state=HostState.READY))
    store.set_slurm_pool("cluster", {"max_jobs": 4})  # no partition: cannot be read
    (experiment,) = queue(store)
    store.create_attempt(experiment, "cluster", [], time.time())
    store.close()
    controller.start()
    try:
        deadline = time.monotonic() + 60
        doc: dict[str, object] = {}
        while time.monotonic() < deadline:
            doc = controller.cli_json("search", "show", "g-tpe")
            if doc.get("step_error"):
                break
            time.sleep(0.3)
        fault = doc["step_error"]
        assert isinstance(fault, dict), doc
        assert fault["failures"] >= 1 and "tpe needs Optuna" in fault["error"], fault
        shown = controller.cli("search", "show", "g-tpe")
        text = " ".join(shown.stdout.split())  # the line wraps at 100 columns
        assert "step failing (" in text and "tpe needs Optuna" in text, shown.stdout
        hosts = controller.cli_json("hosts", "ls")
        (pool,) = [h for h in hosts if h["name"] == "cluster"]
        reason = pool.get("state_reason") or pool.get("reason") or json.dumps(pool)
        assert "its Slurm step failed" in reason and "KeyError: 'partition'" in reason, pool
        log = controller.log()
        assert "control_tick_failed" not in log and "Traceback" not in log, log[-3000:]
    finally:
        controller.terminate()
