#!/usr/bin/env bash
# `make deps`: the Debian packages the test suite needs beside Python, found or installed.
#   chromium    the report's headless-browser tests (tests/support/browser.py)
#   prometheus  the e2e scrape tests and promtool (tests/support/prometheus_server.py)
#   postgresql  the store tests' throwaway server (tests/support/postgres.py: /usr/lib/postgresql/*/bin)
#   curl        the runnable README/docs blocks
#   systemd     systemd-analyze verify on deploy/systemd (tests/e2e/test_deploy.py)
#   slurm-wlm, munge  a real single-node Slurm for the Slurm pool tests (tests/support/slurm.py)
# mkdocs is not here: it comes from pip with the dev extra.
# As root, missing packages are installed with apt-get (update first, noninteractive). As anyone
# else it stops with one line giving the exact command to run; it never calls sudo itself.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

missing_packages() {
  local missing=()
  have chromium || have chromium-browser || have google-chrome || missing+=(chromium)
  have prometheus && have promtool || missing+=(prometheus)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
  have curl || missing+=(curl)
  have systemd-analyze || missing+=(systemd)
  # the daemons are in /usr/sbin, which a non-root PATH may lack
  { have slurmctld || [ -x /usr/sbin/slurmctld ]; } && have sbatch || missing+=(slurm-wlm)
  have munged || [ -x /usr/sbin/munged ] || missing+=(munge)
  echo "${missing[*]}"
}

missing=$(missing_packages)
if [ -z "$missing" ]; then
  echo "deps: chromium, prometheus, postgresql, curl, systemd-analyze, slurm, munge found"
  exit 0
fi

install="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing $missing; as root run: sudo sh -c '$install'" >&2
  exit 1
fi
if ! have apt-get; then
  echo "deps: missing $missing and no apt-get here: install Debian's packages $missing by hand" >&2
  exit 1
fi

echo "deps: installing $missing"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # $missing is a list of package names
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing

still=$(missing_packages)
if [ -n "$still" ]; then
  echo "deps: apt-get install finished but $still still not found" >&2
  exit 1
fi
echo "deps: installed $missing"
