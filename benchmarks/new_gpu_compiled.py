"""A GPU model the fleet never compiled on: its first compile, with and without the fleet.

Usage (device): python3 benchmarks/new_gpu_compiled.py --model opt-350m --case decode-b32 \
    --sm-limit 64 --out F [--whole] [--profile] [--variants [NAME ...]]

On one H200, against the embedded service:
1. the fleet: a process on the whole H200 compiles the case inside `tps_runtime.compiled`
   (inductor searches every GEMM, TPS records it) and pushes its records;
2. the new GPU model: a process in a green context of `--sm-limit` SMs (its own hardware
   fingerprint) compiles the case cold several ways, then times them side by side on its
   stream: torch.compile's default, max-autotune-no-cudagraphs, and TPS with the fleet
   (each product searched among the most similar hardware's fastest configurations, the
   service's `compiled` source; each kernel timed among that hardware's fastest launch
   configurations), plus with `--variants` TPS with the fleet otherwise (`coordesc`: each
   kernel tuned by coordinate descent, as before `kernel_likely`; `descend`: coordinate
   descent from the fastest of `kernel_likely`'s configurations, for every kernel;
   `no_descend`: for none; `descend_5us` and
   `descend_20us`: the same for the kernels whose fastest of those takes 5 or 20 µs a
   launch; `finalists`: each search's finalists timed again, as before
   `likely_finalists`; `ahead` and `serial`: each descent's next configurations compiled
   ahead in inductor's compile workers, or not (`kernel_ahead`); `likely4`: each
   product searched among the 4 fastest; `epilogues`: each search timed again with its
   epilogues fused, as max-autotune does;
   `epilogues_likely4`: both, as before `epilogues`) and,
   with `--whole`, TPS without the fleet (inductor's whole search, as host 1 of a fleet).
   The TPS variants' sessions push only after every compile, so none sees another's
   records. With `--profile`, each variant's kernels by device time per forward, and each
   TPS session's recorded winners.
Writes one JSON object (both processes' figures, ratios with paired 95% intervals, and each
compile's longest phases by inductor's own timers).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RATIOS = (
    ("fleet_vs_max_autotune", "max_autotune", "fleet"),
    ("fleet_vs_default", "default", "fleet"),
    ("coordesc_vs_max_autotune", "max_autotune", "coordesc"),
    ("finalists_vs_max_autotune", "max_autotune", "finalists"),
    ("ahead_vs_max_autotune", "max_autotune", "ahead"),
    ("serial_vs_max_autotune", "max_autotune", "serial"),
    ("ahead_vs_serial", "serial", "ahead"),
    ("fleet_vs_coordesc", "coordesc", "fleet"),
    ("descend_vs_max_autotune", "max_autotune", "descend"),
    ("descend_vs_coordesc", "coordesc", "descend"),
    ("fleet_vs_descend", "descend", "fleet"),
    ("fleet_vs_finalists", "finalists", "fleet"),
    ("likely4_vs_max_autotune", "max_autotune", "likely4"),
    ("fleet_vs_likely4", "likely4", "fleet"),
    ("epilogues_vs_max_autotune", "max_autotune", "epilogues"),
    ("fleet_vs_epilogues", "epilogues", "fleet"),
    ("epilogues_likely4_vs_max_autotune", "max_autotune", "epilogues_likely4"),
    ("fleet_vs_epilogues_likely4", "epilogues_likely4", "fleet"),
    ("second_vs_max_autotune", "max_autotune", "second"),
    ("second_vs_descend", "descend", "second"),
    ("no_descend_vs_max_autotune", "max_autotune", "no_descend"),
    ("fleet_vs_no_descend", "no_descend", "fleet"),
    ("descend_5us_vs_max_autotune", "max_autotune", "descend_5us"),
    ("descend_5us_vs_descend", "descend", "descend_5us"),
    ("descend_20us_vs_max_autotune", "max_autotune", "descend_20us"),
    ("descend_20us_vs_descend", "descend", "descend_20us"),
    ("whole_vs_max_autotune", "max_autotune", "whole"),
    ("fleet_vs_whole", "whole", "fleet"),
)
# TPS with the fleet otherwise (`--variants`): what `compiled` is given, and the options that
# make each compile a graph of its own (a default value, or what `compiled` sets: the program
# is unchanged)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "coordesc": ({"kernel_likely": 0}, {"trace.enabled": False}),
    "descend": (
        {"kernel_descend": True, "kernel_descend_min_us": 0.0},
        {"trace.debug_log": False},
    ),
    # the kernels timed among the most similar hardware's fastest, none descended
    "no_descend": ({"kernel_descend": False}, {"trace.fx_graph": True}),
    # the descent only for kernels whose fastest likely configuration takes 5 or 20 µs a launch
    "descend_5us": (
        {"kernel_descend": True, "kernel_descend_min_us": 5.0},
        {"trace.ir_pre_fusion": True},
    ),
    "descend_20us": (
        {"kernel_descend": True, "kernel_descend_min_us": 20.0},
        {"trace.ir_post_fusion": True},
    ),
    # the norms' reductions not descended: only pointwise kernels and fused products
    "descend_no_norms": (
        {"kernel_descend_reductions": False},
        {"trace.draw_orig_fx_graph": False},
    ),
    # each descent's next configurations compiled ahead in inductor's compile workers, or
    # each compiled by the descent itself, one after another
    "ahead": ({"kernel_ahead": True}, {"trace.output_code": True}),
    "serial": ({"kernel_ahead": False}, {"trace.fx_graph_transformed": True}),
    "finalists": ({"likely_finalists": 8}, {"trace.graph_diagram": False}),
    "likely4": ({"likely": 4}, {"trace.compile_profile": False}),
    "epilogues": ({"epilogues": True}, {"benchmark_epilogue_fusion": True}),
    "epilogues_likely4": (
        {"epilogues": True, "likely": 4},
        {"benchmark_epilogue_fusion": True, "trace.compile_profile": False},
    ),
}
PHASES = 16  # a compile's longest phases kept (inductor's own timers, seconds)
PHASES_OF: dict[str, dict[str, float]] = {}  # each first call's phases, by what it was


def _first_call(run: Any, what: str) -> float:
    """Run a compiled variant's first call; its compile's longest phases go to PHASES_OF."""
    import torch

    before = _timer_counts()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    PHASES_OF[what] = _phases(before)
    print(f"{what}: compiled in {took:.1f} s", file=sys.stderr, flush=True)  # noqa: T201
    return took


def _phases(before: dict[str, int]) -> dict[str, float]:
    """Seconds in each of inductor's timed phases since `before` (`_timer_counts()`)."""
    from torch._dynamo.utils import compilation_time_metrics

    spent = {
        name: sum(times[before.get(name, 0) :]) for name, times in compilation_time_metrics.items()
    }
    longest = sorted(spent.items(), key=lambda kv: -kv[1])[:PHASES]
    return {name: round(s, 2) for name, s in longest if s >= 0.05}


def _cold_triton(workdir: Path, name: str) -> None:
    """Give Triton an empty cache of its own for what compiles next (`name`), as on a new
    host: no variant reads kernels another compiled. Triton reads the variable at each
    compile, inductor hands it to its compile workers with each kernel."""
    os.environ["TRITON_CACHE_DIR"] = str(workdir / f"triton-{name}")


def _timer_counts() -> dict[str, int]:
    from torch._dynamo.utils import compilation_time_metrics

    return {name: len(times) for name, times in compilation_time_metrics.items()}


def _stats(fleet: Any) -> dict[str, Any]:
    s = fleet.stats
    return {
        "searched": s.searched,
        "likely": s.likely,
        "hits": s.hits,
        "retimed": s.retimed,
        "retime_s": round(s.retime_s, 2),
        "kernels_tuned": s.kernels_tuned,
        "kernel_hits": s.kernel_hits,
        "kernel_tune_s": round(s.kernel_tune_s, 2),
        "kernels_likely": s.kernels_likely,
        "kernels_descended": s.kernels_descended,
        "kernel_likely_us": s.kernel_likely_us,
        "kernel_likely_spread": s.kernel_likely_spread,
        "kernel_descents": s.kernel_descents,
        "kernel_descent_names": s.kernel_descent_names,
        "ahead": {
            "submitted": s.ahead.submitted,
            "used": s.ahead.used,
            "wait_s": round(s.ahead.wait_s, 2),
            "compile_after_s": round(s.ahead.compile_after_s, 2),
            "worker_s": round(s.ahead.worker_s, 2),
            "missed": s.ahead.missed,
            "own": s.ahead.own,
            "own_s": round(s.ahead.own_s, 2),
        },
    }


def _winners(session: Any) -> dict[str, Any]:
    """Each problem's recorded winner: its id, and its and the default's timings (µs)."""
    return {
        entry.problem.canonical()[:160]: [
            entry.winner.id[:120],
            None if entry.median_us is None else round(entry.median_us, 2),
            None if entry.default_us is None else round(entry.default_us, 2),
        ]
        for entry in session.runtime.cache.entries()
    }


def fleet_host(args: argparse.Namespace) -> dict[str, Any]:
    """The whole H200, host 1 of the fleet: search, record, push."""
    import torch

    from agents import runtime as tps_runtime
    from tools.bench.runtime import cuda_forwards

    session = tps_runtime.open_session(
        device="cuda", cache=args.workdir / "fleet-cache.json", service=args.service,
        token=args.token,
    )  # fmt: skip
    model, forward = cuda_forwards(args.model, args.case)
    run = forward(torch.compile(model, options={"max_autotune_gemm": True}))
    with tps_runtime.compiled(
        session, finalists=args.fleet_finalists, kernel_ahead=args.fleet_ahead
    ) as fleet:
        compile_s = _first_call(run, "fleet host")
    pushed = session.flush()
    session.close()
    return {
        "hardware": session.runtime.hardware.model_dump(mode="json"),
        "compile_s": round(compile_s, 2),
        "pushed_runs": pushed,
        **_stats(fleet),
        "phases": PHASES_OF,
        **({"winners": _winners(session)} if args.profile else {}),
    }


def new_host(args: argparse.Namespace) -> dict[str, Any]:
    """A green context of `sm_limit` SMs: a GPU model the fleet has not compiled on."""
    import torch

    from agents import runtime as tps_runtime
    from tools.bench.runtime import Clock, _new_process_kernels, cuda_forwards, kernel_table

    fleet_session = tps_runtime.open_session(
        device="cuda", cache=args.workdir / "new-cache.json", service=args.service,
        token=args.token, sm_limit=args.sm_limit,
    )  # fmt: skip
    hardware = fleet_session.runtime.hardware
    model, forward = cuda_forwards(args.model, args.case)
    gemm_search: dict[str, Any] = {"max_autotune_gemm": True}
    variants: dict[str, Any] = {}
    out: dict[str, Any] = {"hardware": hardware.model_dump(mode="json")}
    with torch._inductor.config.patch(force_disable_caches=True):
        variants["default"] = forward(torch.compile(copy.deepcopy(model)))
        out["default_compile_s"] = round(_first_call(variants["default"], "default"), 2)
        variants["max_autotune"] = forward(
            torch.compile(copy.deepcopy(model), mode="max-autotune-no-cudagraphs")
        )
        out["max_autotune_compile_s"] = round(
            _first_call(variants["max_autotune"], "max-autotune"), 2
        )
    _new_process_kernels()  # max-autotune's tuned kernels, kept in memory by their source
    _cold_triton(args.workdir, "fleet")
    variants["fleet"] = forward(torch.compile(copy.deepcopy(model), options=gemm_search))
    with tps_runtime.compiled(fleet_session) as fleet:
        out["fleet_compile_s"] = round(_first_call(variants["fleet"], "new GPU with the fleet"), 2)
    out["fleet"] = _stats(fleet)
    if args.profile:
        out.setdefault("winners", {})["fleet"] = _winners(fleet_session)
    sessions = [fleet_session]
    chosen = args.variants or (VARIANTS if args.variants is not None else ())
    for name, (how, marker) in ((n, VARIANTS[n]) for n in chosen):
        _new_process_kernels()
        _cold_triton(args.workdir, name)
        # One green context a process: each session runs on the one opened above, as the
        # same hardware, with the same service (asked once per product), each its own cache.
        session = tps_runtime.open_session(
            device="cuda", cache=args.workdir / f"{name}-cache.json", service=args.service,
            token=args.token,
        )  # fmt: skip
        session.runtime.hardware = hardware
        session.runtime.device = fleet_session.runtime.device
        sessions.append(session)
        variants[name] = forward(
            torch.compile(copy.deepcopy(model), options={**gemm_search, **marker})
        )
        with tps_runtime.compiled(session, **how) as other:
            out[f"{name}_compile_s"] = round(_first_call(variants[name], f"new GPU, {name}"), 2)
        out[name] = _stats(other)
        if args.profile:
            out.setdefault("winners", {})[name] = _winners(session)
    for session in sessions:  # pushed now: no variant compiled from another's records
        session.close()
    if args.second_host:
        _new_process_kernels()
        # A second host of the new GPU model, its cache empty, after every session above
        # pushed: it compiles from the fleet's records of this very hardware.
        second = tps_runtime.open_session(
            device="cuda", cache=args.workdir / "second-cache.json", service=args.service,
            token=args.token,
        )  # fmt: skip
        second.runtime.hardware = hardware
        second.runtime.device = fleet_session.runtime.device
        variants["second"] = forward(
            torch.compile(copy.deepcopy(model), options={**gemm_search, "trace.info_log": False})
        )
        with tps_runtime.compiled(second) as again:
            out["second_compile_s"] = round(_first_call(variants["second"], "second host"), 2)
        out["second"] = _stats(again)
        second.close()
    if args.whole:
        _new_process_kernels()
        # One green context a process: this session runs on the one opened above (its
        # stream stays current), as the same hardware, with no service.
        alone = tps_runtime.open_session(device="cuda", cache=args.workdir / "whole-cache.json")
        alone.runtime.hardware = hardware
        alone.runtime.device = fleet_session.runtime.device
        whole_marker = {"trace.enabled": False, "trace.graph_diagram": False}
        variants["whole"] = forward(
            torch.compile(copy.deepcopy(model), options={**gemm_search, **whole_marker})
        )
        with tps_runtime.compiled(alone) as whole:
            out["whole_compile_s"] = round(_first_call(variants["whole"], "new GPU alone"), 2)
        out["whole"] = _stats(whole)
        if args.profile:
            out.setdefault("winners", {})["whole"] = _winners(alone)
        alone.close()
    clock = Clock("cuda")
    times = clock.side_by_side(variants)
    out["ms"] = {name: round(ms, 4) for name, ms in times.items()}
    if args.profile:  # device time per forward by kernel: what the host's speed does not move
        out["kernels"] = {
            name: kernel_table(run, "cuda", forwards=20) for name, run in variants.items()
        }
    out["phases"] = PHASES_OF
    out["ratios"] = {}
    for name, numerator, denominator in RATIOS:
        if numerator in times and denominator in times:
            out["ratios"][name] = [
                round(times[numerator] / times[denominator], 4),
                round(clock.paired(numerator, denominator), 4),
                *[round(x, 4) for x in clock.interval(numerator, denominator)],
            ]
    return out


def _child(role: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    command = [
        sys.executable, __file__, "--role", role, "--model", args.model, "--case", args.case,
        "--sm-limit", str(args.sm_limit), "--service", args.service, "--token", args.token,
        "--workdir", str(args.workdir), "--fleet-finalists", str(args.fleet_finalists), *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=dict(os.environ), timeout=args.timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        late = f"{role} process still running after {args.timeout_s} s"
        return {"error": late, "stderr": str(exc.stderr)[-2000:]}
    if done.returncode != 0 or not done.stdout.strip():
        failed = f"{role} process failed ({done.returncode})"
        return {"error": failed, "stderr": done.stderr[-4000:]}
    for line in done.stderr.splitlines():
        if "compiled in" in line:
            print(f"{role}: {line}", file=sys.stderr)  # noqa: T201
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - start, 1)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="opt-350m")
    p.add_argument("--case", default="decode-b32")
    p.add_argument("--sm-limit", type=int, default=64)
    p.add_argument("--whole", action="store_true", help="also TPS without the fleet")
    p.add_argument("--profile", action="store_true", help="each variant's kernels, profiled")
    p.add_argument(
        "--variants", nargs="*", choices=sorted(VARIANTS), metavar="NAME",
        help=f"also TPS with the fleet otherwise: these of {sorted(VARIANTS)} (none named: all)",
    )  # fmt: skip
    p.add_argument(
        "--second-host", action="store_true",
        help="also a second host of the new GPU model, compiling after the others pushed",
    )  # fmt: skip
    p.add_argument("--fleet-finalists", type=int, default=8)
    p.add_argument(
        "--fleet-ahead", action="store_true",
        help="the fleet's host compiles each descent's next configurations in compile workers",
    )  # fmt: skip
    p.add_argument("--out", type=Path)
    p.add_argument("--timeout-s", type=float, default=400.0, help="each process's limit")
    p.add_argument("--role", choices=["fleet", "new"])
    p.add_argument("--service")
    p.add_argument("--token")
    p.add_argument("--workdir", type=Path)
    args = p.parse_args()
    if args.role == "fleet":
        print(json.dumps(fleet_host(args)))  # noqa: T201  (read by the parent)
        return
    if args.role == "new":
        print(json.dumps(new_host(args)))  # noqa: T201  (read by the parent)
        return
    from cli.bench_runtime import embedded_service

    started = time.perf_counter()
    with embedded_service() as (url, token), tempfile.TemporaryDirectory() as tmp:
        args.service, args.token, args.workdir = url, token, Path(tmp)
        ahead = ["--fleet-ahead"] if args.fleet_ahead else []
        first = _child("fleet", args, (["--profile"] if args.profile else []) + ahead)
        print(f"fleet: {json.dumps(first)[:1500]}", file=sys.stderr)  # noqa: T201
        flags = (["--whole"] if args.whole else []) + (["--profile"] if args.profile else [])
        flags += ["--second-host"] if args.second_host else []
        if args.variants is not None:
            flags += ["--variants", *args.variants]
        second = {} if "error" in first else _child("new", args, flags)
    result = {
        "model": args.model,
        "case": args.case,
        "sm_limit": args.sm_limit,
        "fleet_host": first,
        "new_gpu_host": second,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)  # noqa: T201  (the script's output)


if __name__ == "__main__":
    main()
