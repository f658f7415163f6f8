#!/usr/bin/env bash
# One H200 call for the runtime: its GPU tests, the overhead figures and model cases.
# Usage on the device: OUT=dir bash benchmarks/runtime_device.sh "MODELS" "CASES" "COMPILE" [tests]
#   e.g. bash benchmarks/runtime_device.sh "gpt2-medium" "decode-b1 decode-b32 prefill" "default" tests
# BENCH_ARGS (e.g. --no-fleet) go to `tps bench runtime`; NAME names the output (runtime_h200).
set -u
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
TPS="python3 -c 'from cli import main; main()'"
if [ "${4:-}" = tests ]; then
  timeout 240 python3 -m pytest -v tests/gpu/test_gpu_runtime.py -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests_runtime.txt | tail -8
  timeout 90 python3 -c 'from cli import main; main()' bench runtime-overhead --device cuda --json > $OUT/runtime_overhead_h200.json 2> $OUT/overhead.err
  tail -c 600 $OUT/runtime_overhead_h200.json $OUT/overhead.err
fi
models=(); for m in $1; do models+=(--model $m); done
cases=(); for c in $2; do cases+=(--case $c); done
modes=(); for c in $3; do modes+=(--compile $c); done
python3 -c 'from cli import main; main()' bench runtime "${models[@]}" "${cases[@]}" "${modes[@]}" \
  --device cuda --json ${BENCH_ARGS:-} --out $OUT/${NAME:-runtime_h200}.jsonl 2> $OUT/bench.err
echo "rc=$?"; tail -c 1500 $OUT/bench.err
