"""GEMM selection on a GPU: TPS against the vendor default, PyTorch TunableOp and max-autotune.

    python benchmarks/gemm_h200.py main --out DIR [--autotune-shapes 24]
    python benchmarks/gemm_h200.py dataset --out DIR --dtype fp16 [--sm-limit 16]

`main` probes every shape of the suite in bf16 (B stored [N, K] as in nn.Linear), then
re-times the default against the chosen kernel in an independent probe of the two, so
that the reported speedup is not the winner's luck in the probe it was chosen by. It then
times PyTorch TunableOp and torch.compile max-autotune on the same shapes, measuring
their tuning time. `dataset` keeps every ProbeRun of one configuration (dtype, SM limit).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.ops.gemm import gemm_operands  # noqa: E402
from agents.probe.assemble import build_engine  # noqa: E402
from agents.probe.engine import ProbeEngine  # noqa: E402
from agents.probe.sampling import SamplingPolicy, collect, shared_reps  # noqa: E402
from agents.probe.settings import ProbeSettings  # noqa: E402
from agents.providers.base import Kernel  # noqa: E402
from tps.candidate import Candidate  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

HOST_ID = "be7c4a11d0e5f00d"  # a fixed pseudonym: benchmark runs share no host identity
SUITE = ROOT / "benchmarks" / "workloads" / "gemm_llm_suite.csv"
VERIFY = SamplingPolicy(samples=30, min_samples=10, budget_us=200_000.0)


def read_suite(path: Path) -> list[dict]:
    with path.open() as fh:
        return [
            {
                "name": r["name"],
                "m": int(r["m"]),
                "n": int(r["n"]),
                "k": int(r["k"]),
                "trans_b": r.get("trans_b", "1") == "1",
            }
            for r in csv.DictReader(fh)
        ]


def problem_of(row: dict, dtype: str) -> ProblemKey:
    return ProblemKey(
        op="gemm",
        dtype=dtype,
        dims={"m": row["m"], "n": row["n"], "k": row["k"]},
        trans_b=row["trans_b"],
    )


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def time_side_by_side(engine: ProbeEngine, kernels: list[Kernel]) -> list[float]:
    """Median µs per launch of each kernel, interleaved, from graph replay."""
    timer = engine.timer
    estimates = timer.estimate_us(kernels)
    reps = shared_reps(
        estimates, target_us=engine.settings.target_sample_us, max_reps=engine.settings.max_reps
    )
    armed = [
        timer.arm(kernel, reps, kernel_us=est)
        for kernel, est in zip(kernels, estimates, strict=True)
    ]
    sampled = collect(timer, armed, VERIFY)
    return [sampled.summary(i).median_us for i in range(len(kernels))]


def default_kernel(engine: ProbeEngine, problem: ProblemKey, operands) -> Kernel:
    from agents.providers.vendor import gemm_default

    return gemm_default(problem, operands, engine.device)


def versions() -> dict:
    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    for name in ("triton", "nvmath"):
        try:
            out[name] = __import__(name).__version__
        except Exception as exc:
            out[name] = f"unavailable: {exc}"
    return out


def probe_and_retime(engine: ProbeEngine, problem: ProblemKey, runs_out) -> dict:
    """Probe once; re-time a non-default winner against the default in a second probe."""
    t0 = time.perf_counter()
    run = engine.probe(problem)
    wall_ms = (time.perf_counter() - t0) * 1000
    runs_out.write(run.model_dump_json() + "\n")
    by_id = {m.candidate.id: m for m in run.measurements}
    winner = by_id[run.winner_id] if run.winner_id else None
    default = run.measurements[0]  # the engine always puts the vendor default first
    entry = {
        "probe_ms": run.budget_ms,
        "compile_ms": run.compile_ms,
        "wall_ms": wall_ms,
        "candidates": len(run.measurements),
        "invalid": sum(not m.valid for m in run.measurements),
        "errors": [
            f"{m.candidate.label()}: {m.error}"[:200] for m in run.measurements if not m.valid
        ],
        "winner_backend": winner.candidate.backend if winner else None,
        "winner_params": winner.candidate.params if winner else None,
        "winner": winner.candidate.label() if winner else None,
        "probe_default_us": default.median_us,
        "probe_winner_us": winner.median_us if winner else None,
    }
    entry["default_us"] = entry["chosen_us"] = default.median_us
    if winner and winner.candidate.backend != "vendor-default":
        check = engine.probe(problem, only=[winner.candidate])
        runs_out.write(check.model_dump_json() + "\n")
        entry["default_us"] = check.measurements[0].median_us
        entry["chosen_us"] = check.measurements[1].median_us
    if entry["default_us"] and entry["chosen_us"]:
        entry["speedup"] = entry["default_us"] / entry["chosen_us"]
    return entry


def probe_suite(engine: ProbeEngine, rows: list[dict], dtype: str, runs_out, log) -> list[dict]:
    """Probe each shape, verify default vs chosen, and write every ProbeRun as JSON lines."""
    results = []
    for row in rows:
        problem = problem_of(row, dtype)
        entry = {
            **row,
            "dtype": dtype,
            "flops": problem.flops,
            **probe_and_retime(engine, problem, runs_out),
        }
        results.append(entry)
        log(
            f"{row['name']:>22} {row['m']}x{row['n']}x{row['k']}: default "
            f"{entry['default_us']:.1f} us, chosen {entry['chosen_us']:.1f} us "
            f"({entry.get('speedup', 0):.3f}x, {entry['winner_backend']}), probe "
            f"{entry['probe_ms']:.1f} ms, compile {entry['compile_ms']:.0f} ms"
        )
    return results


def tunableop_side(engine: ProbeEngine, rows: list[dict], out_dir: Path, log) -> dict:
    """PyTorch TunableOp on the same shapes: its tuning time and its kernel's time."""
    import torch.cuda.tunable as tunable

    tunable.set_filename(str(out_dir / "tunableop_results.csv"))
    per_shape = {}
    for row in rows:
        problem = problem_of(row, "bf16")
        ops = gemm_operands(problem, "cuda", seed=0)
        default = default_kernel(engine, problem, ops)
        tunable.enable(False)
        torch.matmul(ops.a, ops.b)
        torch.cuda.synchronize()
        tunable.enable(True)
        tunable.tuning_enable(True)
        t0 = time.perf_counter()
        torch.matmul(ops.a, ops.b)
        torch.cuda.synchronize()
        tuning_ms = (time.perf_counter() - t0) * 1000
        tunable.tuning_enable(False)
        tuned = Kernel(
            candidate=Candidate(backend="tunableop"), run=lambda ops=ops: torch.matmul(ops.a, ops.b)
        )
        tuned_us, default_us = time_side_by_side(engine, [tuned, default])
        tunable.enable(False)
        per_shape[row["name"] + f"@{row['m']}x{row['n']}x{row['k']}"] = {
            "tuning_ms": tuning_ms,
            "tunableop_us": tuned_us,
            "default_us": default_us,
            "speedup": default_us / tuned_us,
        }
    results = list(tunable.get_results())
    solutions = sorted({str(r[2]) for r in results})
    log(f"TunableOp solutions seen: {solutions}")
    return {
        "shapes": per_shape,
        "solutions": solutions,
        "geomean_speedup": geomean([v["speedup"] for v in per_shape.values()]),
        "median_tuning_ms": statistics.median(v["tuning_ms"] for v in per_shape.values()),
    }


def autotune_side(engine: ProbeEngine, rows: list[dict], log) -> dict:
    """torch.compile max-autotune-no-cudagraphs: tuning seconds and kernel time per shape."""
    import torch._dynamo

    per_shape = {}
    for row in rows:
        problem = problem_of(row, "bf16")
        ops = gemm_operands(problem, "cuda", seed=0)
        torch._dynamo.reset()
        fn = torch.compile(
            lambda a, b: torch.mm(a, b), mode="max-autotune-no-cudagraphs", dynamic=False
        )
        t0 = time.perf_counter()
        fn(ops.a, ops.b)
        torch.cuda.synchronize()
        tuning_s = time.perf_counter() - t0
        compiled = Kernel(
            candidate=Candidate(backend="max-autotune"), run=lambda ops=ops, fn=fn: fn(ops.a, ops.b)
        )
        default = default_kernel(engine, problem, ops)
        auto_us, default_us = time_side_by_side(engine, [compiled, default])
        key = row["name"] + f"@{row['m']}x{row['n']}x{row['k']}"
        per_shape[key] = {
            "tuning_s": tuning_s,
            "autotune_us": auto_us,
            "default_us": default_us,
            "speedup": default_us / auto_us,
        }
        log(f"max-autotune {key}: {default_us / auto_us:.3f}x, tuning {tuning_s:.1f} s")
    return {
        "shapes": per_shape,
        "geomean_speedup": geomean([v["speedup"] for v in per_shape.values()]),
        "mean_tuning_s": statistics.fmean(v["tuning_s"] for v in per_shape.values()),
    }


def autotune_sample(rows: list[dict], count: int) -> list[dict]:
    """Every odd or unaligned shape, then LLM shapes spread over M, up to `count`."""
    odd = [r for r in rows if r["name"].startswith("odd")]
    llm = [r for r in rows if r not in odd]
    step = max(1, len(llm) // max(1, count - len(odd)))
    return (odd + llm[::step])[:count]


def measure_peak(engine: ProbeEngine) -> float:
    """The best bf16 TFLOP/s any candidate reached on 8192^3 (the ceiling for % of peak)."""
    run = engine.probe(
        ProblemKey(op="gemm", dtype="bf16", dims={"m": 8192, "n": 8192, "k": 8192}, trans_b=True)
    )
    best = min(m.median_us for m in run.measurements if m.valid and m.median_us)
    return 2 * 8192**3 / (best * 1e-6) / 1e12


def cmd_main(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = (out / "main.log").open("w")

    def log(msg: str) -> None:
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    t_start = time.perf_counter()
    rows = read_suite(Path(args.suite))[: args.limit or None]
    engine = build_engine(
        device="cuda",
        host_id=HOST_ID,
        measure_bandwidth=True,
        bans_path=Path(args.bans),
        settings=ProbeSettings(),
    )
    spec = engine.hardware()
    log(f"hardware: {spec.model_dump_json()}")
    peak = measure_peak(engine)
    log(f"measured bf16 peak: {peak:.0f} TFLOP/s")
    with gzip.open(out / "runs_bf16.jsonl.gz", "wt") as runs_out:
        shapes = probe_suite(engine, rows, "bf16", runs_out, log)
    for s in shapes:
        s["pct_peak_default"] = 100 * s["flops"] / (s["default_us"] * 1e-6) / 1e12 / peak
        s["pct_peak_chosen"] = 100 * s["flops"] / (s["chosen_us"] * 1e-6) / 1e12 / peak
    log(f"TPS done in {time.perf_counter() - t_start:.0f} s")
    tunable = tunableop_side(engine, rows, out, log) if not args.skip_tunableop else None
    log(f"TunableOp done at {time.perf_counter() - t_start:.0f} s")
    sample = autotune_sample(rows, args.autotune_shapes)
    if tunable:
        for s in shapes:
            s["tunableop"] = tunable["shapes"].get(shape_key(s))
    # Written before max-autotune starts too, so a run stopped at its limit keeps the rest.
    write_report(out, args, spec, peak, shapes, tunable, None, [], t_start, log)
    auto = None
    if args.autotune_shapes:
        auto = {"shapes": {}}
        for row in sample:
            auto["shapes"].update(autotune_side(engine, [row], log)["shapes"])
            write_report(out, args, spec, peak, shapes, tunable, auto, sample, t_start, None)
    write_report(out, args, spec, peak, shapes, tunable, auto, sample, t_start, log)


def shape_key(row: dict) -> str:
    return row["name"] + f"@{row['m']}x{row['n']}x{row['k']}"


def write_report(out, args, spec, peak, shapes, tunable, auto, sample, t_start, log) -> None:
    speedups = [s["speedup"] for s in shapes]
    by_key = {shape_key(s): s for s in shapes}
    measured = [k for k in map(shape_key, sample) if auto and k in auto["shapes"]]
    for key in measured:
        by_key[key]["max_autotune"] = auto["shapes"][key]
    auto_summary = None
    if auto and measured:
        auto_summary = {
            "shapes_measured": len(measured),
            "geomean_speedup": geomean([auto["shapes"][k]["speedup"] for k in measured]),
            "min_speedup": min(auto["shapes"][k]["speedup"] for k in measured),
            "max_speedup": max(auto["shapes"][k]["speedup"] for k in measured),
            "mean_tuning_s": statistics.fmean(auto["shapes"][k]["tuning_s"] for k in measured),
            "tps_geomean_same_shapes": geomean([by_key[k]["speedup"] for k in measured]),
        }
    report = {
        "command": " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": spec.name,
        "hardware": spec.model_dump(mode="json"),
        "versions": versions(),
        "measured_bf16_peak_tflops": peak,
        "geomean_speedup": geomean(speedups),
        "min_speedup": min(speedups),
        "max_speedup": max(speedups),
        "shapes_below_0_99": sum(1 for v in speedups if v < 0.99),
        "median_probe_ms": statistics.median(s["probe_ms"] for s in shapes),
        "p90_probe_ms": sorted(s["probe_ms"] for s in shapes)[int(0.9 * (len(shapes) - 1))],
        "median_compile_ms": statistics.median(s["compile_ms"] for s in shapes),
        "max_candidates": max(s["candidates"] for s in shapes),
        "tunableop": {k: v for k, v in (tunable or {}).items() if k != "shapes"},
        "max_autotune": auto_summary,
        "wall_s": time.perf_counter() - t_start,
        "shapes": shapes,
    }
    (out / "gemm_h200_bf16.json").write_text(json.dumps(report, indent=1))
    if log is not None:
        log(
            json.dumps(
                {k: v for k, v in report.items() if k not in ("shapes", "hardware")}, indent=1
            )
        )


def cmd_dataset(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_suite(Path(args.suite))[: args.limit or None]
    engine = build_engine(
        device="cuda", host_id=HOST_ID, sm_limit=args.sm_limit, bans_path=Path(args.bans)
    )
    t0 = time.perf_counter()
    # Plain lines, flushed one by one: a run stopped at its time limit keeps what it did.
    with (out / f"runs_{args.tag}.jsonl").open("w", buffering=1) as runs_out:
        shapes = probe_suite(engine, rows, args.dtype, runs_out, print)
    summary = {
        "tag": args.tag,
        "dtype": args.dtype,
        "sm_limit": args.sm_limit,
        "shapes": len(shapes),
        "wall_s": time.perf_counter() - t0,
        "geomean_speedup": geomean([s.get("speedup") for s in shapes]),
        "min_speedup": min(s.get("speedup") or 1 for s in shapes),
        "median_probe_ms": statistics.median(s["probe_ms"] for s in shapes),
    }
    (out / f"summary_{args.tag}.json").write_text(json.dumps({**summary, "per_shape": shapes}))
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("main")
    d = sub.add_parser("dataset")
    for p in (m, d):
        p.add_argument("--out", required=True)
        p.add_argument("--bans", default="/tmp/tps_bench_bans.json")
        p.add_argument("--suite", default=str(SUITE))
        p.add_argument("--limit", type=int, default=0)
    m.add_argument("--autotune-shapes", type=int, default=24)
    m.add_argument("--skip-tunableop", action="store_true")
    d.add_argument("--dtype", default="bf16")
    d.add_argument("--sm-limit", type=int, default=None)
    d.add_argument("--tag", required=True)
    args = parser.parse_args()
    {"main": cmd_main, "dataset": cmd_dataset}[args.cmd](args)


if __name__ == "__main__":
    main()
