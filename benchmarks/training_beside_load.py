"""Training time quiet and beside busy processes, in checkouts side by side.

Each round trains one model (`models.bundle.train_bundle`, the service's 2 LightGBM threads)
on the H200 GEMM probe runs in a fresh process of each checkout given, first on the quiet box,
then beside `--busy` processes that keep a core each busy (pure Python loops, as other work
would). The checkouts alternate within a round. OpenMP reads its wait policy when it starts, so
each training runs in a process of its own; the environment is the caller's.

With `--env-arm VAR=VALUE`, the first checkout also runs with that variable set, as one
more arm. Prints one JSON object: per arm, the wall seconds of each round quiet and beside, their
medians, and each checkout's median against the first one's.

    git worktree add --detach /tmp/base BASE
    .venv/bin/python benchmarks/training_beside_load.py --tree . --tree /tmp/base \
        > benchmarks/results/training_beside_load_1205.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "gemm_h200_probe_runs.jsonl.gz"
TRAIN = """
import os, sys
from pathlib import Path
from models.bundle import train_bundle
from models.data_files import load_runs
train_bundle(load_runs([Path(sys.argv[1])]), model_params={"n_estimators": 50, "n_jobs": 2})
print(os.environ.get("OMP_WAIT_POLICY", ""))
"""


def git_head(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def train(tree: Path, extra: dict[str, str], timeout_s: float) -> tuple[float, str | None]:
    """Return (wall seconds, the OMP_WAIT_POLICY the training process had); a training
    stopped at `timeout_s` counts as `timeout_s`, with None for the policy."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(extra, PYTHONPATH=str(tree))
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", TRAIN, str(DATA)],
            cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s, check=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return timeout_s, None
    return time.perf_counter() - start, done.stdout.strip()


def busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument(
        "--env-arm",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="one more arm: the first checkout with this variable set (repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per training")
    args = parser.parse_args()
    arms: dict[str, tuple[Path, dict[str, str]]] = {
        str(t.resolve()): (t.resolve(), {}) for t in args.tree
    }
    for spec in args.env_arm:
        var, _, value = spec.partition("=")
        arms[f"{args.tree[0].resolve()} {spec}"] = (args.tree[0].resolve(), {var: value})
    figures: dict[str, dict[str, list[float]]] = {
        name: {"quiet_s": [], "beside_s": []} for name in arms
    }
    policy: dict[str, str | None] = {}
    stopped: dict[str, int] = dict.fromkeys(arms, 0)
    started = time.perf_counter()
    for _ in range(args.rounds):
        for name, (tree, extra) in arms.items():
            wall, policy[name] = train(tree, extra, args.timeout_s)
            figures[name]["quiet_s"].append(round(wall, 2))
        loads = busy(args.busy)
        try:
            for name, (tree, extra) in arms.items():
                wall, seen = train(tree, extra, args.timeout_s)
                figures[name]["beside_s"].append(round(wall, 2))
                stopped[name] += seen is None
        finally:
            for process in loads:
                process.kill()
                process.wait()
    first = next(iter(arms))
    out = {
        "what": "train_bundle on the H200 GEMM probe runs, 50 trees, 2 LightGBM threads",
        "machine": f"{os.uname().machine}, {os.cpu_count()} CPUs",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "busy_processes": args.busy,
        "wall_s": round(time.perf_counter() - started, 1),
        "checkouts": {},
    }
    for name, (tree, extra) in arms.items():
        f = figures[name]
        quiet, beside = statistics.median(f["quiet_s"]), statistics.median(f["beside_s"])
        out["checkouts"][name] = {
            "code": git_head(tree),
            "env": extra,
            "omp_wait_policy": policy[name] or "(OpenMP's default)",
            "beside_stopped_at_timeout": stopped[name],
            **f,
            "quiet_median_s": quiet,
            "beside_median_s": beside,
            "beside_vs_quiet": round(beside / quiet, 2),
            "quiet_vs_first": round(quiet / statistics.median(figures[first]["quiet_s"]), 3),
            "beside_vs_first": round(beside / statistics.median(figures[first]["beside_s"]), 3),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
