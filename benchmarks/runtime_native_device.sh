#!/usr/bin/env bash
# One device call for the runtime's native routers: the build, the routing overhead with the
# native routers against Python's alone (alternating pairs, one machine), then the GPU suite.
# Usage on the device: OUT=dir [GPU_TESTS=tests/gpu] bash benchmarks/runtime_native_device.sh [PAIRS]
set -u
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep 'Model name'; nproc
  g++ --version | head -1; python3 -c "import torch; print('torch', torch.__version__)"
  python3 -c "import time; t = time.perf_counter(); from agents.runtime import native; print('native', native.load(), f'{time.perf_counter() - t:.1f} s')"
} > $OUT/env.txt 2>&1
cat $OUT/env.txt
bash benchmarks/runtime_native_ab.sh cuda ${1:-2} $OUT/runtime_overhead_native.jsonl
timeout ${GPU_TESTS_S:-300} python3 -m pytest -q -rs -p no:cacheprovider ${GPU_TESTS:-tests/gpu} > $OUT/gpu_tests_native.txt 2>&1
tail -6 $OUT/gpu_tests_native.txt
