"""How far the H200's tf32 latencies could be carried from its fp16 and bf16 measurements.

The tf32 configuration held out is 14.5% off (median APE of `predicted_us`, the mean of each
problem's median): most of its candidates never ran in another dtype, so they start from the
problem's level. This measures what an anchor on a sibling would give, a candidate that ran
in another dtype with the same parameters but its pipeline stages (Triton's `num_stages`,
cuBLASLt's `stages`), before building one:

- `exact` / `sibling`: tf32 rows whose candidate (or a sibling) ran on the same shape in the
  other dtype;
- `ape_global_ratio`: the sibling's latency times one ratio for every row (the median);
- `ape_problem_level`: times each problem's own median ratio (the true level, which no
  prediction knows: the best any sibling anchor can do);
- `ape_best_constant`: every tf32 row predicted by its problem's true median latency.

    .venv/bin/python benchmarks/model_tf32_siblings.py > benchmarks/results/model_tf32_siblings.json
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.data_files import load_runs
from models.dataset import TuningData

DATA = Path(__file__).resolve().parent / "data" / "gemm_h200_probe_runs.jsonl.gz"
STAGES = ("num_stages", "stages")


def per_problem_ape(problems: pd.Series, predicted: np.ndarray, measured: np.ndarray) -> float:
    """The mean over problems of each problem's median absolute percentage error."""
    ape = pd.Series(np.abs(predicted / measured - 1), index=problems.index)
    return round(float(ape.groupby(problems).median().mean()), 4)


def main() -> None:
    data = TuningData.from_runs(load_runs([DATA]))
    frame = data.frame[data.frame["valid"]].copy()
    problems, candidates = data.problems, data.candidates
    frame["dtype"] = frame["problem_hash"].map(lambda p: problems[p].dtype)
    frame["shape"] = frame["problem_hash"].map(
        lambda p: (
            tuple(sorted(problems[p].dims.items())),
            problems[p].trans_a,
            problems[p].trans_b,
        )
    )

    def sibling(cid: str) -> tuple[Any, ...]:
        c = candidates[cid]
        params = {k: v for k, v in c.params.items() if k not in STAGES}
        return (c.backend, tuple(sorted(params.items())))

    frame["sibling"] = frame["candidate_id"].map(sibling)
    tf32 = frame[frame["dtype"] == "tf32"]
    out: dict[str, Any] = {
        "data": str(DATA.relative_to(DATA.parents[2])),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "tf32_rows": len(tf32),
        "tf32_by_backend": {
            k: int(v)
            for k, v in tf32["candidate_id"]
            .map(lambda c: candidates[c].backend)
            .value_counts()
            .items()
        },
        "ape_best_constant": per_problem_ape(
            tf32["problem_hash"],
            tf32.groupby("problem_hash")["median_us"].transform("median").to_numpy(),
            tf32["median_us"].to_numpy(),
        ),
    }
    for dtype in ("fp16", "bf16"):
        ref = frame[frame["dtype"] == dtype]
        # the whole chip (the bf16 runs under SM limits are devices of their own)
        ref = ref[ref["hw_key"].map(lambda k: data.hardware[k].unit_limit is None)]
        exact = set(zip(ref["shape"], ref["candidate_id"], strict=True))
        siblings = ref.groupby(["shape", "sibling"])["median_us"].median().to_dict()
        keys = list(zip(tf32["shape"], tf32["sibling"], strict=True))
        has = np.array([k in siblings for k in keys])
        rows = tf32[has].copy()
        rows["ref_us"] = [siblings[k] for k, h in zip(keys, has, strict=True) if h]
        log_ratio = np.log(rows["median_us"] / rows["ref_us"])
        level = log_ratio.groupby(rows["problem_hash"]).transform("median")
        out[dtype] = {
            "exact": int(
                sum(k in exact for k in zip(tf32["shape"], tf32["candidate_id"], strict=True))
            ),
            "sibling": int(has.sum()),
            "global_ratio": round(float(np.exp(log_ratio.median())), 4),
            "ape_global_ratio": per_problem_ape(
                rows["problem_hash"],
                rows["ref_us"].to_numpy() * float(np.exp(log_ratio.median())),
                rows["median_us"].to_numpy(),
            ),
            "ape_problem_level": per_problem_ape(
                rows["problem_hash"],
                rows["ref_us"].to_numpy() * np.exp(level.to_numpy()),
                rows["median_us"].to_numpy(),
            ),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
