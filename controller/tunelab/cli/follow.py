"""Following experiments until they finish: ``submit --wait`` and ``tunelab wait``.

The controller may restart and a laptop may sleep: the watch is opened again until every
experiment is finished, and the view says "reconnecting" meanwhile instead of showing a state that
is no longer known. Ctrl-C stops following only; the experiments go on, and the message says how
to follow them again.
"""

from __future__ import annotations

import time

import grpc

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import EXIT_INTERRUPTED, CliError, is_terminal, rpc_error
from tunelab.cli.watch_view import ExperimentsView
from tunelab.v1 import controller_pb2

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
RETRY_SECONDS = 2.0
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def state_name(value: int) -> str:
    return controller_pb2.ExperimentState.Name(value).removeprefix("EXPERIMENT_STATE_")  # type: ignore[arg-type]


def follow_hint(ids: list[str], group: str) -> str:
    """The command that follows the same experiments again."""
    return f"tunelab wait {group}" if group else "tunelab wait " + " ".join(ids)


def wait_for(
    client: ControllerClient,
    ids: list[str],
    quiet: bool,
    group: str = "",
) -> list[controller_pb2.Experiment]:
    """Follow the experiments until all are finished; survives a controller restart."""
    latest: dict[str, controller_pb2.Experiment] = {}
    target = client.target
    try:
        with ExperimentsView(enabled=is_terminal() and not quiet, plain=not quiet) as view:
            while True:
                try:
                    request = controller_pb2.WatchExperimentRequest(ids=ids)
                    stream = client.watch_experiment(request)
                    try:
                        for update in stream:
                            view.connected()
                            latest[update.experiment.id] = update.experiment
                            view.update(update.experiment)
                    finally:
                        stream.cancel()  # an open stream keeps the process alive at exit
                    if len(latest) == len(ids) and all(
                        state_name(e.state) in TERMINAL for e in latest.values()
                    ):
                        break
                except grpc.RpcError as exc:
                    if exc.code() not in RETRIED:
                        raise rpc_error(exc, target) from exc
                    # the controller restarted or the laptop slept: say so, then follow again
                    view.reconnecting(f"{target}: {rpc_error(exc, target)}")
                    time.sleep(RETRY_SECONDS)
    except KeyboardInterrupt:
        raise CliError(
            "stopped following; the experiments go on. Follow them again with: "
            + follow_hint(ids, group),
            EXIT_INTERRUPTED,
        ) from None
    return [latest[i] for i in ids]
