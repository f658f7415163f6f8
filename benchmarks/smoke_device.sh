#!/usr/bin/env bash
# First call on a GPU machine: imports, GPU tests, a few CLI probes, a short benchmark.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
python3 -c "import torch, triton, nvmath; print(torch.__version__, triton.__version__, nvmath.__version__, torch.cuda.get_device_name())" 2>&1 | tee $OUT/smoke.log
nvidia-smi --query-gpu=name,temperature.gpu,utilization.gpu,clocks.sm --format=csv | tee -a $OUT/smoke.log
timeout 240 python3 -m pytest -q -x tests/gpu -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests.txt | tail -15
for s in "4096x4096x4096" "4095x4095x4095" "1x6144x4096" "2048x2048x128" "64x64x65536"; do
  timeout 60 python3 -c "from cli import main; main()" agent probe --shape $s --dtype bf16 --trans-b --json >> $OUT/cli_probes.jsonl 2>>$OUT/smoke.log
done
python3 -c "
import json
for l in open('$OUT/cli_probes.jsonl'):
    d=json.loads(l); print(d['problem'], d['winner']['backend'], round(d['speedup_vs_default'] or 0,3), round(d['probe_ms'],1), round(d['compile_ms']))
    for c in d['candidates']: print('   ', c['backend'], c['params'], c['median_us'], c['valid'], (c['error'] or '')[:150])
" 2>&1 | tee -a $OUT/smoke.log
timeout 200 python3 benchmarks/gemm_h200.py main --out $OUT/bench --limit 8 --autotune-shapes 2 2>&1 | tail -40
