#!/usr/bin/env bash
# One device call for the priors at fleet scale on a host of many cores (its CPUs only, no
# GPU): ingest alone, then the priors at 1M measurements quiet and beside 20,000
# measurements/s of ingest, each against an embedded Postgres of its own.
# Wheels first, here: bash benchmarks/device_wheels.sh agent service (carry .whl).
# Usage on the device: OUT=dir bash benchmarks/priors_device.sh [RUNS]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_RATE_LIMIT_PER_S=1000000
{ date -u; lscpu | grep 'Model name'; nproc; free -g | head -2; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
TPS=(python3 -c 'from cli import main; main()')
timeout 150 "${TPS[@]}" bench ingest --json > $OUT/ingest.json 2> $OUT/ingest.err
echo "ingest rc=$?"; tail -c 300 $OUT/ingest.json; tail -c 300 $OUT/ingest.err
for i in $(seq "${1:-1}"); do
  timeout 300 "${TPS[@]}" bench priors --json --measurements 1000000 --ingest-rate 20000 >> $OUT/priors_ingest.jsonl 2>> $OUT/priors.err
  echo "priors $i rc=$?"
done
tail -c 1200 $OUT/priors_ingest.jsonl; tail -c 600 $OUT/priors.err
date -u >> $OUT/env.txt
