"""Unit: agent configuration layering (file < environment < flags) and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.agent.config import ConfigError, load_config


def test_layering(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.toml"
    config_file.write_text(
        '[agent]\nlisten = "127.0.0.1:1111"\nprobe_interval = "100ms"\nlog_level = "debug"\n'
    )
    env = {"TUNELAB_AGENT_LISTEN": "127.0.0.1:2222", "TUNELAB_AGENT_GPU_RELEASE_TIMEOUT": "2m"}
    config = load_config(config_file, {"log_level": "warning", "state_dir": str(tmp_path)}, env)
    assert config.listen == "127.0.0.1:2222"  # env beats file
    assert config.probe_interval == 0.1
    assert config.gpu_release_timeout == 120.0
    assert config.log_level == "warning"  # flag beats file
    assert config.state_dir == tmp_path


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ('[agent]\nlisten = "nohostport"\n', {}, "listen: expected HOST:PORT"),
        ('[agent]\nprobe_interval = "fast"\n', {}, "probe_interval: expected a duration"),
        ('[agent]\nlisten_addr = "x"\n', {}, "unknown key 'listen_addr'"),
        ("", {"TUNELAB_AGENT_BOGUS": "1"}, "TUNELAB_AGENT_BOGUS: unknown setting"),
        ("", {"TUNELAB_AGENT_REFLECTION": "maybe"}, "reflection: expected true or false"),
        ('[agent]\nlog_level = "loud"\n', {}, "log_level"),
        ("not toml ][", {}, "agent.toml"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    config_file = tmp_path / "agent.toml"
    config_file.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(config_file, {}, env)
