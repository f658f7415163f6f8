"""`tps bench train`: how long training takes on N rows of the generated benchmark fleet.

The rows are the generated fleet of `bench_fleet` (catalog hardware and its unit-restricted
configurations, the suite's GEMMs and more, 8 to 64 candidates per pair, roofline latencies),
built straight into the training table with numpy: one row per (hardware, problem, candidate),
as `TuningData.from_runs` would build it from the stored runs. The time is `train_bundle`'s:
both boosters and the shape families, locally or on a local Dask cluster of `dask_workers`
worker processes.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from models.bundle import train_bundle
from models.dataset import KEY_COLUMNS, TuningData, hardware_label
from tools.bench.fleet import (
    MAX_CANDIDATES,
    MIN_CANDIDATES,
    fleet_candidates,
    fleet_hardware,
    fleet_problems,
)
from tps.problem import DTYPE_BYTES


@dataclass(frozen=True)
class TrainBenchConfig:
    rows: int = 1_000_000
    dask_workers: int = 0
    seed: int = 0


def fleet_tuning_data(rows: int, *, seed: int = 0) -> TuningData:
    """Return about `rows` rows of the generated fleet as a training table."""
    hardware, problems, candidates = fleet_hardware(), fleet_problems(), fleet_candidates()
    n_hw, n_problems, n_cand = len(hardware), len(problems), len(candidates)
    mean = (MIN_CANDIDATES + MAX_CANDIDATES) / 2
    pairs = np.arange(max(1, round(rows / mean)), dtype=np.int64)
    if len(pairs) > n_hw * n_problems:
        raise ValueError(f"rows: {rows} needs more (hardware, problem) pairs than the fleet has")
    sizes = MIN_CANDIDATES + (pairs * 2654435761) % (MAX_CANDIDATES - MIN_CANDIDATES + 1)
    q = np.repeat(pairs, sizes)
    j = np.arange(len(q)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    cand = np.where(j == 0, 0, 1 + (q * 7 + j) % (n_cand - 1))
    hw, prob = q % n_hw, (q // n_hw) % n_problems
    tflops = np.array(
        [h.peak_tflops.get("bf16") or h.peak_tflops.get("fp16") or 50.0 for h in hardware]
    )
    bandwidth = np.array([h.mem_bandwidth_gbs for h in hardware])
    flops = np.array([p.flops for p in problems])
    moved = np.array(
        [
            DTYPE_BYTES[p.dtype]
            * (p.dims["m"] * p.dims["k"] + p.dims["k"] * p.dims["n"] + p.dims["m"] * p.dims["n"])
            for p in problems
        ]
    )
    base = np.maximum(flops[prob] / (tflops[hw] * 1e12), moved[prob] / (bandwidth[hw] * 1e9))
    efficiency = 0.35 + 0.6 * ((q * 2654435761 + cand * 40503) % 1000003) / 1000003.0
    noise = 1 + 0.02 * (np.random.default_rng(seed).random(len(q)) - 0.5)
    hw_keys = np.array([h.fingerprint() for h in hardware])
    frame = pd.DataFrame(
        {
            "op": "gemm",
            "hw_key": hw_keys[hw],
            "problem_hash": np.array([p.key_hash() for p in problems])[prob],
            "candidate_id": np.array([c.id for c in candidates])[cand],
            "median_us": (base * 1e6 + 4.0) / efficiency * noise,
        }
    )
    frame = frame.sort_values(["op", *KEY_COLUMNS], ignore_index=True)
    frame["valid"] = True
    labels = {h.fingerprint(): hardware_label(h) for h in hardware}
    frame["hw_label"] = frame["hw_key"].map(labels)
    return TuningData(
        frame=frame,
        hardware={h.fingerprint(): h for h in hardware},
        problems={p.key_hash(): p for p in problems},
        candidates={c.id: c for c in candidates},
    )


def run_train_bench(config: TrainBenchConfig) -> dict[str, Any]:
    """Build the rows, train on them (on a local Dask cluster if asked); return the figures."""
    started = time.perf_counter()
    data = fleet_tuning_data(config.rows, seed=config.seed)
    build_s = time.perf_counter() - started
    cluster = client = None
    if config.dask_workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=config.dask_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        )
        client = Client(cluster)  # type: ignore[no-untyped-call]
        # LightGBM's network set-up prints to the workers' stdout, which is this process's:
        # it would mix with the JSON the command prints.
        client.run(_quiet_stdout)
    try:
        started = time.perf_counter()
        bundle = train_bundle(data, seed=config.seed, client=client)
        train_s = time.perf_counter() - started
    finally:
        if client is not None:
            client.close()  # type: ignore[no-untyped-call]
        if cluster is not None:
            cluster.close()
    return {
        "train_s": round(train_s, 1),
        "rows": int(len(data.frame)),
        "build_rows_s": round(build_s, 1),
        "data_counts": bundle.data_counts,
        "trees": {op: model.ranker_.num_trees() for op, model in bundle.models.items()},
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _quiet_stdout() -> None:
    """Send a Dask worker's standard output to /dev/null (its logs go to stderr)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
