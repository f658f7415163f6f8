"""Memory bandwidth of a GPU's SM-limited configurations, as the agent measures it.

Each limit runs in a process of its own (one green context per process) and reports:
- `limited_bandwidth_gbs`: what `detect_hardware` puts in the spec (a copy kernel on the
  green context's stream);
- `kernel_gbs`: five more of those measurements, to show their spread;
- `memcpy_gbs`: a `copy_` on the same stream, which may run outside the context's SMs;
- `linear_share_gbs`: the whole device's bandwidth shared out by SMs, the model's old guess.

Usage (on a GPU host): python3 benchmarks/unit_bandwidth.py --limit 16 --limit 32 --limit 64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any


def measure(limit: int | None) -> dict[str, Any]:
    import torch

    from agents.probe.device import open_device
    from agents.probe.hardware import _gpu_copy_gbs, detect_hardware

    device = open_device("cuda", sm_limit=limit)
    spec = detect_hardware(device)
    kernel = [_gpu_copy_gbs(device) for _ in range(5)]
    s = device.stream if device.stream is not None else torch.cuda.current_stream()
    memcpy = []
    with torch.cuda.stream(s):
        src = torch.ones(2**28, dtype=torch.float32, device=device.torch_device)
        dst = torch.empty_like(src)
        for _ in range(5):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(s)
            dst.copy_(src)
            end.record(s)
            end.synchronize()
            memcpy.append(round(2 * src.nbytes / (start.elapsed_time(end) / 1000) / 1e9, 1))
    return {
        "limit": limit,
        "compute_units": spec.compute_units,
        "mem_bandwidth_gbs": spec.mem_bandwidth_gbs,
        "limited_bandwidth_gbs": spec.limited_bandwidth_gbs,
        "usable_bandwidth_gbs": spec.usable_bandwidth_gbs,
        "kernel_gbs": kernel,
        "memcpy_gbs": memcpy,
        "linear_share_gbs": round(
            spec.mem_bandwidth_gbs * spec.active_units / spec.compute_units, 1
        ),
        "name": spec.name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, action="append", default=[])
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None or args.whole:
        print(json.dumps(measure(None if args.whole else args.child)))  # noqa: T201
        return
    rows = []
    for limit in [None, *args.limit]:
        flag = ["--whole"] if limit is None else ["--child", str(limit)]
        done = subprocess.run(
            [sys.executable, __file__, *flag], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(json.dumps({"configurations": rows}, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
