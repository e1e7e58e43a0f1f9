#!/usr/bin/env bash
# Install the load generators that benchmarks/peer_loadgen.py compares tunelab with, each in its
# own venv (both ignored by git): .venv-guidellm (GuideLLM 0.8.1) and .venv-aiperf (AIPerf 0.13.0).
# From the configured pip index only; nothing is downloaded at run time.
# GuideLLM pulls in torch: the CPU wheel (2.13.0+cpu) is installed first so pip does not fetch a
# CUDA build. Usage: benchmarks/setup_peers.sh [PYTHON]   (default python3, 3.11+)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
if [ ! -x .venv-guidellm/bin/guidellm ]; then
    "$PY" -m venv .venv-guidellm
    .venv-guidellm/bin/pip install --quiet "torch==2.13.0"
    .venv-guidellm/bin/pip install --quiet "guidellm==0.8.1"
fi
if [ ! -x .venv-aiperf/bin/aiperf ]; then
    "$PY" -m venv .venv-aiperf
    .venv-aiperf/bin/pip install --quiet "aiperf==0.13.0"
fi
.venv-guidellm/bin/guidellm --version || true
.venv-aiperf/bin/aiperf --version || true
