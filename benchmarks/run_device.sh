#!/usr/bin/env bash
# One device call: the GEMM dataset of the GPU it runs on (SM limits, fp16, tf32, and with
# FULL_BF16=1 the full-chip bf16 suite too). On the H200 the full-chip bf16 runs came from
# benchmarks/run_main_device.sh, in a call of their own.
# Usage on the device: OUT=dir [FULL_BF16=1] bash benchmarks/run_device.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
DS=/tmp/dataset; mkdir -p $DS
timeout 45 python3 -m pytest -q tests/gpu -k green -p no:cacheprovider > $OUT/gpu_tests_green.txt 2>&1
tail -2 $OUT/gpu_tests_green.txt
configs=("sm16 bf16 16 120" "fp16 fp16 0 60" "tf32 tf32 0 75" "sm32 bf16 32 80" "sm64 bf16 64 60")
[ "${FULL_BF16:-0}" = 1 ] && configs=("bf16 bf16 0 60" "${configs[@]}")
# One green context per process: each SM limit runs in its own process.
for spec in "${configs[@]}"; do
  set -- $spec
  limit=(); [ "$3" != 0 ] && limit=(--sm-limit $3)
  timeout $4 python3 benchmarks/gemm_h200.py dataset --out $DS --tag $1 --dtype $2 "${limit[@]}" > $DS/$1.log 2>&1
  echo "$1 rc=$? $(tail -c 300 $DS/$1.log | tail -1)"
done
cat $DS/runs_*.jsonl | gzip -9 > $OUT/gemm_dataset.jsonl.gz
python3 - <<'PY'
import glob, json, os
out = {}
for f in sorted(glob.glob("/tmp/dataset/summary_*.json")):
    d = json.load(open(f)); out[d["tag"]] = d
for f in sorted(glob.glob("/tmp/dataset/*.log")):
    tag = os.path.basename(f)[:-4]
    out.setdefault(tag, {"tag": tag, "incomplete": True, "log_tail": open(f).read()[-2000:]})
json.dump(out, open(os.environ["OUT"] + "/dataset_summaries.json", "w"))
PY
