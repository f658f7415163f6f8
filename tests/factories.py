"""Builders of valid domain objects and wire bodies; tests override what they care about."""

from __future__ import annotations

import gzip
import json
import math
import secrets
import uuid
from itertools import product
from typing import Any

from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Measurement, PriorUse, ProbeRun, ProbeRunBatch, Telemetry


def hardware_spec(**overrides: Any) -> HardwareSpec:
    fields: dict[str, Any] = {
        "vendor": "nvidia",
        "arch": "sm_90",
        "name": "NVIDIA H200",
        "compute_units": 132,
        "l2_bytes": 50 * 2**20,
        "mem_bandwidth_gbs": 4800.0,
        "memory_bytes": 141 * 2**30,
        "peak_tflops": {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
        "clock_mhz": 1980.0,
        "warp_size": 32,
        "smem_per_unit_bytes": 228 * 1024,
        "driver_version": "580.65",
        "blas_version": "13.0.2",
        "torch_version": "2.11.0",
    }
    return HardwareSpec(**{**fields, **overrides})


def gemm_problem(m: int = 4096, n: int = 4096, k: int = 4096, **overrides: Any) -> ProblemKey:
    return ProblemKey(
        **{"op": "gemm", "dtype": "bf16", "dims": {"m": m, "n": n, "k": k}, **overrides}
    )


def unique_problem() -> ProblemKey:
    """Return a GEMM no other test uses, so tests sharing a live database stay independent."""
    return gemm_problem(m=secrets.randbelow(2**20) + 1, n=8192, k=1024)


def cublaslt(algo: int, **params: Any) -> Candidate:
    return Candidate(backend="cublaslt", params={"algo_id": algo, "tile": "128x128", **params})


def measurement(
    candidate: Candidate = VENDOR_DEFAULT, median_us: float = 100.0, **overrides: Any
) -> Measurement:
    fields: dict[str, Any] = {
        "candidate": candidate,
        "median_us": median_us,
        "p10_us": median_us * 0.98,
        "p90_us": median_us * 1.03,
        "std_us": median_us * 0.01,
        "samples": 20,
        "outliers_rejected": 1,
    }
    return Measurement(**{**fields, **overrides})


def probe_run(
    *,
    hardware: HardwareSpec | None = None,
    problem: ProblemKey | None = None,
    latencies: list[tuple[Candidate, float]] | None = None,
    measurements: list[Measurement] | None = None,
    **overrides: Any,
) -> ProbeRun:
    """Return a probe run; `latencies` pairs candidates with their median µs."""
    if measurements is None:
        latencies = latencies or [
            (VENDOR_DEFAULT, 120.0),
            (cublaslt(1), 100.0),
            (cublaslt(2), 140.0),
        ]
        measurements = [measurement(c, us) for c, us in latencies]
    fields: dict[str, Any] = {
        "run_id": uuid.uuid4(),
        "host_id": secrets.token_hex(16),
        "hardware": hardware or hardware_spec(),
        "problem": problem or unique_problem(),
        "measurements": measurements,
        "budget_ms": 12.5,
        "telemetry": Telemetry(source="nvml", temperature_c=51.0, utilization_pct=3.0),
        "agent_version": "0.1.0",
    }
    return ProbeRun(**{**fields, **overrides})


def batch_body(runs: list[ProbeRun], *, compress: bool = False) -> bytes:
    """Return the JSON body of a batch, gzip-compressed when asked."""
    body = ProbeRunBatch(runs=runs).model_dump_json().encode()
    return gzip.compress(body) if compress else body


def batch_dict(runs: list[ProbeRun]) -> dict[str, Any]:
    """Return a batch as plain JSON data, for tests that break it on purpose."""
    return json.loads(batch_body(runs))


def tuning_runs(
    hardware_names: list[str],
    *,
    dims: dict[str, int] | None = None,
    op: str = "convolution",
    variant: str = "tps_test",
) -> list[ProbeRun]:
    """Return one brute-force probe run per catalog GPU, like a Kernel Tuner import.

    48 thread-block/tile candidates whose latency depends on the GPU's spec (wavefront size,
    compute units, bandwidth), so that a model can learn something that carries over.
    """
    import math

    from tps.catalog import resolve

    problem = ProblemKey(op=op, dtype="fp32", dims=dims or {"x": 4096, "y": 4096}, variant=variant)
    work = math.prod(problem.dims.values())
    runs = []
    for name in hardware_names:
        spec = resolve(name)
        best_threads = 4 * (spec.warp_size or 32)
        best_tile = 1 if spec.compute_units > 60 else 4
        measurements = []
        for bx in (16, 32, 64, 128):
            for by in (1, 2, 4, 8):
                for tile in (1, 2, 4):
                    threads = bx * by
                    miss = abs(math.log2(threads / best_threads)) * 0.35
                    miss += abs(math.log2(tile / best_tile)) * 0.2 + (bx < 32) * 0.15
                    wobble = (int(candidate_id_of(bx, by, tile), 16) % 97) / 2000
                    us = work / spec.mem_bandwidth_gbs / 100 * (1 + miss + wobble)
                    candidate = Candidate(
                        backend="kernel_tuner",
                        params={"block_size_x": bx, "block_size_y": by, "tile_size": tile},
                    )
                    measurements.append(measurement(candidate, us))
        runs.append(
            probe_run(hardware=spec, problem=problem, measurements=measurements, source="test")
        )
    return runs


def candidate_id_of(bx: int, by: int, tile: int) -> str:
    return Candidate(
        backend="kernel_tuner", params={"block_size_x": bx, "block_size_y": by, "tile_size": tile}
    ).id


def steered_copy(run: ProbeRun, *, top_k: int = 4) -> ProbeRun:
    """Return a later probe of `run`'s problem on another host, steered by priors.

    It measures the vendor default and the `top_k` fastest candidates of `run` (the prior's
    shortlist, best first), at the same latencies, and takes a budget in proportion.
    """
    valid = sorted(
        (m for m in run.measurements if m.valid and m.median_us is not None),
        key=lambda m: m.median_us or 0.0,
    )
    shortlist = valid[:top_k]
    default = [m for m in run.measurements if m.candidate.backend == "vendor-default"]
    tried = shortlist + [m for m in default if m not in shortlist]
    share = len(tried) / len(run.measurements)
    return run.model_copy(
        update={
            "run_id": uuid.uuid4(),
            "host_id": secrets.token_hex(16),
            "measurements": tried,
            "winner_id": shortlist[0].candidate.id,
            "budget_ms": round(run.budget_ms * share, 3),
            "priors": PriorUse(
                used=True,
                source="observed",
                candidate_ids=[m.candidate.id for m in shortlist],
                winner_rank=0,
            ),
        }
    )


# A Kernel Tuner kernel that no code names, for the importer and everything downstream.
KERNEL = "heat_stencil_2d_kernel"
OP = "heat_stencil_2d"
SIZE = (4096, 4096)
PARAMS = {
    "block_size_x": [16, 32, 64, 128, 256],
    "block_size_y": [1, 2, 4, 8],
    "tile_size_x": [1, 2, 4],
    "loop_unroll": [0, 1],
}


def stencil_time_ms(config: dict[str, int], gpu: HardwareSpec) -> float | str:
    """Return the kernel's time on `gpu`: memory-bound work, slowed by idle lanes and tails."""
    threads = config["block_size_x"] * config["block_size_y"]
    if threads > 1024:
        return "CompilationFailedConfig"
    warp = gpu.warp_size or 32
    warps = math.ceil(threads / warp)
    lane_use = threads / (warps * warp)
    blocks = math.ceil(SIZE[0] / (config["block_size_x"] * config["tile_size_x"])) * math.ceil(
        SIZE[1] / config["block_size_y"]
    )
    waves = blocks / gpu.compute_units
    tail = waves / math.ceil(waves)
    seconds = SIZE[0] * SIZE[1] * 8 / (gpu.mem_bandwidth_gbs * 1e9)
    tile = 1.0 + 0.12 * abs(math.log2(config["tile_size_x"]) - 1)
    unroll = 0.92 if config["loop_unroll"] and config["tile_size_x"] > 1 else 1.0
    shape = 1.0 + 0.04 * abs(math.log2(threads) - 8)
    return seconds * 1e3 * tile * unroll * shape / (lane_use * tail)


def stencil_configurations() -> list[dict[str, int]]:
    return [dict(zip(PARAMS, values, strict=True)) for values in product(*PARAMS.values())]


def stencil_record(config: dict[str, int], gpu: HardwareSpec) -> dict[str, Any]:
    time_ms = stencil_time_ms(config, gpu)
    times = [] if isinstance(time_ms, str) else [time_ms * f for f in (0.99, 1.0, 1.01)]
    return {
        **config, "time": time_ms, "times": times, "compile_time": 410.0,
        "verification_time": 0, "benchmark_time": 12.0, "strategy_time": 0,
        "framework_time": 0.4, "timestamp": "2026-11-30 10:00:00+00:00",
    }  # fmt: skip


def stencil_cache_file(
    gpu: HardwareSpec, device_name: str, *, version: str | None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "device_name": device_name,
        "kernel_name": KERNEL,
        "problem_size": list(SIZE),
        "tune_params_keys": list(PARAMS),
        "tune_params": PARAMS,
        "objective": "time",
        "cache": {
            ",".join(str(v) for v in c.values()): stencil_record(c, gpu)
            for c in stencil_configurations()
        },
    }
    return {"schema_version": version, **doc} if version else doc


def stencil_t4_file(gpu: HardwareSpec) -> dict[str, Any]:
    results = []
    for config in stencil_configurations():
        record = stencil_record(config, gpu)
        failed = isinstance(record["time"], str)
        results.append({
            "timestamp": record["timestamp"],
            "configuration": config,
            "times": {"compilation": 410.0, "runtimes": record["times"]},
            "invalidity": "compile" if failed else "correct",
            "correctness": 0 if failed else 1,
            "measurements": [{"name": "time", "value": record["time"], "unit": "ms"}],
            "objectives": ["time"],
        })  # fmt: skip
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"}, "results": results}


def source_summary(score_at_1: float | None = None, score_at_5: float | None = None) -> Any:
    """Return a models.reports.SourceSummary with these figures (the others empty)."""
    from models.reports import SourceSummary

    return SourceSummary(
        score_at_1=score_at_1,
        score_at_5=score_at_5,
        regret_at_1=None,
        probes_to_3pct=None,
        spearman=None,
        median_ape=None,
        score_at_k=[],
        probes_to_3pct_share=1.0,
        within_3pct_in_5pct_of_space=0.0,
    )


def holdout_report(
    *, policy: tuple[float, float], random_s5: float = 0.5, nearest: Any = None, **overrides: Any
) -> Any:
    """Return a models.reports.HoldoutReport whose served policy scores `policy` (s1, s5)."""
    from dataclasses import asdict

    from models.reports import ChoiceSummary, HoldoutReport, PolicySummary, Reliability

    served = PolicySummary(
        **asdict(source_summary(*policy)), name="nearest+model", near_distance=2.0, lead_sources=[]
    )
    fields: dict[str, Any] = {
        "holdout": "GPU",
        "op": "convolution",
        "n_candidates": 10,
        "n_problems": 1,
        "n_train_rows": 10,
        "model": source_summary(*policy),
        "baseline_nearest": nearest,
        "baseline_random": source_summary(score_at_5=random_s5),
        "policy": served,
        "candidate_policies": {},
        "policy_choice": ChoiceSummary(name=served.name, rule="given", folds=[], calibrated=False),
        "calibration": Reliability(brier=None, rows=0, table=[]),
    }
    return HoldoutReport(**(fields | overrides))
