"""Sweep whole candidate spaces on a few shapes: where the provider's short lists come from.

    python benchmarks/gemm_h200_sweep.py --out DIR

For each shape it times the vendor default, every cuBLASLt algorithm the heuristic offers
(limit 64) and a wide Triton space (tiles, warps, stages, split-K), interleaved from graph
replay, checks each output against the default's, and records every median. It then repeats
probe-and-re-time cycles on large compute-bound shapes, to show how much a decision
between kernels within a few percent of each other depends on the sampling settings.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.ops.gemm import gemm_operands  # noqa: E402
from agents.probe.assemble import build_engine  # noqa: E402
from agents.probe.sampling import SamplingPolicy, collect, shared_reps  # noqa: E402
from agents.probe.settings import ProbeSettings  # noqa: E402
from agents.providers.cublaslt import CublasLtProvider, diversify  # noqa: E402
from agents.providers.triton_gemm import TritonGemmProvider, as_params, fit  # noqa: E402
from agents.providers.vendor import gemm_default  # noqa: E402
from tps.candidate import Candidate  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

HOST_ID = "be7c4a11d0e5f00d"
SHAPES = [
    (1, 4096, 14336),
    (16, 4096, 14336),
    (32, 4096, 14336),
    (8, 6144, 4096),
    (32, 28672, 4096),
    (1, 8192, 8192),
    (16, 57344, 8192),
    (1, 128256, 4096),
    (32, 8192, 28672),
    (64, 4096, 14336),
    (128, 6144, 4096),
    (512, 4096, 4096),
    (512, 28672, 4096),
    (2048, 4096, 4096),
    (4096, 4096, 4096),
    (8192, 4096, 14336),
    (1000, 1000, 1000),
    (64, 64, 65536),
    (777, 2056, 3000),
    (2048, 2048, 128),
]
POLICY = SamplingPolicy(samples=20, min_samples=10, budget_us=400_000.0)


def triton_space(m: int) -> list[dict]:
    """A wide space per M range, split-K included where the output is small."""
    if m <= 32:
        tiles = [
            (16, 16, 256, 2, 4),
            (16, 16, 512, 4, 4),
            (16, 32, 128, 2, 4),
            (16, 32, 256, 4, 4),
            (16, 32, 512, 4, 3),
            (16, 64, 128, 4, 4),
            (16, 64, 256, 4, 4),
            (16, 64, 256, 8, 3),
            (16, 128, 128, 8, 4),
            (16, 128, 64, 4, 5),
        ]
        splits = (1, 2, 4)
    elif m <= 512:
        tiles = [
            (64, 128, 64, 4, 4),
            (64, 128, 128, 4, 3),
            (64, 256, 64, 8, 4),
            (128, 128, 64, 8, 4),
            (128, 256, 64, 8, 3),
            (32, 128, 128, 4, 4),
            (64, 64, 128, 4, 4),
            (128, 64, 64, 4, 4),
        ]
        splits = (1, 2)
    else:
        tiles = [
            (128, 256, 64, 8, 3),
            (256, 128, 64, 8, 3),
            (128, 128, 64, 8, 4),
            (128, 128, 128, 8, 3),
            (128, 256, 64, 8, 4),
            (256, 128, 64, 8, 4),
        ]
        splits = (1,)
    return [
        as_params((bm, bn, bk, 8, w, st), split) for bm, bn, bk, w, st in tiles for split in splits
    ]


def compile_and_check(provider, candidate, problem, ops, device, reference, tol, log):
    """Prepare and launch `candidate` once (its compile); return (kernel, seconds), or
    (None, seconds) when it fails or its output is off the reference by more than `tol`."""
    t0 = time.perf_counter()
    try:
        kernel = provider.prepare(candidate, problem, ops, device)
        out = kernel.run()
        torch.cuda.synchronize()
    except Exception as exc:
        log(f"  {candidate.label()}: {type(exc).__name__}: {str(exc)[:160]}")
        return None, time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    scale = reference.abs().max().item() + 1e-6
    err = (out.float() - reference).abs().max().item() / scale
    if not math.isfinite(err) or err > tol:
        log(f"  {candidate.label()}: wrong result, rel err {err:.3g}")
        return None, seconds
    return kernel, seconds


def time_kernels(timer, kernels) -> list[float]:
    estimates = timer.estimate_us(kernels)
    reps = shared_reps(estimates, target_us=30.0, max_reps=64)
    armed = [
        timer.arm(kernel, reps, kernel_us=est)
        for kernel, est in zip(kernels, estimates, strict=True)
    ]
    sampled = collect(timer, armed, POLICY)
    return [sampled.summary(i).median_us for i in range(len(kernels))]


def sweep_shape(engine, shape, log) -> dict:
    m, n, k = shape
    problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": n, "k": k}, trans_b=True)
    ops = gemm_operands(problem, "cuda", seed=0)
    default = gemm_default(problem, ops, engine.device)
    reference = default.run().float()
    entries, kernels = [], [default]
    entries.append({"backend": "vendor-default", "params": {}})
    lt = CublasLtProvider(limit=64)
    plan = lt._plan(problem, ops)
    ranked = diversify(
        list({Candidate(backend="cublaslt", params=p).id: p for p in plan.ranked}.values())
    )
    for rank, params in enumerate(ranked):
        c = Candidate(backend="cublaslt", params=params)
        try:
            kernels.append(lt.prepare(c, problem, ops, engine.device))
            entries.append({"backend": "cublaslt", "params": params, "rank": rank})
        except Exception as exc:
            log(f"  cublaslt {params}: {exc}")
    tr = TritonGemmProvider()
    limit = tr._smem_limit(engine.device)
    compile_s = 0.0
    for params in triton_space(m):
        cfg = fit(
            (
                params["BLOCK_M"],
                params["BLOCK_N"],
                params["BLOCK_K"],
                params["GROUP_M"],
                params["num_warps"],
                params["num_stages"],
            ),
            "bf16",
            limit,
        )
        if cfg[2] != params["BLOCK_K"] or cfg[5] != params["num_stages"]:
            continue
        c = Candidate(backend="triton", params=params)
        kernel, seconds = compile_and_check(
            tr, c, problem, ops, engine.device, reference, 0.05, log
        )
        compile_s += seconds
        if kernel is None:
            continue
        kernels.append(kernel)
        entries.append({"backend": "triton", "params": params})
    t0 = time.perf_counter()
    medians = time_kernels(engine.timer, kernels)
    timing_s = time.perf_counter() - t0
    for e, us in zip(entries, medians, strict=True):
        e["median_us"] = us
    d = medians[0]
    best = {}
    for backend in ("cublaslt", "triton"):
        mine = [e for e in entries if e["backend"] == backend]
        if mine:
            b = min(mine, key=lambda e: e["median_us"])
            best[backend] = {**b, "speedup": d / b["median_us"]}
    lt._retire(problem.key_hash(), plan)
    lt_best, tr_best = best.get("cublaslt", {}), best.get("triton", {})
    log(
        f"{m}x{n}x{k}: default {d:.1f} us | cublaslt best {lt_best.get('speedup', 0):.3f}x "
        f"rank {lt_best.get('rank')} | triton best {tr_best.get('speedup', 0):.3f}x "
        f"{tr_best.get('params')} | {len(kernels)} kernels, compile {compile_s:.0f} s, "
        f"timing {timing_s:.1f} s"
    )
    return {"shape": shape, "default_us": d, "best": best, "entries": entries}


def decision_cycles(log) -> list[dict]:
    """Probe, then re-time the choice against the default, three times, two settings."""
    out = []
    for target in (30.0, 4000.0):
        engine = build_engine(
            device="cuda",
            host_id=HOST_ID,
            bans_path="/tmp/sweep_bans.json",
            settings=ProbeSettings(target_sample_us=target),
        )
        for dims in ((8192, 4096, 14336), (8192, 10240, 8192), (1000, 1000, 1000)):
            p = ProblemKey(
                op="gemm", dtype="bf16", dims=dict(zip("mnk", dims, strict=True)), trans_b=True
            )
            for cycle in range(3):
                run = engine.probe(p)
                by_id = {x.candidate.id: x for x in run.measurements}
                w = by_id[run.winner_id]
                d = run.measurements[0]
                row = {
                    "target_sample_us": target,
                    "dims": dims,
                    "cycle": cycle,
                    "probe_default_us": d.median_us,
                    "probe_winner_us": w.median_us,
                    "winner": w.candidate.label(),
                    "probe_ms": run.budget_ms,
                    "all": {x.candidate.label(): x.median_us for x in run.measurements},
                }
                if w.candidate.backend != "vendor-default":
                    again = engine.probe(p, only=[w.candidate])
                    row["retime"] = [x.median_us for x in again.measurements]
                out.append(row)
                log(
                    f"target {target:.0f} {dims} #{cycle}: probe {d.median_us:.1f}/"
                    f"{w.median_us:.1f} {w.candidate.backend} re-timed {row.get('retime')} "
                    f"probe {run.budget_ms:.0f} ms"
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip-cycles", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = build_engine(device="cuda", host_id=HOST_ID, bans_path="/tmp/sweep_bans.json")

    def log(msg: str) -> None:
        print(msg, flush=True)

    results = {"shapes": [], "cycles": []}
    for shape in SHAPES:
        results["shapes"].append(sweep_shape(engine, shape, log))
        (out / "gemm_h200_sweep.json").write_text(json.dumps(results))
    if not args.skip_cycles:
        results["cycles"] = decision_cycles(log)
    sp = [s["default_us"] / min(e["median_us"] for e in s["entries"]) for s in results["shapes"]]
    results["geomean_best_over_default"] = statistics.geometric_mean(sp)
    (out / "gemm_h200_sweep.json").write_text(json.dumps(results))
    log(f"geomean of the best found over the default: {results['geomean_best_over_default']:.3f}")


if __name__ == "__main__":
    main()
