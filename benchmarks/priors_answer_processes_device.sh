#!/usr/bin/env bash
# One device call: the priors at 1M measurements, quiet, with model answers computed in
# processes of their own (TPS_MODEL_ANSWER_PROCESSES=1) and on the API process's
# threads (0), alternating, on a host of many cores (its CPUs only, no GPU), each
# run against an embedded Postgres of its own. PROCS lists the process counts of a pair, in
# the order run (default "1 0").
# Wheels first, here: bash benchmarks/device_wheels.sh agent service (carry .whl).
# Usage on the device: OUT=dir [PROCS="4 0"] bash benchmarks/priors_answer_processes_device.sh [PAIRS]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_RATE_LIMIT_PER_S=1000000
{ date -u; lscpu | grep 'Model name'; nproc; free -g | head -2; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
TPS=(python3 -c 'from cli import main; main()')
for i in $(seq "${1:-2}"); do
  for n in ${PROCS:-1 0}; do
    TPS_MODEL_ANSWER_PROCESSES=$n timeout 200 "${TPS[@]}" bench priors --json --measurements 1000000 >> $OUT/priors_answer_processes.jsonl 2>> $OUT/priors.err
    echo "pair $i processes $n rc=$?"
  done
done
tail -c 600 $OUT/priors.err
date -u >> $OUT/env.txt
