"""The host time of each part of a lean cuBLASLt launch, beside torch's own products.

Usage (device): python3 benchmarks/lean_launch_parts.py > out.json
On [2044, 1024] x [1024, 1024] bf16 (GPT-2 medium's attention projection at prefill), µs per
call (200 calls, median of 9, the device drained before each batch): a fresh output
(`torch.empty_strided`), the current stream's handle through a Stream object and as an int,
three data pointers, the whole lean launch of the heuristic's first algorithm, torch's addmm
and mm, an in-place add, and a Python call that does nothing.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any


def per_call_us(fn: Any, *, reps: int = 200, rounds: int = 9) -> float:
    import torch

    for _ in range(5):
        fn()
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter_ns() - start) / 1e3 / reps)
    torch.cuda.synchronize()
    return round(statistics.median(samples), 2)


def main() -> None:
    import torch

    from agents.runtime.keys import gemm_problem
    from agents.runtime.runners import CublasLtRunner
    from benchmarks.diag_gemm_host import _first_algorithm
    from tps.candidate import Candidate

    x = torch.randn(2044, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x, w, tf32=False)
    runner = CublasLtRunner(candidate=Candidate(backend="cublaslt", params={}), problem=problem)
    _first_algorithm(runner, x, w)
    runner(x, w)  # plans and executes through nvmath; the calls below are lean
    device = x.device
    parts = {
        "empty_strided": lambda: torch.empty_strided(
            (2044, 1024), (1024, 1), dtype=torch.bfloat16, device=device
        ),
        "current_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "raw_stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "data_ptr_x3": lambda: (x.data_ptr(), w.data_ptr(), bias.data_ptr()),
        "lean": lambda: runner(x, w),
        "addmm": lambda: torch.addmm(bias, x, w),
        "mm": lambda: torch.mm(x, w),
        "add_": lambda: x.add_(0),
        "noop_py": lambda: None,
    }
    print(json.dumps({name: per_call_us(fn) for name, fn in parts.items()}))  # noqa: T201


if __name__ == "__main__":
    main()
