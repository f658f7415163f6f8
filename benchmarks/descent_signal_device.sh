#!/usr/bin/env bash
# One device call: Llama decode at batch 1 and 32 on a new GPU model (a 64-SM green context)
# with the fleet's defaults, each kernel's descent recorded (its likely configurations'
# spread, its time before and after, its name), to tell which kernels the descent pays for.
# Wheels first, here: bash benchmarks/device_wheels.sh agent service (carry .whl).
# Usage on the device: OUT=dir [VARIANTS="descend_reductions ..."] bash benchmarks/descent_signal_device.sh [CASE ...]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep 'Model name'; nproc; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
for case in "${@:-decode-b1 decode-b32}"; do
  for c in $case; do
    timeout 500 python3 benchmarks/new_gpu_compiled.py --model llama3-8b-8l --case $c --sm-limit 64 ${VARIANTS:+--variants $VARIANTS} --timeout-s 230 --out $OUT/new_gpu_descent_$c.json > $OUT/new_gpu_$c.log 2>&1
    echo "$c rc=$?"; tail -12 $OUT/new_gpu_$c.log
  done
done
date -u >> $OUT/env.txt
