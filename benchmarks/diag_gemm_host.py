"""Host and device time per call of one product, called the ways a program can call it.

Usage (device): python3 benchmarks/diag_gemm_host.py > out.json
For GPT-2 medium's prefill products (4 x 511 rows; its Conv1D layers call addmm with a bias,
its LM head F.linear): per call, the host time to enqueue it (the device drained first, no
sync in the loop) and the device time of one call in a captured CUDA graph, for torch's
addmm / mm / linear, the same under PyTorch TunableOp once tuned, and the cuBLASLt runner's
lean launch of the heuristic's first algorithm (alone and followed by the bias add).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROWS = 4 * 511
# (name, K, N, layout): Conv1D's x [M, K] @ W [K, N] + bias; the LM head's x @ W[N, K]^T.
SHAPES = [
    ("qkv", 1024, 3072, "conv1d"),
    ("proj", 1024, 1024, "conv1d"),
    ("fc", 1024, 4096, "conv1d"),
    ("fc2", 4096, 1024, "conv1d"),
    ("lm_head", 1024, 50257, "linear"),
]


def main() -> None:
    import torch

    from agents.runtime.keys import gemm_problem
    from agents.runtime.runners import CublasLtRunner
    from tps.candidate import Candidate

    torch.manual_seed(0)
    tunable = torch.cuda.tunable
    tunable.set_filename(str(Path(tempfile.mkdtemp()) / "tunableop.csv"))
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    rows = []
    for name, k, n, layout in SHAPES:
        x = torch.randn(ROWS, k, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        if layout == "conv1d":
            w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            b = w
            calls: dict[str, Any] = {
                "addmm": lambda x=x, w=w, bias=bias: torch.addmm(bias, x, w),
                "mm": lambda x=x, w=w: torch.mm(x, w),
            }
        else:
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            b = w.t()
            calls = {
                "linear": lambda x=x, w=w: torch.nn.functional.linear(x, w),
                "mm": lambda x=x, b=b: torch.mm(x, b),
            }
        problem = gemm_problem(x, b, tf32=False)
        assert problem is not None
        lean = CublasLtRunner(candidate=Candidate(backend="cublaslt", params={}), problem=problem)
        _first_algorithm(lean, x, b)
        lean(x, b)  # the first call plans and executes through nvmath; later ones are lean
        calls["lean"] = lambda lean=lean, x=x, b=b: lean(x, b)
        if layout == "conv1d":
            calls["lean_then_bias"] = lambda lean=lean, x=x, b=b, bias=bias: lean(x, b).add_(bias)
        row: dict[str, Any] = {"name": name, "m": ROWS, "k": k, "n": n}
        for label, call in calls.items():
            row[label] = {"host_us": _host_us(call), "device_us": _graph_us(call)}
        first = next(iter(calls))
        tunable.enable(True)
        tunable.tuning_enable(True)
        calls[first]()
        torch.cuda.synchronize()
        tunable.tuning_enable(False)
        row["tunableop_" + first] = {"host_us": _host_us(calls[first]), "device_us": None}
        tunable.enable(False)
        rows.append(row)
    out["rows"] = rows
    print(json.dumps(out, indent=1))


def _first_algorithm(runner: Any, a: Any, b: Any) -> None:
    """Point the runner's candidate at the heuristic's first algorithm for (a, b)."""
    import torch
    from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences

    from agents.providers.cublaslt import algorithm_params
    from tps.candidate import Candidate

    stream = torch.cuda.current_stream()
    with Matmul(a, b, stream=stream) as mm:
        first = mm.plan(preferences=MatmulPlanPreferences(limit=1), stream=stream)[0]
        runner.candidate = Candidate(backend="cublaslt", params=algorithm_params(first))


def _host_us(call: Any, *, reps: int = 100, rounds: int = 9) -> float:
    import torch

    for _ in range(5):
        call()
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        for _ in range(reps):
            call()
        samples.append((time.perf_counter_ns() - start) / 1e3 / reps)
    torch.cuda.synchronize()
    return statistics.median(samples)


def _graph_us(call: Any, *, reps: int = 20, rounds: int = 7) -> float | None:
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                call()
    except Exception:  # a call that cannot be captured
        return None
    samples = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(samples)


if __name__ == "__main__":
    main()
