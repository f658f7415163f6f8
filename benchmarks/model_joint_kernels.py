"""Does a model trained on both Kernel Tuner kernels at once rank each one better?

Leave one GPU out, as `tps evaluate --all` does, for each kernel of the shipped Kernel Tuner
data: the kernel's model trained on its own rows of the other four GPUs ("alone"), against
the same model trained also on the other kernel's rows of those four GPUs ("joint"). The other
kernel's problems join as problems of this op with dims of their own (a problem feature the
two kernels do not share is missing for the other), so parameter names that both kernels use
(block and tile sizes) and the hardware features are learnt from both. The model's own
ranking is scored (`model`), with the nearest GPU's beside it.

    .venv/bin/python benchmarks/model_joint_kernels.py > benchmarks/results/model_joint_kernels.json
"""

from __future__ import annotations

import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.data_files import load_runs
from models.dataset import TuningData
from models.estimator import LatencyModel
from models.evaluation import evaluate_holdout
from models.policy import BlendPolicy
from models.selection import FoldModels, configurations, holdout_mask
from tps.schemas import ProbeRun

DATA = Path(__file__).resolve().parent / "data" / "kernel_tuner"
KERNELS = ("convolution", "dedispersion")


def as_op(runs: list[ProbeRun], op: str) -> list[ProbeRun]:
    """The runs of another kernel, as problems of `op` (its own op named in the variant)."""
    out = []
    for run in runs:
        problem = run.problem.model_copy(update={"op": op, "variant": f"kernel:{run.problem.op}"})
        out.append(run.model_copy(update={"problem": problem}))
    return out


class JointFolds(FoldModels):
    """Folds of one kernel trained on its rows and the other kernels' rows of the same GPUs."""

    def __init__(self, data: TuningData, joint: TuningData, *, op: str) -> None:
        super().__init__(data, op=op)
        self.joint = joint

    def without(self, names: tuple[str, ...]) -> LatencyModel:
        left_out = self.mask(names)
        key = frozenset(np.flatnonzero(left_out.to_numpy()).tolist())
        if key not in self._models:
            held: set[str] = set()
            for name in names:
                held |= {self.data.hardware[k].name for k in holdout_mask(self.data, name)[1]}
            names_of = pd.Series({k: h.name for k, h in self.joint.hardware.items()})
            keep = ~self.joint.frame["hw_key"].map(names_of).isin(held)
            self._models[key] = LatencyModel(op=self.op, seed=self.seed).fit(
                self.joint.subset(keep)
            )
        return self._models[key]


def main() -> None:
    started = time.perf_counter()
    runs = {kernel: load_runs([DATA / f"{kernel}_milo"]) for kernel in KERNELS}
    report: dict[str, Any] = {
        "command": "python benchmarks/model_joint_kernels.py",
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "kernels": {},
    }
    policy = BlendPolicy(lead="model")  # fixed: only the model's own ranking is scored
    for kernel in KERNELS:
        own = runs[kernel]
        others = [r for k in KERNELS if k != kernel for r in as_op(runs[k], kernel)]
        data = TuningData.from_runs(own)
        joint = TuningData.from_runs(own + others)
        folds = {
            "alone": FoldModels(data, op=kernel),
            "joint": JointFolds(data, joint, op=kernel),
        }
        rows = []
        for holdout in configurations(data):
            row: dict[str, Any] = {"holdout": holdout}
            for name, models in folds.items():
                rep = evaluate_holdout(data, holdout, op=kernel, policy=policy, models=models)
                row[name] = {
                    "score_at_1": rep.model.score_at_1,
                    "score_at_5": rep.model.score_at_5,
                    "probes_to_3pct": rep.model.probes_to_3pct,
                    "median_ape": rep.model.median_ape,
                }
                assert rep.baseline_nearest is not None
                row["nearest_score_at_1"] = rep.baseline_nearest.score_at_1
                row["nearest_score_at_5"] = rep.baseline_nearest.score_at_5
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        report["kernels"][kernel] = {
            "rows": {"alone": len(data.frame), "joint": len(joint.frame)},
            "holdouts": rows,
            "mean": {
                name: {
                    metric: float(np.mean([r[name][metric] for r in rows]))
                    for metric in ("score_at_1", "score_at_5")
                }
                for name in folds
            },
        }
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
