#!/usr/bin/env bash
# The load ladder by hand on the GPU: benchmarks/torch_server.py at --max-batch 8, tunelab bench at
# concurrency 1..32 with 5 x c requests (at least 10, as the load search measures), twice, to see
# whether a short point at a small load is flat by chance. Needs torch + CUDA; writes under $OUT.
b=8; python3 benchmarks/torch_server.py --port 18008 --max-batch $b --hidden 4096 --layers 8 --context 1024 > $OUT/diag-server.log 2>&1 &
for i in $(seq 90); do curl -sf localhost:18008/health >/dev/null && break; sleep 1; done
for rep in ${REPS:-1 2}; do for c in 1 2 4 8 16 32; do timeout 30 python3 -m tunelab.cli bench --url http://127.0.0.1:18008 --model torch-decode --concurrency $c --requests $((c*5>10?c*5:10)) --input-len 32 --output-len 32 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); p=d['points'][0]; print('rep $rep c=$c', round(p['output_throughput']), 'tok/s p99 TPOT', round(p['p99_tpot_ms'],2), 'p99 TTFT', round(p['p99_ttft_ms'],1), 'dur', round(p['duration'],2))"; done; done
kill %1; wait
