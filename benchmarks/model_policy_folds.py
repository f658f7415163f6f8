"""The served policy chosen with more of the training configurations as inner folds.

`choose_policy` holds out at most `MAX_FOLDS` (5) of a fleet's configurations in turn, spread
over their order, to keep retraining within its time. This evaluates the named holdouts of
the GEMM probe runs with `--folds N` inner folds instead and prints, per holdout, the policy
chosen and its score@1 / score@5 beside the nearest device's.

    .venv/bin/python benchmarks/model_policy_folds.py --folds 11 \
        --holdout "NVIDIA H100 80GB HBM3/bf16" [--data FILE ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import models.evaluation as evaluation
import models.selection as selection
from models.data_files import load_runs
from models.dataset import TuningData

DATA = Path(__file__).resolve().parent / "data"
FILES = [DATA / "gemm_h200_probe_runs.jsonl.gz", DATA / "gemm_h100_probe_runs.jsonl.gz"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, required=True)
    parser.add_argument("--holdout", action="append", required=True)
    parser.add_argument("--data", type=Path, action="append")
    args = parser.parse_args()
    evaluation.choose_policy = functools.partial(selection.choose_policy, max_folds=args.folds)
    data = TuningData.from_runs(load_runs(args.data or FILES)).for_op("gemm")
    models = selection.FoldModels(data, op="gemm", model_params={"n_jobs": 1})
    for holdout in args.holdout:
        started = time.perf_counter()
        report = evaluation.evaluate_holdout(data, holdout, op="gemm", models=models)
        served, nearest = report.policy, report.baseline_nearest
        row = {
            "holdout": holdout,
            "folds": args.folds,
            "policy": served.name,
            "served": [round(served.score_at_1, 4), round(served.score_at_5, 4)],
            "nearest": [round(nearest.score_at_1, 4), round(nearest.score_at_5, 4)]
            if nearest
            else None,
            "wall_s": round(time.perf_counter() - started, 1),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
