"""The built wheel is one namespace, and an installed tunelab cannot be shadowed by the folder
it is run from (an ``agent/`` or ``controller/`` package of someone else's project)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of the tracked sources: the checkout's own build/ may hold stale files
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "ls-files", "pyproject.toml", "README.md", "proto", "agent", "controller"],
        check=True, cwd=REPO, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "-w", str(out), str(source)],
        check=True, cwd=out, capture_output=True, text=True,
    )  # fmt: skip
    (out / "build.log").write_text(done.stdout + done.stderr)
    [built] = out.glob("tunelab-*.whl")
    return built


def test_the_build_warns_of_no_package_missing_from_the_configuration(wheel: Path) -> None:
    """Issue 24: the first `make` printed setuptools' 40-line "Package would be ignored" for
    tunelab.controller.store.migrations (the SQL folder)."""
    log = (wheel.parent / "build.log").read_text()
    assert "BuildBackendWarning" in log or "running bdist_wheel" in log, log[-2000:]  # verbose
    assert "absent from the `packages` configuration" not in log, log[-3000:]


def test_the_wheel_holds_only_the_tunelab_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == {"tunelab"}, top
    assert len(dist_info) == 1
    assert "tunelab/__init__.py" not in names  # a namespace: no root module to collide on
    for package in ("agent", "bench", "cli", "common", "controller", "v1"):
        assert f"tunelab/{package}/__init__.py" in names
    assert "tunelab/controller/store/migrations/0001_initial.sql" in names
    assert "tunelab/controller/store/migrations/0002_name_index_no_secrets.sql" in names
    assert not any(n.startswith("tunelab/") and "/tests/" in n for n in names)


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with only the wheel installed; its dependencies come from this interpreter's
    site-packages through a plain path entry, which runs none of that folder's .pth hooks (so
    the checkout's editable install stays out)."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "zz_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture
def hostile_cwd(tmp_path: Path) -> Path:
    """A project folder whose own ``agent``, ``controller`` and ``tunelab`` packages explode."""
    for name in ("agent", "controller", "tunelab"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise RuntimeError('imported ./{name}')\n")
    (tmp_path / "agent" / "bench.py").write_text("raise RuntimeError('imported ./agent/bench')\n")
    return tmp_path


def test_installed_bench_against_sim_server_from_a_hostile_folder(
    clean_venv: Path, hostile_cwd: Path
) -> None:
    bin_dir = clean_venv / "bin"
    origin = subprocess.run(
        [str(bin_dir / "python"), "-P", "-c", "import tunelab.cli; print(tunelab.cli.__file__)"],
        check=True, capture_output=True, text=True, cwd=hostile_cwd,
    ).stdout  # fmt: skip
    assert str(clean_venv) in origin and str(REPO) not in origin  # the wheel, not the checkout
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    port = free_port()
    sim = subprocess.Popen(
        [str(bin_dir / "tunelab"), "sim-server", "--port", str(port), "--model", "m",
         "--ttft-ms", "5", "--itl-ms", "1"],
        cwd=hostile_cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30  # a loaded machine starts the simulator slowly
        while time.monotonic() < deadline and sim.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        bench = subprocess.run(
            [str(bin_dir / "tunelab"), "bench", "--url", f"http://127.0.0.1:{port}", "--model",
             "m", "--concurrency", "2", "--requests", "4", "--input-len", "8", "--output-len",
             "4", "--json"],
            cwd=hostile_cwd, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        sim.terminate()
        sim.wait(10)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert "imported ./" not in bench.stdout + bench.stderr
    document = json.loads(bench.stdout)
    assert document["status"] == "completed"
    assert [p["completed"] for p in document["points"]] == [4]


def test_version_flags_and_bare_help(clean_venv: Path, hostile_cwd: Path) -> None:
    bin_dir = clean_venv / "bin"
    for script, prog in (("tunelab", "tunelab"), ("tunelab-agent", "tunelab-agent")):
        out = subprocess.run(
            [str(bin_dir / script), "--version"], capture_output=True, text=True, cwd=hostile_cwd
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{prog} 0.1.0"
    bare = subprocess.run([str(bin_dir / "tunelab")], capture_output=True, text=True)
    assert bare.returncode == 0
    assert bare.stdout.startswith("usage: tunelab") and "submit" in bare.stdout


def test_help_does_not_load_the_load_generator() -> None:
    watched = "('tunelab.bench', 'tunelab.controller', 'tunelab.agent', 'aiohttp')"
    probe = (
        "import sys; from tunelab.cli.main import build_parser; build_parser().format_help(); "
        f"print(sorted(m for m in sys.modules if m.startswith({watched})))"
    )
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # only pure-Python leaves: the sim-server's argparse option table (which names its flags,
    # reads its --speed-file and parses its --phase), and the prompt-length line the views print
    expected = [
        "tunelab.bench",
        "tunelab.bench.promptlengths",
        "tunelab.bench.simulator",
        "tunelab.bench.simulator.options",
        "tunelab.bench.simulator.phases",
        "tunelab.bench.simulator.upgrade",
    ]
    assert out.stdout.strip() == repr(expected)
