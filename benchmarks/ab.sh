#!/usr/bin/env bash
# Run a command in this tree and in a worktree of an earlier commit, alternating, on the same
# machine; each run prints one JSON object, which gets the code it ran as `code`.
# Usage: bash benchmarks/ab.sh BASE_REV PAIRS WATCHED_PATHS -- COMMAND... > runs.jsonl
# (WATCHED_PATHS: where an uncommitted change marks this tree's code "+changes").
set -euo pipefail
base=$1; pairs=$2; watched=$3; shift 4
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
before=$(mktemp -d)
git -C "$here" worktree add -q --detach "$before" "$base"
trap 'git -C "$here" worktree remove --force "$before"' EXIT
for _ in $(seq "$pairs"); do
  for tree in "$here" "$before"; do
    code=$(git -C "$tree" rev-parse --short HEAD)
    # shellcheck disable=SC2086 # the watched paths are several words
    [ "$tree" = "$here" ] && [ -n "$(git -C "$here" status --porcelain -- $watched)" ] && code="$code+changes"
    (cd "$tree" && PYTHONPATH="$tree" "$py" -c 'from cli import main; main()' "$@") | "$py" -c \
      "import json,sys; d=json.loads(sys.stdin.read()); d['code']='$code'; print(json.dumps(d))"
  done
done
