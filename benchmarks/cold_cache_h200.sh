#!/usr/bin/env bash
# Warm against cold-cache timing of one problem whose B (32 MiB) fits the H200's 60 MiB L2.
# Usage on the device: OUT=dir bash benchmarks/cold_cache_h200.sh
set -eu
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
probe() { python3 -c "from cli import main; main()" agent probe --shape 16x4096x4096 \
  --dtype bf16 --trans-b --json "$@"; }
for i in 1 2; do probe > $OUT/warm_$i.json; probe --cold-cache > $OUT/cold_$i.json; done
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
def default_us(name):
    d = json.load(open(f"{out}/{name}.json"))
    return next(c["median_us"] for c in d["candidates"] if c["backend"] == "vendor-default")
rows = [{"run": i, "warm_us": default_us(f"warm_{i}"), "cold_us": default_us(f"cold_{i}")}
        for i in (1, 2)]
for r in rows:
    r["cold_over_warm"] = r["cold_us"] / r["warm_us"]
json.dump({"problem": "16x4096x4096 bf16, B stored [N, K]", "candidate": "vendor-default",
           "runs": rows}, open(f"{out}/cold_cache_h200.json", "w"), indent=1)
print(json.dumps(rows))
PY
