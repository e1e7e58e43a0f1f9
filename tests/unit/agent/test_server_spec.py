"""Unit: server spec validation names the field and what was expected."""

from __future__ import annotations

import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.servers.spec import ServerSpec


def spec(**fields: object) -> ServerSpec:
    base: dict[str, object] = {"argv": ("python", "-m", "sglang.launch_server"), "port": 30000}
    base.update(fields)
    return ServerSpec(**base)  # type: ignore[arg-type]


def test_valid_spec_round_trips_through_its_state_file_form() -> None:
    original = spec(env={"NCCL_P2P_LEVEL": "5"}, cwd="/srv", ready_model="glm-5", stop_grace=0.0)
    assert ServerSpec.from_dict(original.validated().to_dict()) == original


@pytest.mark.parametrize(
    ("fields", "field", "expected"),
    [
        ({"argv": ()}, "spec.argv", "must not be empty"),
        ({"argv": ("",)}, "spec.argv[0]", "must name a program"),
        ({"argv": ("a", "b\0")}, "spec.argv[1]", "NUL"),
        ({"port": 0}, "spec.port", "expected 1-65535"),
        ({"port": 65536}, "spec.port", "expected 1-65535"),
        ({"env": {"1BAD": "x"}}, "spec.env['1BAD']", "name must match"),
        ({"env": {"TUNELAB_SERVER_ID": "x"}}, "spec.env['TUNELAB_SERVER_ID']", "reserved"),
        ({"env": {"OK": "x" * 40000}}, "spec.env['OK']", "longer than"),
        ({"cwd": "rel"}, "spec.cwd", "absolute"),
        ({"ready_path": "/he alth"}, "spec.ready_path", "absolute HTTP path"),
        ({"startup_timeout": 0.0}, "spec.startup_timeout_seconds", "> 0"),
        ({"stop_grace": -1.0}, "spec.stop_grace_seconds", "must be in 0-3600"),
        ({"stop_grace": float("inf")}, "spec.stop_grace_seconds", "finite"),
        ({"startup_timeout": float("nan")}, "spec.startup_timeout_seconds", "finite"),
        ({"argv": ("x",) * 2000}, "spec.argv", "more than 1024"),
        ({"name": "-x"}, "spec.name", "starting alnum"),
    ],
)
def test_invalid_fields(fields: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        spec(**fields).validated()
    assert info.value.field == field
    assert expected in str(info.value)
