#!/usr/bin/env bash
# The runtime's host time per call (`tps bench runtime-overhead`), this tree against an earlier
# commit, in alternating runs on the same machine. One JSON object per run, each with its code.
# Usage: bash benchmarks/runtime_overhead_ab.sh BASE_REV [PAIRS] [DEVICE] > runs.jsonl
set -euo pipefail
base=$1; pairs=${2:-4}; device=${3:-cpu}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
before=$(mktemp -d)
git -C "$here" worktree add -q --detach "$before" "$base"
trap 'git -C "$here" worktree remove --force "$before"' EXIT
for _ in $(seq "$pairs"); do
  for tree in "$before" "$here"; do
    code=$(git -C "$tree" rev-parse --short HEAD)
    [ "$tree" = "$here" ] && [ -n "$(git -C "$here" status --porcelain -- agents)" ] && code="$code+changes"
    (cd "$tree" && PYTHONPATH="$tree" "$py" -c 'from cli import main; main()' \
      bench runtime-overhead --device "$device" --json) | "$py" -c \
      "import json,sys; d=json.loads(sys.stdin.read()); d['code']='$code'; print(json.dumps(d))"
  done
done
