#!/usr/bin/env bash
# The H200 figures: GPU tests, then the bf16 suite against TunableOp and max-autotune.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
timeout 120 python3 -m pytest -q tests/gpu -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests.txt | tail -5
nvidia-smi --query-gpu=name,temperature.gpu,utilization.gpu,clocks.sm,power.draw --format=csv >> $OUT/gpu_tests.txt
timeout 430 python3 benchmarks/gemm_h200.py main --out $OUT --autotune-shapes ${AUTOTUNE_SHAPES:-24} 2>&1 | grep -v -e "^  triton_mm" -e "AUTOTUNE" | tail -60
