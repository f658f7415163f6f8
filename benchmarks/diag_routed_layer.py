"""Where a routed layer's time goes inside a model: profile eager against eager with TPS.

Usage (device): python3 benchmarks/diag_routed_layer.py --model gpt2-medium --case decode-b32
Prints one JSON object: per-forward wall and device times of both, the routed layers'
kernels and host time, and whether the stream was still busy when each routed call began.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tools.bench.runtime import _install, cuda_case, tuned_host

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2-medium")
    p.add_argument("--case", default="decode-b32")
    args = p.parse_args()
    model, run = cuda_case(args.model, args.case)
    host, routed = tuned_host(model, run, Path(tempfile.mkdtemp()))
    out: dict[str, Any] = {"model": args.model, "case": args.case, "routed": list(routed)}
    out["decisions"] = [
        {
            "problem": r.problem.canonical(),
            "candidate": r.candidate.label() if r.candidate else None,
            "routed": r.runner is not None,
            "gain": r.gain,
        }
        for r in host.runtime.decisions()
        if r.problem is not None
    ]
    setups = {"eager": _install(model, {}), "tps": _install(model, routed)}

    # Host time of the routed layers' calls, and whether the GPU was still busy then.
    busy: dict[str, list[int]] = {}
    host_us: dict[str, list[float]] = {}
    stamps: dict[str, float] = {}
    for variant in ("eager", "tps"):
        setups[variant]()
        layers = {n: m for n, m in model.named_modules() if n in routed}
        handles = []

        def pre(mod: Any, inp: Any, n: str = "", v: str = variant) -> None:
            busy.setdefault(f"{v}:{n}", []).append(0 if torch.cuda.current_stream().query() else 1)
            stamps[n] = time.perf_counter()

        def post(mod: Any, inp: Any, outp: Any, n: str = "", v: str = variant) -> None:
            host_us.setdefault(f"{v}:{n}", []).append((time.perf_counter() - stamps[n]) * 1e6)

        for n, m in layers.items():
            handles.append(m.register_forward_pre_hook(lambda mod, inp, n=n: pre(mod, inp, n)))
            handles.append(m.register_forward_hook(lambda mod, inp, o, n=n: post(mod, inp, o, n)))
        for _ in range(30):
            run()
        torch.cuda.synchronize()
        for h in handles:
            h.remove()
    out["busy_share"] = {k: sum(v) / len(v) for k, v in busy.items()}
    out["layer_host_us"] = {k: statistics.median(v) for k, v in host_us.items()}

    # Wall per forward (synchronized at the end of each), several rounds alternating.
    walls: dict[str, list[float]] = {"eager": [], "tps": []}
    for _ in range(20):
        for variant in ("eager", "tps", "tps", "eager"):
            setups[variant]()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            walls[variant].append((time.perf_counter() - t0) / 3 * 1e3)
    out["wall_ms"] = {k: statistics.median(v) for k, v in walls.items()}

    # Device time per forward, and the kernels of each variant, from the profiler.
    for variant in ("eager", "tps"):
        setups[variant]()
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                run()
            torch.cuda.synchronize()
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type.name == "CUDA"]
        total = sum(e.self_device_time_total for e in kernels) / 5
        top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:8]
        out[f"{variant}_device_us_per_forward"] = total
        out[f"{variant}_top_kernels"] = [
            {
                "name": e.key[:90],
                "us_per_forward": e.self_device_time_total / 5,
                "count": e.count / 5,
            }
            for e in top
        ]
        cpu = sorted(
            (e for e in events if e.device_type.name == "CPU"),
            key=lambda e: -e.self_cpu_time_total,
        )[:8]
        out[f"{variant}_top_cpu"] = [
            {"name": e.key[:90], "us_per_forward": e.self_cpu_time_total / 5, "count": e.count / 5}
            for e in cpu
        ]
    setups["eager"]()
    host.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
