#!/usr/bin/env bash
# GPU tests plus a CLI example and a re-timing check of two shapes (see BENCHMARKS.md).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
timeout 120 python3 -m pytest -v tests/gpu -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests.txt | tail -4
timeout 30 python3 -c "from cli import main; main()" agent probe --shape 4095x4095x4095 --dtype bf16 --trans-b > $OUT/cli_example.txt 2>&1
timeout 60 python3 - <<'PY' 2>&1 | tee $OUT/retime.txt
from agents.probe.assemble import build_engine
from tps.problem import ProblemKey
e = build_engine(device="cuda", host_id="be7c4a11d0e5f00d", bans_path="/tmp/b.json")
for dims in ({"m": 64, "n": 64, "k": 65536}, {"m": 1000, "n": 1000, "k": 1000}):
    p = ProblemKey(op="gemm", dtype="bf16", dims=dims, trans_b=True)
    for attempt in range(2):
        run = e.probe(p)
        w = next(m for m in run.measurements if m.candidate.id == run.winner_id)
        d = run.measurements[0]
        again = e.probe(p, only=[w.candidate])
        print(dims, attempt, w.candidate.label(), f"probe {d.median_us:.2f}/{w.median_us:.2f}",
              "re-timed", [f"{m.median_us:.2f}" for m in again.measurements])
PY
