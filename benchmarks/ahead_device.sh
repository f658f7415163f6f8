#!/usr/bin/env bash
# One device call: a new GPU model's (a 64-SM green context) first compile of Llama decode with
# the fleet's defaults, each descent's next configurations compiled ahead in inductor's compile
# workers (`ahead`), beside the descents compiling them one after another (`serial`); each
# with an empty Triton cache of its own. With TESTS=1, the kernel tests on the GPU first. With
# FLEET=1, instead: the fleet's first host (the whole GPU, no records) compiling the case with
# its descents' configurations compiled ahead, then compiling them itself, each in a process,
# a cache and an empty Triton cache of its own.
# Wheels first, here: bash benchmarks/device_wheels.sh agent service (carry .whl).
# Usage on the device: OUT=dir [TESTS=1] bash benchmarks/ahead_device.sh [CASE ...]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep 'Model name'; nproc; python3 -c "import torch,triton;print(torch.__version__, triton.__version__)"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
if [ -n "${TESTS:-}" ]; then
  timeout 200 python3 -m pytest -v -rs -p no:cacheprovider tests/gpu/test_gpu_runtime.py -k "descents_next or kernel_descend" > $OUT/gpu_tests_ahead.txt 2>&1
  tail -8 $OUT/gpu_tests_ahead.txt
fi
for c in "${@:-decode-b1}"; do
  if [ -n "${FLEET:-}" ]; then
    for how in ahead serial; do
      mkdir -p /tmp/fleet-$how-$c
      TRITON_CACHE_DIR=/tmp/fleet-$how-$c/triton timeout 240 python3 benchmarks/new_gpu_compiled.py --role fleet --model llama3-8b-8l --case $c --workdir /tmp/fleet-$how-$c $([ $how = ahead ] && echo --fleet-ahead) > $OUT/fleet_${how}_$c.json 2> $OUT/fleet_${how}_$c.log
      echo "$c $how rc=$?"; tail -c 600 $OUT/fleet_${how}_$c.json
    done
    continue
  fi
  timeout 420 python3 benchmarks/new_gpu_compiled.py --model llama3-8b-8l --case $c --sm-limit 64 --variants ahead serial --timeout-s 300 --out $OUT/new_gpu_ahead_$c.json > $OUT/new_gpu_ahead_$c.log 2>&1
  echo "$c rc=$?"; tail -12 $OUT/new_gpu_ahead_$c.log
done
date -u >> $OUT/env.txt
