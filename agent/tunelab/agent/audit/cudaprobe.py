"""Can a process on this host initialise CUDA? ``cuInit`` in a child, with a timeout.

nvidia-smi (NVML) working says nothing about CUDA: inside an LXC container whose device rules
miss ``nvidia-uvm``, with a libcuda that does not match the kernel module, or on an NVSwitch
host whose fabric manager is down, NVML answers and every CUDA program fails at start. So the
audit loads the driver's ``libcuda.so.1`` through ctypes in a child process (a hang or a crash
in the driver costs the child, not the agent; the agent itself never holds a CUDA context) and
reads the CUresult of ``cuInit(0)``, then the device count and the driver's CUDA version. The
child is started by the agent's one spawn function, in its own session, output to a file.

Run as a module, this file is the child: it prints one JSON line and exits 0.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tunelab.common.pyexec import python_module_argv
from tunelab.common.spawn import spawn

MODULE = "tunelab.agent.audit.cudaprobe"
RECORD = "cuda-init.json"  # where a capture keeps the probe's answer (system.CAPTURE_DIR)
DEFAULT_TIMEOUT = 20.0  # cuInit takes ~0.1-2 s; a fabric-manager wait can take longer
MAX_OUTPUT = 4096

# CUresult values (cuda.h) that an initialisation can return, with what they mean on a host.
CU_RESULTS: dict[int, tuple[str, str]] = {
    0: ("CUDA_SUCCESS", "CUDA initialises"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "the driver could not allocate host memory"),
    3: ("CUDA_ERROR_NOT_INITIALIZED", "the driver did not initialise"),
    34: (
        "CUDA_ERROR_STUB_LIBRARY",
        "libcuda.so.1 is the CUDA toolkit's stub, not the driver's library",
    ),
    46: ("CUDA_ERROR_DEVICE_UNAVAILABLE", "every GPU is exclusive-process busy or prohibited"),
    100: (
        "CUDA_ERROR_NO_DEVICE",
        "no GPU usable by CUDA: in a container, /dev/nvidia* or nvidia-uvm missing or denied",
    ),
    101: ("CUDA_ERROR_INVALID_DEVICE", "a GPU is not usable by CUDA"),
    102: ("CUDA_ERROR_DEVICE_NOT_LICENSED", "vGPU licence not applied"),
    304: (
        "CUDA_ERROR_OPERATING_SYSTEM",
        "an OS call failed: typically /dev/nvidia-uvm cannot be opened",
    ),
    800: ("CUDA_ERROR_NOT_PERMITTED", "not permitted"),
    802: (
        "CUDA_ERROR_SYSTEM_NOT_READY",
        "system not ready: on NVSwitch hosts, nvidia-fabricmanager is not running",
    ),
    803: (
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "libcuda and the kernel module are different driver versions",
    ),
    804: (
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "a forward-compatibility libcuda that this GPU does not support",
    ),
    999: ("CUDA_ERROR_UNKNOWN", "unknown driver error"),
}


@dataclass(frozen=True)
class ProbeResult:
    """What the child said, or why it said nothing."""

    outcome: str  # "ok", "cuda_error", "no_library", "timeout", "crashed", "garbled"
    result: int | None = None  # CUresult of cuInit
    devices: int | None = None
    driver_version: int | None = None  # e.g. 13000
    library: str = ""
    detail: str = ""
    seconds: float = 0.0

    @property
    def result_name(self) -> str:
        if self.result is None:
            return ""
        return CU_RESULTS.get(self.result, (f"CUresult {self.result}", ""))[0]

    @property
    def meaning(self) -> str:
        if self.result is None:
            return self.detail
        return CU_RESULTS.get(self.result, ("", "see cuda.h"))[1]

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProbeResult:
        def number(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            outcome=str(data.get("outcome", "garbled")),
            result=number("result"),
            devices=number("devices"),
            driver_version=number("driver_version"),
            library=str(data.get("library", "")),
            detail=str(data.get("detail", "")),
            seconds=seconds if isinstance(seconds := data.get("seconds"), int | float) else 0.0,
        )


Runner = Callable[[list[str], float], tuple[int, bytes]]  # (exit code, output) or TimeoutExpired


def _run(argv: list[str], timeout: float) -> tuple[int, bytes]:
    """The child through the agent's one spawn function, its output to a file; killed (our own
    unreaped child, so the pid is ours) when it outlives ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="tunelab-cuinit-") as tmp:
        out = Path(tmp) / "probe.out"
        child = spawn(argv, cwd=Path(tmp), log=out)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
            raise
        return code, out.read_bytes()[-MAX_OUTPUT:]


def probe(timeout: float = DEFAULT_TIMEOUT, run: Runner = _run) -> ProbeResult:
    """Run the child and read its last line; a child that hangs is killed after ``timeout``."""
    start = time.monotonic()
    try:
        code, output = run(python_module_argv(MODULE), timeout)
    except subprocess.TimeoutExpired:
        return ProbeResult(
            "timeout",
            detail=f"cuInit did not return within {timeout:g} s (driver hung or waiting)",
            seconds=time.monotonic() - start,
        )
    seconds = time.monotonic() - start
    text = output.decode(errors="replace").strip()
    if code != 0:
        return ProbeResult("crashed", detail=f"probe exited {code}: {text[-300:]}", seconds=seconds)
    try:
        data = json.loads(text.splitlines()[-1] if text else "")
    except ValueError:
        return ProbeResult("garbled", detail=text[-200:])
    if not isinstance(data, dict):
        return ProbeResult("garbled", detail=str(data)[:200])
    data["seconds"] = round(seconds, 3)
    return ProbeResult.from_json(data)


def _child() -> dict[str, object]:
    """In the child: load libcuda, cuInit(0), count devices, read the driver version."""
    name = "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError as exc:
        return {"outcome": "no_library", "library": name, "detail": str(exc)}
    result = int(cuda.cuInit(0))
    out: dict[str, object] = {"library": name, "result": result}
    if result != 0:
        out["outcome"] = "cuda_error"
        return out
    count, version = ctypes.c_int(0), ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) == 0:
        out["devices"] = count.value
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver_version"] = version.value
    out["outcome"] = "ok"
    return out


if __name__ == "__main__":
    print(json.dumps(_child()))
    sys.exit(0)
