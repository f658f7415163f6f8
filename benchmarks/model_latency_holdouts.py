"""How far the latency a model predicts is from the measured one, per H200 GEMM holdout.

For each configuration of the H200 GEMM data left out (`tps evaluate`'s fold models), the
median absolute percentage error of each problem's candidates, then the mean over the
holdout's problems, for: the anchored booster (`anchored_us`), the pooled anchor it starts
from (the closest measured devices' latencies carried by the roofline, for the candidates
that have one), the nearest anchor alone (the closest device that ran each candidate,
carried the same way), and the model's `predicted_us` (`predict_frame`).

    .venv/bin/python benchmarks/model_latency_holdouts.py [FILE ...] \
        > benchmarks/results/model_latency_holdouts.json

FILE: probe-run files to learn from and hold out (default: the H200's); several are learnt
from together, e.g. benchmarks/data/gemm_h200_probe_runs.jsonl.gz
benchmarks/data/gemm_h100_probe_runs.jsonl.gz.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from models.data_files import load_runs
from models.dataset import TuningData
from models.selection import FoldModels, configurations, holdout_mask

DATA = Path(__file__).resolve().parent / "data" / "gemm_h200_probe_runs.jsonl.gz"


def median_ape(predicted: np.ndarray, measured: np.ndarray) -> float | None:
    ok = np.isfinite(predicted) & np.isfinite(measured)
    return float(np.median(np.abs(predicted[ok] / measured[ok] - 1))) if ok.any() else None


def _split(parts: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    """Candidates with and without a measured anchor: how many, and each start's median APE."""
    out: dict[str, Any] = {}
    for key, arrays in parts.items():
        kind, name = key.split(".")
        values = np.concatenate(arrays)
        values = values[np.isfinite(values)]
        out.setdefault(kind, {})["candidates"] = int(sum(len(a) for a in arrays))
        out[kind][f"{name}_median_ape"] = float(np.median(values)) if len(values) else None
    return out


def main() -> None:
    files = [Path(a) for a in sys.argv[1:]] or [DATA]
    data = TuningData.from_runs(load_runs(files)).for_op("gemm")
    folds = FoldModels(data, op="gemm")
    holdouts = []
    for holdout in configurations(data):
        model = folds.without((holdout,))
        errors: dict[str, list[float]] = {
            "anchored_booster": [],
            "pooled_anchor": [],
            "nearest_anchor": [],
            "predicted_us": [],
        }
        test = data.frame[holdout_mask(data, holdout)[0]]
        split: dict[str, list[np.ndarray]] = {}
        for (hw_key, problem_hash), group in test.groupby(["hw_key", "problem_hash"]):
            hardware, problem = data.hardware[hw_key], data.problems[problem_hash]
            ids = list(group["candidate_id"])
            candidates = [data.candidates[c] for c in ids]
            measured = group["median_us"].to_numpy(dtype=float)
            anchors = model.reference_.anchor_columns(
                hardware, problem, ids, exclude=hardware.fingerprint()
            )
            booster = model.anchored_us(hardware, problem, candidates)
            frame = model.predict_frame(hardware, problem, candidates)
            has = np.isfinite(anchors["anc_log_pred"])
            starts = {
                "booster": booster,
                "anchor": np.exp(anchors["anc_log_pred"]),
                "bound": np.exp(anchors["anc_log_bound"]),
            }
            if "anc_log_group" in anchors:
                starts["level"] = np.exp(anchors["anc_log_group"])
            for name, values in starts.items():
                if values is None:
                    continue
                ape = np.abs(values / measured - 1)
                split.setdefault(f"anchored.{name}", []).append(ape[has])
                split.setdefault(f"unanchored.{name}", []).append(ape[~has])
            for name, predicted in (
                ("anchored_booster", booster),
                ("pooled_anchor", starts["anchor"]),
                ("nearest_anchor", np.exp(anchors["anc_log_us"] + anchors["anc_log_scale"])),
                ("predicted_us", frame["predicted_us"].to_numpy(dtype=float)),
            ):
                if predicted is not None and (ape := median_ape(predicted, measured)) is not None:
                    errors[name].append(ape)
        holdouts.append(
            {
                "holdout": holdout,
                "problems": int(test[["hw_key", "problem_hash"]].drop_duplicates().shape[0]),
            }
            | {f"{name}_median_ape": float(np.mean(v)) if v else None for name, v in errors.items()}
            | {"split": _split(split)}
        )
    print(
        json.dumps(
            {
                "command": " ".join(["python benchmarks/model_latency_holdouts.py", *sys.argv[1:]]),
                "machine": f"{platform.machine()}, Python {platform.python_version()}",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "holdouts": holdouts,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
