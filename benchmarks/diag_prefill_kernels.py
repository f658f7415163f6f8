"""Where a model's forward spends its GPU time: eager, PyTorch TunableOp and TPS, op by op.

Usage (device): python3 benchmarks/diag_prefill_kernels.py --model gpt2-medium --case prefill
Prints one JSON object:
- `times_ms`: the three variants' forwards timed side by side, and each one's host time to
  enqueue a forward (where it nears the forward's time, the GPU waits on the host);
- `ops`: each variant's GPU time per forward by product op and input shapes (aten::addmm,
  aten::mm, ...) and its top kernels;
- `products`: for every problem the TPS host saw, per call on the device and on the host:
  the default as the head to head calls it (a plain product), the product with its bias as the
  program calls it (addmm), and the cached winner's runner, routed or not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PRODUCT_OPS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul")


def main() -> None:
    import torch

    from tools.bench.runtime import Clock, _install, cuda_case, tuned_host

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2-medium")
    p.add_argument("--case", default="prefill")
    args = p.parse_args()
    model, run = cuda_case(args.model, args.case)
    tunable = torch.cuda.tunable
    work = Path(tempfile.mkdtemp())
    host, routed = tuned_host(model, run, work)
    _install(model, {})()
    tunable.set_filename(str(work / "tunableop.csv"))
    tunable.enable(True)
    tunable.tuning_enable(True)
    run()
    torch.cuda.synchronize()
    tunable.tuning_enable(False)
    tunable.enable(False)

    def setup(forwards: dict[str, Any], tunableop: bool) -> Any:
        install = _install(model, forwards)

        def go() -> None:
            install()
            tunable.enable(tunableop)

        return go

    setups = {
        "eager": setup({}, False),
        "tps": setup(routed, False),
        "tunableop": setup({}, True),
    }
    out: dict[str, Any] = {"model": args.model, "case": args.case, "torch": torch.__version__}
    out["gpu"] = torch.cuda.get_device_name()
    out["times_ms"] = Clock("cuda").side_by_side(
        {name: run for name in setups}, setups=setups, rounds=20
    )
    out["host_enqueue_ms"] = {name: _enqueue_ms(run, go) for name, go in setups.items()}
    out["ops"] = {name: _ops(run, go) for name, go in setups.items()}
    setups["eager"]()
    out["products"] = _products(host.runtime)
    out["decisions"] = [
        {
            "problem": r.problem.canonical(),
            "candidate": r.candidate.label() if r.candidate else None,
            "routed": r.runner is not None,
            "reason": r.reason,
            "head_to_head": vars(r.head_to_head) if r.head_to_head else None,
            "program_gain": r.program_gain,
            "host_bound": r.host_bound,
        }
        for r in host.runtime.decisions()
        if r.problem is not None
    ]
    print(json.dumps(out, indent=1))


def _enqueue_ms(run: Any, setup: Any, *, forwards: int = 10) -> float:
    """Median host time to enqueue one forward, the GPU drained before each."""
    import torch

    setup()
    samples = []
    for _ in range(forwards):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(samples)


def _ops(run: Any, setup: Any, *, forwards: int = 3) -> dict[str, Any]:
    """GPU time per forward (µs) of each product op by input shapes, and the top kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    setup()
    run()
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True
    ) as prof:
        for _ in range(forwards):
            run()
        torch.cuda.synchronize()
    ops = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in PRODUCT_OPS and e.device_time_total > 0:
            ops.append(
                {
                    "op": e.key,
                    "shapes": str(e.input_shapes)[:160],
                    "calls": e.count / forwards,
                    "device_us": e.device_time_total / forwards,
                }
            )
    kernels = [
        {
            "kernel": e.key[:140],
            "calls": e.count / forwards,
            "us": e.self_device_time_total / forwards,
        }
        for e in prof.key_averages()
        if e.self_device_time_total > 0
    ]
    kernels.sort(key=lambda k: -k["us"])
    total = sum(k["us"] for k in kernels)
    return {
        "gpu_us": total,
        "products": sorted(ops, key=lambda o: -o["device_us"]),
        "kernels": kernels[:25],
    }


def _products(rt: Any) -> list[dict[str, Any]]:
    return [_product(rt, r) for r in rt.decisions() if r.problem is not None]


def _product(rt: Any, route: Any) -> dict[str, Any]:
    """One problem's calls, each timed per call on the device and on the host."""
    import torch

    from agents.ops.gemm import gemm_operands
    from agents.runtime.runners import make_runner

    problem = route.problem
    ops = gemm_operands(problem, rt.device.torch_device, seed=1)
    a, b = ops.a, ops.b
    bias = torch.randn(b.shape[-1], device="cuda", dtype=a.dtype)
    calls: dict[str, Any] = {
        "default": lambda: rt.default(a, b),
        "addmm": lambda: torch.addmm(bias, a, b),
        "mm_then_bias": lambda: rt.default(a, b).add_(bias),
    }
    if route.candidate is not None:
        runner = make_runner(
            route.candidate,
            problem,
            device=rt.device,
            provider=rt.providers.get(route.candidate.backend),
        )
        calls["winner"] = lambda: runner(a, b)
        calls["winner_then_bias"] = lambda: runner(a, b).add_(bias)
    row: dict[str, Any] = {
        "problem": problem.canonical(),
        "candidate": route.candidate.label() if route.candidate else None,
    }
    for name, call in calls.items():
        row[name] = _per_call(call)
    return row


def _per_call(call: Any, *, reps: int = 50, rounds: int = 7) -> dict[str, float]:
    """Device µs per call in a launch loop, and host µs per call, medians of `rounds`."""
    import torch

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    device, host = [], []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(reps):
            call()
        end.record()
        host.append((time.perf_counter() - t0) * 1e6 / reps)
        end.synchronize()
        device.append(start.elapsed_time(end) * 1e3 / reps)
    return {"device_us": statistics.median(device), "host_us": statistics.median(host)}


if __name__ == "__main__":
    main()
