"""Sweep the Triton GEMV kernel on the suite's decode-sized products (M <= 8).

    python benchmarks/gemm_h200_gemv.py --out DIR

For each suite shape with at most 8 rows it times, interleaved from graph replay, the vendor
default, the Triton GEMM configurations the provider offers, and a space of GEMV
configurations (columns and K per step, warps, split-K); checks each output against the
default's, and writes every median to DIR/gemm_h200_gemv.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.ops.gemm import gemm_operands  # noqa: E402
from agents.probe.assemble import build_engine  # noqa: E402
from agents.providers.triton_gemm import TritonGemmProvider  # noqa: E402
from agents.providers.vendor import gemm_default  # noqa: E402
from benchmarks.gemm_h200_sweep import HOST_ID, compile_and_check, time_kernels  # noqa: E402
from tps.candidate import Candidate  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

SUITE = ROOT / "benchmarks" / "workloads" / "gemm_llm_suite.csv"
MAX_ROWS = 8


def gemv_space(m: int) -> list[dict]:
    """Tiles holding 4096 to 16384 products per step, a few K depths, split-K 1 and 4."""
    block_m = 1 << (m - 1).bit_length()
    space = []
    for elements, warps in ((4096, 4), (8192, 4), (16384, 8)):
        for block_k in (128, 256, 512, 1024):
            block_n = elements // (block_m * block_k)
            if not 2 <= block_n <= 64:
                continue
            for split in (1, 4):
                params = {
                    "kernel": "gemv",
                    "BLOCK_N": block_n,
                    "BLOCK_K": block_k,
                    "num_warps": warps,
                }
                if split > 1:
                    params["SPLIT_K"] = split
                space.append(params)
    return space


def sweep_shape(engine, name: str, m: int, n: int, k: int, log) -> dict:
    problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": n, "k": k}, trans_b=True)
    ops = gemm_operands(problem, "cuda", seed=0)
    default = gemm_default(problem, ops, engine.device)
    reference = default.run().float()
    provider = TritonGemmProvider()
    offered = provider.candidates(problem, engine.device, limit=8)
    gemv = [Candidate(backend="triton", params=p) for p in gemv_space(m)]
    entries, kernels = [{"backend": "vendor-default", "params": {}}], [default]
    compile_s = 0.0
    for candidate in [*offered, *gemv]:
        kernel, seconds = compile_and_check(
            provider, candidate, problem, ops, engine.device, reference, 0.02, log
        )
        compile_s += seconds
        if kernel is None:
            continue
        kernels.append(kernel)
        entries.append({"backend": "triton", "params": candidate.params})
    medians = time_kernels(engine.timer, kernels)
    for entry, us in zip(entries, medians, strict=True):
        entry["median_us"] = us
    d = medians[0]
    gemm_best = min(
        (e for e in entries[1:] if "kernel" not in e["params"]),
        key=lambda e: e["median_us"],
        default=None,
    )
    gemv_best = min(
        (e for e in entries if e["params"].get("kernel") == "gemv"),
        key=lambda e: e["median_us"],
        default=None,
    )
    row = {
        "name": name,
        "m": m,
        "n": n,
        "k": k,
        "default_us": d,
        "gemm_best": gemm_best,
        "gemv_best": gemv_best,
        "gemv_speedup": d / gemv_best["median_us"] if gemv_best else None,
        "gemm_speedup": d / gemm_best["median_us"] if gemm_best else None,
        "bytes": 2 * (m * k + n * k + m * n),
        "compile_s": compile_s,
        "entries": entries,
    }
    gbs = row["bytes"] / (gemv_best["median_us"] * 1e3) if gemv_best else 0
    log(
        f"{name} {m}x{n}x{k}: default {d:.1f} us | triton gemm {row['gemm_speedup'] or 0:.3f}x"
        f" | gemv {row['gemv_speedup'] or 0:.3f}x {gemv_best and gemv_best['params']}"
        f" ({gbs:.0f} GB/s) | compile {compile_s:.0f} s"
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = build_engine(device="cuda", host_id=HOST_ID, bans_path="/tmp/gemv_bans.json")
    with SUITE.open() as f:
        shapes = [
            (r["name"], int(r["m"]), int(r["n"]), int(r["k"]))
            for r in csv.DictReader(f)
            if int(r["m"]) <= MAX_ROWS
        ]
    results = {"machine": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": []}
    for name, m, n, k in shapes:
        results["shapes"].append(sweep_shape(engine, name, m, n, k, print))
        (out / "gemm_h200_gemv.json").write_text(json.dumps(results))
    speedups = [s["gemv_speedup"] for s in results["shapes"] if s["gemv_speedup"]]
    results["geomean_gemv_over_default"] = statistics.geometric_mean(speedups)
    results["geomean_best_over_default"] = statistics.geometric_mean(
        [max(s["gemv_speedup"] or 0, s["gemm_speedup"] or 0, 1.0) for s in results["shapes"]]
    )
    (out / "gemm_h200_gemv.json").write_text(json.dumps(results))
    print(
        f"geomean gemv/default {results['geomean_gemv_over_default']:.3f}, best of "
        f"default/gemm/gemv {results['geomean_best_over_default']:.3f} "
        f"over {len(speedups)} shapes"
    )


if __name__ == "__main__":
    main()
