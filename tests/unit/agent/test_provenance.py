"""Provenance: redaction, engine version from package metadata, model files, GPUs at start."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

from tunelab.agent.gpu import SnapshotBackend
from tunelab.agent.runs.modelfiles import describe_model
from tunelab.agent.runs.provenance import (
    REDACTED,
    RunProvenance,
    engine_version,
    model_path,
    redact_argv,
    redact_env,
)
from tunelab.agent.runs.record import RunSpec
from tunelab.agent.servers.spec import ServerSpec
from tunelab.common import __version__

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "h200-busy.json"


def write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """A shard whose header lists tensors of the given byte sizes (data left out: only the
    header is read)."""
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": [size // 2],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_secrets_are_redacted_from_argv_and_env() -> None:
    argv = ["vllm", "serve", "/m", "--api-key", "s3cret", "--hf-token=abc", "--port", "8000"]
    assert redact_argv(argv) == [
        "vllm",
        "serve",
        "/m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--port",
        "8000",
    ]
    env = {"HF_TOKEN": "x", "OPENAI_API_KEY": "y", "NCCL_P2P_LEVEL": "5", "DB_PASSWORD": "z"}
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "OPENAI_API_KEY": REDACTED,
        "NCCL_P2P_LEVEL": "5",
        "DB_PASSWORD": REDACTED,
    }


def test_the_simulators_version_comes_from_its_upgrade_file(tmp_path: Path) -> None:
    speed = tmp_path / "speed"
    speed.write_text("1.6\nversion 0.5.3\n")
    argv = [sys.executable, "-m", "tunelab.bench.simulator", "--speed-file", str(speed)]
    assert engine_version(argv, {}) == {
        "name": "tunelab-simulator",
        "version": "0.5.3",
        "version_source": f"the simulator's --speed-file ({speed})",
    }
    joined = [*argv[:3], f"--speed-file={speed}"]
    assert engine_version(joined, {})["version"] == "0.5.3"
    speed.write_text("1.0\n")  # no version line: the package's, as for any engine
    assert engine_version(argv, {})["version"] == __version__
    speed.write_text("1.0\nversion $(x)\n")  # refused by the simulator: not recorded either
    assert engine_version(argv, {})["version"] == __version__


def test_model_path_from_the_usual_flags() -> None:
    assert model_path(["python", "-m", "sglang.launch_server", "--model-path", "/m/a"]) == "/m/a"
    assert model_path(["vllm", "serve", "/m/b", "--tp", "2"]) == "/m/b"
    assert model_path(["x", "--model=/m/c"]) == "/m/c"
    assert model_path(["x", "--port", "1"]) == ""


def test_engine_version_comes_from_the_package_metadata_of_the_argv_python() -> None:
    found = engine_version([sys.executable, "-m", "tunelab.bench.simulator"], {})
    assert found["name"] == "tunelab-simulator"
    assert found["version"] == __version__ and sys.executable in found["version_source"]
    assert engine_version(["/opt/mystery-server"], {}) == {
        "name": "mystery-server",
        "version": None,
        "version_source": None,
    }


def test_a_moe_model_directory(tmp_path: Path) -> None:
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "torch_dtype": "bfloat16",
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(
        tmp_path / "a.safetensors",
        {"model.embed.weight": 1000, "model.layers.0.mlp.experts.0.w1": 4000},
    )
    write_safetensors(
        tmp_path / "b.safetensors",
        {"model.layers.0.mlp.shared_experts.w1": 500, "model.layers.0.mlp.experts.1.w1": 4000},
    )
    index = {
        "metadata": {"total_size": 1},
        "weight_map": {"x": "a.safetensors", "y": "b.safetensors"},
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    model = describe_model(str(tmp_path))
    assert model["weight_bytes"] == 9500 and model["expert_weight_bytes"] == 8000
    assert (model["experts"], model["experts_per_token"]) == (8, 2)
    assert model["kv_bytes_per_token"] == 4 * (512 + 64) * 2  # MLA: one latent vector a layer
    assert len(model["config_sha256"]) == 64


def test_a_dense_gqa_config_and_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16060522496}, "weight_map": {"a": "missing"}})
    )
    model = describe_model(str(tmp_path))
    assert model["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert model["weight_bytes"] == 16060522496  # shards absent: the index's total
    assert describe_model("meta-llama/Llama-3-8B") == {"path": "meta-llama/Llama-3-8B"}
    (tmp_path / "config.json").write_text("{not json")
    assert "error" in describe_model(str(tmp_path))


def test_the_record_holds_the_gpus_the_server_will_see_at_start() -> None:
    gpu = SnapshotBackend.load(NVML)
    server = ServerSpec(
        argv=(sys.executable, "-m", "tunelab.bench.simulator", "--port", "9000", "--model", "sim"),
        port=9000,
        env={"HF_TOKEN": "hf_x", "CUDA_VISIBLE_DEVICES": "0"},
    )
    spec = RunSpec(
        server=server.validated(),
        server_id="",
        command=None,
        max_duration=0,
        builtin={"seed": 7, "input_len": 16, "output_len": 16},
    )
    record = RunProvenance(gpu, lambda: 123.0)(spec, server)
    assert record["recorded_at"] == 123.0 and record["tunelab_version"] == __version__
    assert record["env"]["HF_TOKEN"] == REDACTED and "hf_x" not in json.dumps(record)
    assert record["system"]["driver_version"] == "580.159.04"
    assert record["system"]["cuda_driver_version"] == "13.0"
    [h200] = record["gpus"]
    assert h200["name"] == "NVIDIA H200" and h200["power_limit_watts"] == 700.0
    assert h200["sm_clock_hertz"] == 1740000000
    assert record["benchmark"]["seed"] == 7 and len(record["benchmark"]["dataset_sha256"]) == 64
    other = RunSpec(
        server=server.validated(),
        server_id="",
        command=None,
        max_duration=0,
        builtin={"seed": 8, "input_len": 16, "output_len": 16},
    )
    again = RunProvenance(gpu, lambda: 124.0)(other, server)
    assert again["benchmark"]["dataset_sha256"] != record["benchmark"]["dataset_sha256"]
    hidden = ServerSpec(argv=server.argv, port=9000, env={"CUDA_VISIBLE_DEVICES": "3"})
    assert RunProvenance(gpu, lambda: 0.0)(spec, hidden)["gpus"] == []  # no GPU 3 here


def test_sizes_out_of_range_are_refused_with_the_tensor_or_key_named(tmp_path: Path) -> None:
    """Issue 45.2: a header declaring a 10**400-byte tensor reached the controller, where
    dividing it failed every watch tick and `show`, `report` and `compare` of the run."""
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    header = json.dumps({"w": {"dtype": "F16", "shape": [1], "data_offsets": [0, 10**400]}})
    raw = header.encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    found = describe_model(str(tmp_path))
    assert "weight_bytes" not in found
    assert found["error"].startswith("ValueError: tensor 'w': data_offsets")
    assert len(found["error"]) <= 300
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 10**30}))
    found = describe_model(str(tmp_path))
    assert "num_hidden_layers" in found["error"] and "kv_bytes_per_token" not in found
