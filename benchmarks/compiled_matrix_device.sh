#!/usr/bin/env bash
# One H200 call for the compiled matrix: optional GPU tests and bandwidth, then model cases,
# each in a process of its own, until DEADLINE seconds from the start (default 560).
# Usage on the device: OUT=dir bash benchmarks/compiled_matrix_device.sh [tests] gpt2-medium:decode-b1 ...
# COMPILE (default "default max-autotune") goes to `tps bench runtime --compile`.
set -u
start=$SECONDS
deadline=${DEADLINE:-560}
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
if [ "${1:-}" = tests ]; then
  shift
  timeout 120 python3 benchmarks/unit_bandwidth.py --limit 16 --limit 32 --limit 64 > $OUT/unit_bandwidth_h200.json 2> $OUT/bandwidth.err
  tail -c 300 $OUT/bandwidth.err
  timeout 240 python3 -m pytest -v tests/gpu -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests.txt | tail -4
  timeout 90 python3 -c 'from cli import main; main()' bench runtime-overhead --device cuda --json > $OUT/runtime_overhead_h200.json 2> $OUT/overhead.err
  tail -c 400 $OUT/runtime_overhead_h200.json
fi
modes=(); for c in ${COMPILE:-default max-autotune}; do modes+=(--compile $c); done
for pair in "$@"; do
  left=$((deadline - (SECONDS - start)))
  [ $left -gt 60 ] || { echo "skipped $pair: ${left}s left"; continue; }
  t0=$SECONDS
  timeout $left python3 -c 'from cli import main; main()' bench runtime --model ${pair%%:*} --case ${pair##*:} \
    "${modes[@]}" --no-eager --device cuda --json --out $OUT/runtime_compiled.jsonl 2>> $OUT/bench.err > /dev/null
  echo "$pair rc=$? in $((SECONDS - t0)) s"
done
tail -c 1200 $OUT/bench.err
