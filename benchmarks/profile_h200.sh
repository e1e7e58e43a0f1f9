#!/usr/bin/env bash
# The H200 figures of issue 27, in one device call (the run tool: bash benchmarks/profile_h200.sh):
# a real CUDA trace of GEMMs + attention (SDPA's default backend, and the math backend for a
# diff), torch's own key_averages beside each, and tunelab's parse time / peak RSS for the real
# traces and for synthetic 500 MB (plain) and 200 MB (gzipped) traces. Writes under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=controller:proto:agent
out="${OUT:-/tmp/profile_h200}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
for attention in default math; do
  python3 benchmarks/profile_capture.py --device cuda --steps 4 --attention "$attention" \
    --out "$out/cuda_h200_$attention" 2>&1 | grep -v '^STAGE:' | tail -3
done
{
  for attention in default math; do
    python3 benchmarks/profile_parse.py --trace "$out/cuda_h200_$attention/trace.json.gz"
  done
  python3 benchmarks/profile_parse.py --mb 500
  python3 benchmarks/profile_parse.py --mb 200 --gzip
} > "$out/parse.md" 2> "$out/parse.err"
cat "$out/parse.md"
tail -5 "$out/parse.err"
