"""Unit: the controller's own name check in FetchExperimentProfile, against a recording agent.

The controller proxies a trace only by a name the attempt's result lists (``profile.traces`` or
``profile.other_files``); anything else is NOT_FOUND before any agent is called. The agent
checks again (tests/integration/test_agent_profiles.py); this is the controller's half.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tunelab.controller.service import ControllerService
from tunelab.controller.states import ExperimentState
from tunelab.controller.store import ExperimentRow, HostRow, SqliteStore
from tunelab.v1 import agent_pb2, controller_pb2

TRACE = "rank0.pt.trace.json.gz"
TABLE = "rank0.profiler_out.txt"


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class Context:
    """The little of grpc.ServicerContext a streaming handler uses."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    def code(self) -> None:
        return None

    def add_callback(self, callback: Any) -> bool:
        return True


class RecordingAgent:
    """Answers FetchProfile with two chunks and records every request it is sent."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, agent_pb2.FetchProfileRequest]] = []

    def fetch_profile(
        self, address: str, token: str | None, request: agent_pb2.FetchProfileRequest
    ) -> Iterator[agent_pb2.FetchProfileResponse]:
        self.asked.append((address, request))
        yield agent_pb2.FetchProfileResponse(data=b"ab", offset=0, size=3)
        yield agent_pb2.FetchProfileResponse(data=b"c", offset=2, size=3)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[ControllerService, RecordingAgent, SqliteStore]]:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    store.insert_experiments(
        [
            ExperimentRow("x1", "g", "profiled", ExperimentState.QUEUED, {"host": {}}, 0),
            ExperimentRow("x2", "g", "plain", ExperimentState.QUEUED, {"host": {}}, 0),
            ExperimentRow("x3", "g", "waiting", ExperimentState.QUEUED, {"host": {}}, 0),
        ]
    )
    profiled = store.create_attempt("x1", "h1", [], 1.0)
    profile = {
        "traces": [{"name": TRACE, "size_bytes": 3}],
        "other_files": [{"name": TABLE, "size_bytes": 9}],
        "total_bytes": 12,
        "warnings": [],
    }
    store.update_attempt(profiled.id, result={"points": [], "profile": profile})
    plain = store.create_attempt("x2", "h1", [], 1.0)
    store.update_attempt(plain.id, result={"points": []})
    agent = RecordingAgent()
    service = ControllerService(store, agent, wake=lambda poll_hosts: None)  # type: ignore[arg-type]
    try:
        yield service, agent, store
    finally:
        store.close()


def fetch(service: ControllerService, key: str, name: str) -> list[agent_pb2.FetchProfileResponse]:
    request = controller_pb2.FetchExperimentProfileRequest(
        id=key, name=name, offset=1, max_bytes=1000
    )
    return list(service.FetchExperimentProfile(request, Context()))


def test_a_listed_trace_or_table_is_proxied_to_the_attempts_agent(world: Any) -> None:
    service, agent, store = world
    [attempt] = store.attempts_for("x1")
    for key in ("x1", "profiled", attempt.id):  # experiment id, name, or the attempt itself
        chunks = fetch(service, key, TRACE)
        assert b"".join(c.data for c in chunks) == b"abc"
    assert len(fetch(service, "x1", TABLE)) == 2  # the engine's own table is listed too
    assert [(address, r.run_id, r.name, r.offset, r.max_bytes) for address, r in agent.asked] == [
        ("h1:1", attempt.id, TRACE, 1, 1000),
        ("h1:1", attempt.id, TRACE, 1, 1000),
        ("h1:1", attempt.id, TRACE, 1, 1000),
        ("h1:1", attempt.id, TABLE, 1, 1000),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "../run.json",
        "/etc/passwd",
        "run.json",
        "",
        f"traces/{TRACE}",
        f"./{TRACE}",
        TRACE.removesuffix(".gz"),
        TRACE.upper(),
    ],
)
def test_an_unlisted_name_is_not_found_and_never_reaches_the_agent(world: Any, name: str) -> None:
    service, agent, _ = world
    with pytest.raises(Aborted) as caught:
        fetch(service, "x1", name)
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    assert f"keeps no trace {name!r} (it keeps: {TRACE}, {TABLE})" in caught.value.details
    assert agent.asked == []


def test_an_attempt_without_a_profile_or_an_experiment_without_an_attempt(world: Any) -> None:
    service, agent, _ = world
    with pytest.raises(Aborted) as caught:
        fetch(service, "plain", TRACE)
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    assert caught.value.details.endswith(f"keeps no trace {TRACE!r} (it keeps: none)")
    with pytest.raises(Aborted) as caught:
        fetch(service, "x3", TRACE)
    assert (caught.value.code, caught.value.details) == (
        grpc.StatusCode.NOT_FOUND, "experiment 'x3' has no attempt yet",
    )  # fmt: skip
    with pytest.raises(Aborted) as caught:
        fetch(service, "nope", TRACE)
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    assert agent.asked == []
