#!/usr/bin/env bash
# The runtime's host time per call (`tps bench runtime-overhead`), this tree against an earlier
# commit, in alternating runs on the same machine. One JSON object per run, each with its code.
# Usage: bash benchmarks/runtime_overhead_ab.sh BASE_REV [PAIRS] [DEVICE] > runs.jsonl
set -euo pipefail
exec bash "$(dirname "$0")/ab.sh" "$1" "${2:-4}" agents -- \
  bench runtime-overhead --device "${3:-cpu}" --json
