"""How much leave-one-GPU-out figures move with the training seed, and what choosing a
ranker setting honestly (by leave-one-GPU-out on the training GPUs only) gains.

For each seed, `models.evaluation.evaluate_holdout` holds out each GPU in turn, exactly as
`tps evaluate --all` does with `--seed`; figures are means over the held-out GPUs, then over
seeds. The nested run picks `label_step` per held-out GPU from the other four GPUs' own
leave-one-out (mean policy score@1 + score@5 over `--inner-seeds`), then scores the pick on
the held-out GPU. Writes benchmarks/results/model_loo_seeds.json.

    .venv/bin/python benchmarks/model_loo_seeds.py [--data DIR] [--seeds 8] [--inner-seeds 2]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from models.data_files import load_runs
from models.dataset import TuningData
from models.evaluation import configurations, evaluate_holdout, match_hardware
from tools.kernel_tuner import find_dataset
from tools.settings import LocalSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SOURCES = ("model", "policy", "baseline_nearest")
LABEL_STEPS = (0.02, 0.05, 0.1)  # 0.02 is LatencyModel's default


def loo(data: TuningData, op: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
    """Return {holdout: {source: (score@1, score@5)}} for one seed."""
    out = {}
    for name in configurations(data):
        report = evaluate_holdout(data, name, op=op, model_params=params, seed=seed).as_dict()
        out[report["holdout"]] = {
            s: (report[s]["score_at_1"], report[s]["score_at_5"]) for s in SOURCES
        }
    return out


def spread(data: TuningData, op: str, params: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """Return per-seed means over the held-out GPUs, and per-GPU means over seeds."""
    runs = [loo(data, op, params, seed) for seed in seeds]
    gpus = sorted(runs[0])
    per_seed: dict[str, list[float]] = {}
    for source in SOURCES:
        for i, k in ((0, 1), (1, 5)):
            per_seed[f"{source}.s{k}"] = [
                float(np.mean([run[g][source][i] for g in gpus])) for run in runs
            ]
    wins = [
        sum(run[g]["policy"][0] >= run[g]["baseline_nearest"][0] - 1e-9 for g in gpus)
        for run in runs
    ]
    return {
        "op": op,
        "params": params,
        "seeds": seeds,
        "mean": {k: float(np.mean(v)) for k, v in per_seed.items()},
        "min": {k: float(np.min(v)) for k, v in per_seed.items()},
        "max": {k: float(np.max(v)) for k, v in per_seed.items()},
        "per_seed": per_seed,
        "policy_wins_per_seed": wins,
        "per_gpu": {
            g: {
                s: [float(np.mean([run[g][s][k] for run in runs])) for k in (0, 1)] for s in SOURCES
            }
            for g in gpus
        },
    }


def nested(
    data: TuningData, op: str, *, inner_seeds: list[int], seeds: list[int]
) -> dict[str, Any]:
    """Pick label_step per held-out GPU by leave-one-GPU-out on the other GPUs only."""
    rows = {}
    for outer in configurations(data):
        held = match_hardware(data, outer)
        inner = data.subset(~data.frame["hw_key"].isin(held))
        inner_scores = []
        for step in LABEL_STEPS:
            reports = [
                evaluate_holdout(
                    inner, n, op=op, model_params={"label_step": step}, seed=s
                ).as_dict()
                for n in configurations(inner)
                for s in inner_seeds
            ]
            inner_scores.append(
                float(
                    np.mean(
                        [r["policy"]["score_at_1"] + r["policy"]["score_at_5"] for r in reports]
                    )
                    / 2
                )
            )
        step = LABEL_STEPS[int(np.argmax(inner_scores))]
        outs = [
            evaluate_holdout(
                data, outer, op=op, model_params={"label_step": step}, seed=s
            ).as_dict()
            for s in seeds
        ]
        rows[outs[0]["holdout"]] = {
            "inner_scores": dict(zip(map(str, LABEL_STEPS), inner_scores, strict=True)),
            "label_step": step,
            **{
                s: [float(np.mean([o[s][k] for o in outs])) for k in ("score_at_1", "score_at_5")]
                for s in SOURCES
            },
        }
        print(outer, rows[outs[0]["holdout"]], flush=True)
    mean = {
        f"{s}.s{k}": float(np.mean([r[s][i] for r in rows.values()]))
        for s in SOURCES
        for i, k in ((0, 1), (1, 5))
    }
    wins = sum(r["policy"][0] >= r["baseline_nearest"][0] - 1e-9 for r in rows.values())
    return {
        "op": op,
        "grid": LABEL_STEPS,
        "inner_seeds": inner_seeds,
        "seeds": seeds,
        "mean": mean,
        "policy_at_least_nearest": wins,
        "per_gpu": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=find_dataset(LocalSettings().kernel_tuner_data)
    )
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--inner-seeds", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    data = TuningData.from_runs(load_runs([args.data]))
    seeds = list(range(args.seeds))
    conv, dedisp = data.for_op("convolution"), data.for_op("dedispersion")
    doc: dict[str, Any] = {"spread": [], "date": datetime.now(UTC).isoformat(timespec="seconds")}
    for step in LABEL_STEPS:
        doc["spread"].append(spread(conv, "convolution", {"label_step": step}, seeds))
        print(
            json.dumps({k: doc["spread"][-1][k] for k in ("params", "mean", "min", "max")}),
            flush=True,
        )
    for step in LABEL_STEPS[:2]:
        doc["spread"].append(spread(dedisp, "dedispersion", {"label_step": step}, seeds[:4]))
        print(
            json.dumps({k: doc["spread"][-1][k] for k in ("params", "mean", "min", "max")}),
            flush=True,
        )
    doc["nested"] = nested(
        conv, "convolution", inner_seeds=list(range(args.inner_seeds)), seeds=seeds
    )
    print(json.dumps(doc["nested"]["mean"]), flush=True)
    doc["wall_s"] = round(time.perf_counter() - started, 1)
    (RESULTS / "model_loo_seeds.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
