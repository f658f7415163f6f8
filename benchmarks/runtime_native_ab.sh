#!/usr/bin/env bash
# The runtime's per-call host time with its native routers (TPS_RUNTIME_NATIVE=1) and with
# its routing in Python alone (0), in alternating pairs on one machine; one JSON line a run.
# Usage: bash benchmarks/runtime_native_ab.sh DEVICE PAIRS FILE   (e.g. cpu 3 results.jsonl)
set -u
TPS="${TPS:-python3 -c 'from cli import main; main()'}"
for i in $(seq "$2"); do
  for native in 1 0; do
    TPS_RUNTIME_NATIVE=$native timeout 180 bash -c "$TPS bench runtime-overhead --device $1 --json" \
      | python3 -c "import json, sys; r = json.load(sys.stdin); r['native'] = $native; r['pair'] = $i; print(json.dumps(r))" >> "$3"
  done
done
python3 - "$3" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["native"], {k: round(v, 3) for k, v in r.items() if k.endswith("overhead_us")})
PY
