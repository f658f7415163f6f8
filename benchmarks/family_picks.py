"""Ways of picking a candidate for a GEMM shape never measured on its hardware, side by side.

On the H200 GEMM probe runs (benchmarks/data), each (configuration, problem) workload is asked
about with its problem left out, and each way picks one of the problem's own candidates:

- `vendor_default`: what torch.matmul runs;
- `nearest_shapes_K`: the lowest mean relative time over the K nearest measured shapes (log
  M, N, K) of the same hardware, among the candidates those shapes measured;
- `model_ranker`, `model_score`, `model_predicted_us`: the LatencyModel trained on 4 of 5
  folds of the problems (all hardware) and asked about the fifth on the same hardware;
- `ceiling`: the best candidate of the problem that some other shape of that hardware also
  measured (what any way of borrowing from other shapes can reach at best).

Prints one JSON object: the share of workloads whose pick is within 3% of the best
(`within_3pct`), and the share within 3% once an agent has probed a way's first k picks and
kept the fastest (`within_3pct_after_k_probes`, k = 1 to 4), with the vendor default probed
beside them as the agent always does (`..._with_default`).

    .venv/bin/python benchmarks/family_picks.py [FILE ...] > benchmarks/results/family_picks.json

FILE: probe-run files (default: the H200's); with several, each GPU's configurations are
workloads of their own, and the model learns from all of them.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from models.data_files import load_runs
from models.dataset import TuningData, add_relative_time
from models.estimator import LatencyModel
from tps.candidate import VENDOR_DEFAULT

DATA = Path(__file__).resolve().parent / "data" / "gemm_h200_probe_runs.jsonl.gz"
NEAR = 0.03
NEAREST = (4, 8, 16)
FOLDS = 5
PROBES = (1, 2, 3, 4)
# Each way's picks in order, per workload: (times by candidate, ranked candidate ids).
Ranked = list[tuple[dict[str, float], list[str]]]


def within(times: dict[str, float], pick: str | None) -> bool:
    best = min(times.values())
    return (
        pick is not None
        and np.isfinite(times.get(pick, np.inf))
        and times[pick] <= best * (1 + NEAR)
    )


def after_probes(ranked: Ranked, k: int, *, default: bool) -> float:
    """Share of workloads whose fastest of the first k picks (and the default) is within 3%."""
    hits = []
    for times, order in ranked:
        probed = order[:k] + ([VENDOR_DEFAULT.id] if default else [])
        measured = {c: times[c] for c in probed if c in times}
        hits.append(within(times, min(measured, key=measured.get) if measured else None))
    return round(float(np.mean(hits)), 3)


def borrowed_picks(data: TuningData, ranked: dict[str, Ranked]) -> dict[str, list[bool]]:
    """The picks made from other shapes' measurements on the same hardware."""
    frame = add_relative_time(data.frame.copy())
    shape = {h: np.log2([p.dims["m"], p.dims["n"], p.dims["k"]]) for h, p in data.problems.items()}
    out: dict[str, list[bool]] = {"vendor_default": [], "ceiling": []}
    out |= {f"nearest_shapes_{k}": [] for k in NEAREST}
    ranked |= {f"nearest_shapes_{k}": [] for k in NEAREST}
    for _, rows in frame.groupby("hw_key"):
        rel = rows.pivot_table(index="problem_hash", columns="candidate_id", values="log_rel")
        ran = rows.groupby("problem_hash")["candidate_id"].apply(set)
        for problem_hash, group in rows.groupby("problem_hash"):
            times = dict(zip(group["candidate_id"], group["median_us"].fillna(np.inf), strict=True))
            if not np.isfinite(min(times.values())):
                continue
            others = rel.drop(index=problem_hash)
            seen = set().union(*(ran[p] for p in others.index))
            borrowable = {c: t for c, t in times.items() if c in seen and np.isfinite(t)}
            out["ceiling"].append(
                bool(borrowable) and within(times, min(borrowable, key=borrowable.get))
            )
            out["vendor_default"].append(within(times, VENDOR_DEFAULT.id))
            distance = {
                p: float(np.linalg.norm(shape[p] - shape[problem_hash])) for p in others.index
            }
            for k in NEAREST:
                near = others.loc[sorted(distance, key=lambda p: (distance[p], p))[:k]]
                means = {
                    c: near[c].dropna().mean() for c in times if c in near and near[c].notna().any()
                }
                out[f"nearest_shapes_{k}"].append(
                    within(times, min(means, key=means.get) if means else None)
                )
                ranked[f"nearest_shapes_{k}"].append((times, sorted(means, key=means.get)))
    return out


def model_picks(data: TuningData, ranked: dict[str, Ranked]) -> dict[str, list[bool]]:
    """The picks of the model trained without the problem (FOLDS folds of the problems)."""
    problems = sorted(data.problems)
    np.random.default_rng(0).shuffle(problems)
    out: dict[str, list[bool]] = {"model_ranker": [], "model_score": [], "model_predicted_us": []}
    ranked |= {name: [] for name in out}
    for fold in np.array_split(problems, FOLDS):
        test = data.frame["problem_hash"].isin(set(fold))
        model = LatencyModel(op="gemm", n_jobs=1).fit(data.subset(~test))
        for (hw_key, problem_hash), group in data.frame[test].groupby(["hw_key", "problem_hash"]):
            times = dict(zip(group["candidate_id"], group["median_us"].fillna(np.inf), strict=True))
            if not np.isfinite(min(times.values())):
                continue
            candidates = [data.candidates[c] for c in group["candidate_id"]]
            frame = model.predict_frame(
                data.hardware[hw_key], data.problems[problem_hash], candidates
            )
            ids = frame["candidate_id"].to_numpy()
            out["model_ranker"].append(
                within(times, ids[np.argmax(frame["ranker_score"].to_numpy())])
            )
            out["model_score"].append(within(times, ids[np.argmax(frame["score"].to_numpy())]))
            out["model_predicted_us"].append(
                within(times, ids[np.argmin(frame["predicted_us"].to_numpy())])
            )
            for name, order in (
                ("model_ranker", np.argsort(-frame["ranker_score"].to_numpy(), kind="stable")),
                ("model_score", np.argsort(-frame["score"].to_numpy(), kind="stable")),
                ("model_predicted_us", np.argsort(frame["predicted_us"].to_numpy(), kind="stable")),
            ):
                ranked[name].append((times, [str(c) for c in ids[order]]))
    return out


def main() -> None:
    started = time.perf_counter()
    files = [Path(a) for a in sys.argv[1:]] or [DATA]
    data = TuningData.from_runs(load_runs(files)).for_op("gemm")
    ranked: dict[str, Ranked] = {}
    picks = borrowed_picks(data, ranked) | model_picks(data, ranked)
    probes = {
        f"{name}{'_with_default' if default else ''}": {
            str(k): after_probes(rows, k, default=default) for k in PROBES
        }
        for name, rows in ranked.items()
        for default in (False, True)
    }
    print(
        json.dumps(
            {
                "data": [str(f.resolve().relative_to(DATA.parents[2])) for f in files],
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "workloads": {name: len(v) for name, v in picks.items()},
                "within_3pct": {name: round(float(np.mean(v)), 3) for name, v in picks.items()},
                "within_3pct_after_k_probes": probes,
                "wall_s": round(time.perf_counter() - started, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
