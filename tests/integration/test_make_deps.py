"""Integration: `make deps` on a machine without the suite's system packages.

Each case runs the real `make deps` in a private user and mount namespace: PATH holds only bash,
sh, id and a fake apt-get that records its argv (and, for ``install``, puts stand-ins of the
packages' programs in place), and a tmpfs over /usr/lib/postgresql hides PostgreSQL's binaries.
Nothing on the machine itself is touched. The non-root case runs one namespace deeper, as uid 1000.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon_proc import REPO

PACKAGES = ["chromium", "prometheus", "postgresql", "curl", "systemd", "slurm-wlm", "munge"]
PROGRAMS = {
    "chromium": ["chromium"],
    "prometheus": ["prometheus", "promtool"],
    "curl": ["curl"],
    "systemd": ["systemd-analyze"],
    "slurm-wlm": ["slurmctld", "sbatch"],
    "munge": ["munged"],
}
PG_LIB = Path("/usr/lib/postgresql")
UNSHARE = shutil.which("unshare")
MAKE = shutil.which("make")

# install: stand-ins in $FAKE_BIN; postgresql's initdb lands in the tmpfs over /usr/lib/postgresql
FAKE_APT_GET = r"""#!/bin/bash
echo "DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-} $*" >> "$APT_RECORD"
[ "$1" = install ] || exit 0
for pkg in "$@"; do
  case "$pkg" in
    chromium) progs="chromium" ;;
    prometheus) progs="prometheus promtool" ;;
    curl) progs="curl" ;;
    systemd) progs="systemd-analyze" ;;
    slurm-wlm) progs="slurmctld sbatch" ;;
    munge) progs="munged" ;;
    postgresql) /bin/mkdir -p /usr/lib/postgresql/99/bin; progs="" ;
                : > /usr/lib/postgresql/99/bin/initdb ;;
    *) progs="" ;;
  esac
  for p in $progs; do printf '#!/bin/sh\n' > "$FAKE_BIN/$p"; /bin/chmod +x "$FAKE_BIN/$p"; done
done
"""


def _namespaces_work() -> bool:
    if UNSHARE is None or MAKE is None or not PG_LIB.is_dir():
        return False
    done = subprocess.run(
        [UNSHARE, "--user", "--map-root-user", "--mount", "/bin/true"], capture_output=True
    )
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    not _namespaces_work(),
    reason="needs unshare (user + mount namespaces), make and /usr/lib/postgresql to cover",
)


class Machine:
    """A bare PATH and a record of apt-get's calls."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.record = root / "apt-get.argv"
        self.record.touch()
        for tool in ("bash", "id", "sh"):
            found = shutil.which(tool)
            assert found, tool
            (self.bin / tool).symlink_to(found)
        apt = self.bin / "apt-get"
        apt.write_text(FAKE_APT_GET)
        apt.chmod(0o755)
        self.env = {
            "PATH": str(self.bin),
            "APT_RECORD": str(self.record),
            "FAKE_BIN": str(self.bin),
        }

    def provide(self, *packages: str) -> None:
        for pkg in packages:
            for prog in PROGRAMS[pkg]:
                path = self.bin / prog
                path.write_text("#!/bin/sh\n")
                path.chmod(0o755)

    def calls(self) -> list[str]:
        return self.record.read_text().splitlines()

    def run(
        self, *, as_uid: int = 0, postgres: bool = False, command: list[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        assert UNSHARE and MAKE
        inner = command or [MAKE, "--no-print-directory", "-C", str(REPO), "deps"]
        if as_uid:
            inner = [UNSHARE, "--user", f"--map-user={as_uid}", f"--map-group={as_uid}", *inner]
        # mount a tmpfs over PostgreSQL's binaries (kept empty unless this case has it)
        # and over /usr/sbin, where the Slurm and munge daemons are looked for beside PATH
        setup = "/bin/mount -t tmpfs tmpfs /usr/lib/postgresql"
        setup += " && /bin/mount -t tmpfs tmpfs /usr/sbin"
        if postgres:
            setup += " && /bin/mkdir -p /usr/lib/postgresql/15/bin"
            setup += " && : > /usr/lib/postgresql/15/bin/initdb"
        argv = [
            UNSHARE, "--user", "--map-root-user", "--mount", "--propagation", "private",
            "/bin/sh", "-c", f'{setup} && exec "$@"', "sh", *inner,
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self.env)


def test_as_root_installs_every_missing_package_noninteractively_after_an_update(
    tmp_path: Path,
) -> None:
    machine = Machine(tmp_path)
    done = machine.run()
    assert done.returncode == 0, done.stdout + done.stderr
    update, install = machine.calls()
    assert update == "DEBIAN_FRONTEND=noninteractive update -qq"
    assert install == (
        "DEBIAN_FRONTEND=noninteractive install -y -qq --no-install-recommends "
        + " ".join(PACKAGES)
    )
    assert (
        "deps: installed chromium prometheus postgresql curl systemd slurm-wlm munge" in done.stdout
    )


def test_as_root_installs_only_what_is_missing(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    machine.provide("chromium", "curl", "systemd", "slurm-wlm", "munge")
    done = machine.run(postgres=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert machine.calls()[-1].endswith("--no-install-recommends prometheus")


def test_nothing_missing_calls_no_apt_get(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    machine.provide("chromium", "prometheus", "curl", "systemd", "slurm-wlm", "munge")
    done = machine.run(postgres=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert machine.calls() == []
    assert "found" in done.stdout


def test_promtool_missing_counts_as_prometheus_missing(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    machine.provide("chromium", "prometheus", "curl", "systemd", "slurm-wlm", "munge")
    (machine.bin / "promtool").unlink()
    done = machine.run(postgres=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert machine.calls()[-1].endswith("--no-install-recommends prometheus")


def test_non_root_stops_with_one_line_whose_command_works_as_written(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    machine.provide("curl")
    done = machine.run(as_uid=1000)
    assert done.returncode != 0
    assert machine.calls() == [], "a non-root make deps must not run apt-get"
    lines = [line for line in done.stderr.splitlines() if line.startswith("deps:")]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    missing = "chromium prometheus postgresql systemd slurm-wlm munge"
    assert line.startswith(f"deps: missing {missing}; as root run: sudo ")
    command = line.split("as root run: sudo ", 1)[1]
    # the printed command, run as root (sudo's part done by the namespace), installs them all
    ran = machine.run(command=["/bin/sh", "-c", command])
    assert ran.returncode == 0, ran.stderr
    assert machine.calls() == [
        "DEBIAN_FRONTEND= update",
        f"DEBIAN_FRONTEND=noninteractive install -y --no-install-recommends {missing}",
    ]
    after = machine.run(postgres=True)  # each run has a fresh tmpfs: initdb as installed
    assert after.returncode == 0 and "found" in after.stdout, after.stdout + after.stderr


def test_ci_run_has_no_step_of_its_own() -> None:
    steps = [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert steps == [
        "set -euo pipefail",
        'cd "$(dirname "$0")/.."',
        "make test",
        "make test-engines",
    ]
