#!/usr/bin/env bash
# `tps bench priors` at 1M measurements, this tree against an earlier commit, in alternating
# runs on the same machine and database server. One JSON object per run, each with its code.
# Usage: bash benchmarks/priors_ab.sh BASE_REV [PAIRS] [DATABASE_URL] > runs.jsonl
set -euo pipefail
url=${3:-postgresql+psycopg://postgres@127.0.0.1:5432/test}
exec bash "$(dirname "$0")/ab.sh" "$1" "${2:-3}" "services models tools" -- \
  bench priors --json --database-url "$url" --measurements 1000000
