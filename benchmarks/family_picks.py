"""Ways of picking a candidate for a GEMM shape never measured on its hardware, side by side.

On the H200 GEMM probe runs (benchmarks/data), each (configuration, problem) workload is asked
about with its problem left out, and each way picks one of the problem's own candidates:

- `vendor_default`: what torch.matmul runs;
- `nearest_shapes_K`: the lowest mean relative time over the K nearest measured shapes (log
  M, N, K) of the same hardware, among the candidates those shapes measured;
- `model_ranker`, `model_score`, `model_predicted_us`: the LatencyModel trained on 4 of 5
  folds of the problems (all hardware) and asked about the fifth on the same hardware;
- `ceiling`: the best candidate of the problem that some other shape of that hardware also
  measured (what any way of borrowing from other shapes can reach at best);
- `served_offered`: what the service answers an agent that offers the problem's candidates
  (`POST /v1/priors` with `offered`: the model's ranker over them), and `served_kmeans`: what
  it answers without an offer (the k-means family's winners, where a winner the problem did
  not list is a probe that finds nothing), through the service's own answer function with a
  bundle trained on the same folds;
- `random`: 32 random orders of the problem's candidates, the mean of their shares.

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

from models.bundle import train_bundle
from models.data_files import load_runs
from models.dataset import TuningData, add_relative_time
from services.profiler_api.priors.answering import family_answer
from services.profiler_api.priors.query import PriorQuery
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


def random_orders(rows: Ranked, draws: int = 32) -> list[Ranked]:
    """`draws` random orders of each workload's candidates (seeded)."""
    rng = np.random.default_rng(0)
    return [
        [(times, list(rng.permutation(sorted(times)))) for times, _ in rows] for _ in range(draws)
    ]


def model_picks(data: TuningData, ranked: dict[str, Ranked]) -> dict[str, list[bool]]:
    """The picks of the model trained without the problem (FOLDS folds of the problems)."""
    problems = sorted(data.problems)
    np.random.default_rng(0).shuffle(problems)
    out: dict[str, list[bool]] = {"model_ranker": [], "model_score": [], "model_predicted_us": []}
    out |= {"served_offered": [], "served_kmeans": []}
    ranked |= {name: [] for name in out}
    for fold in np.array_split(problems, FOLDS):
        test = data.frame["problem_hash"].isin(set(fold))
        bundle = train_bundle(
            data.subset(~test), model_params={"n_jobs": 1}, seed=0, select_policy=False
        )
        model = bundle.models["gemm"]
        for (hw_key, problem_hash), group in data.frame[test].groupby(["hw_key", "problem_hash"]):
            times = dict(zip(group["candidate_id"], group["median_us"].fillna(np.inf), strict=True))
            if not np.isfinite(min(times.values())):
                continue
            candidates = [data.candidates[c] for c in group["candidate_id"]]
            hardware, problem = data.hardware[hw_key], data.problems[problem_hash]
            for name, offered in (("served_offered", candidates), ("served_kmeans", None)):
                query = PriorQuery.of(hardware, problem, limit=len(candidates), offered=offered)
                order = [c.candidate_id for c in family_answer(bundle, 0, query).candidates]
                ranked[name].append((times, order))
                out[name].append(within(times, order[0] if order else None))
            frame = model.predict_frame(hardware, problem, candidates)
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
    random = random_orders(ranked["model_ranker"])
    probes = {
        f"{name}{'_with_default' if default else ''}": {
            str(k): after_probes(rows, k, default=default) for k in PROBES
        }
        for name, rows in ranked.items()
        for default in (False, True)
    }
    for default in (False, True):
        probes[f"random{'_with_default' if default else ''}"] = {
            str(k): round(float(np.mean([after_probes(r, k, default=default) for r in random])), 3)
            for k in PROBES
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
