"""Host time of torch's functions under `tuned()` when another function's product runs a winner.

A program under `tps_runtime.tuned()` in which F.linear runs a winner for one product: its
torch.mm, torch.matmul and torch.bmm products, which keep the default, are called
`settle_after` + 1 times, and then timed against torch's own functions (µs per call, the
median of 31 rounds of 4,000 calls, on the CPU, 8x8 fp32). Whether each function is torch's
own at the end is reported too.

    .venv/bin/python benchmarks/functions_beside_winner.py   # one JSON object

Runs against any tree of the runtime (it uses its public API and `Runtime.routes` alone),
so that two trees can be compared side by side.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from agents.cache import ProbeCache
from agents.runtime import open_session, tuned
from agents.runtime.dispatch import Route
from agents.runtime.patching import ORIGINAL, suspended

CALLS, ROUNDS, SIZE = 4_000, 31, 8


def per_call_us(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - start) / CALLS * 1e6


def main() -> None:
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    x, w = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    batch = torch.randn(2, SIZE, SIZE)
    mm = ORIGINAL["mm"]
    session = open_session(device="cpu", cache=ProbeCache(None))
    rt = session.runtime
    calls = {
        "mm": lambda: torch.mm(a, b),
        "matmul": lambda: torch.matmul(a, b),
        "bmm": lambda: torch.bmm(batch, batch),
    }
    series: dict[str, list[float]] = {f"{n}_{k}": [] for n in calls for k in ("plain", "call")}
    with torch.no_grad(), tuned(session):
        F.linear(x, w)  # its product's route, made a winner that runs the default's kernel
        for sig, route in list(rt.routes.items()):
            if sig[0] == "linear":
                rt.routes[sig] = Route(
                    problem=route.problem, runner=lambda p, q: mm(p, q), reason="hit (bench)"
                )
        for _ in range(rt.settle_after + 1):
            for call in calls.values():
                call()
        F.linear(x, w)
        for _ in range(ROUNDS):
            for name, call in calls.items():
                with suspended():
                    series[f"{name}_plain"].append(per_call_us(call))
                series[f"{name}_call"].append(per_call_us(call))
        own = {
            "mm": torch.mm is ORIGINAL["mm"],
            "matmul": torch.matmul is ORIGINAL["matmul"],
            "bmm": torch.bmm is ORIGINAL["bmm"],
            "linear": F.linear is ORIGINAL["linear"],
        }
    session.close()
    import agents

    root = Path(agents.__file__).resolve().parents[1]  # the tree measured
    out: dict[str, Any] = {
        "code": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip(),
        "torch": torch.__version__,
        "torch_own_function": own,
    }
    for name in calls:
        plain = statistics.median(series[f"{name}_plain"])
        out[f"{name}_overhead_us"] = round(statistics.median(series[f"{name}_call"]) - plain, 3)
        out[f"{name}_plain_us"] = round(plain, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
