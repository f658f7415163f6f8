#!/usr/bin/env bash
# `tps bench priors` at 1M measurements, this tree against an earlier commit, in alternating
# runs on the same machine and database server. One JSON object per run, each with its code.
# Usage: bash benchmarks/priors_ab.sh BASE_REV [PAIRS] [DATABASE_URL] > runs.jsonl
set -euo pipefail
base=$1; pairs=${2:-3}
url=${3:-postgresql+psycopg://postgres@127.0.0.1:5432/test}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
before=$(mktemp -d)
git -C "$here" worktree add -q --detach "$before" "$base"
trap 'git -C "$here" worktree remove --force "$before"' EXIT
for _ in $(seq "$pairs"); do
  for tree in "$here" "$before"; do
    code=$(git -C "$tree" rev-parse --short HEAD)
    [ "$tree" = "$here" ] && [ -n "$(git -C "$here" status --porcelain -- services models tools)" ] && code="$code+changes"
    (cd "$tree" && PYTHONPATH="$tree" "$py" -c 'from cli import main; main()' \
      bench priors --json --database-url "$url" --measurements 1000000 2>/dev/null) | "$py" -c \
      "import json,sys; d=json.loads(sys.stdin.read()); d['code']='$code'; print(json.dumps(d))"
  done
done
