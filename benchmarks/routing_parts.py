"""Where a routing miss's host time goes, on this machine's CPU (`timeit`, best of 9).

The two ways to ask whether dynamo traces a call, the signature a routed `torch.mm` builds
(dtype, device, sizes and strides of both operands), and a plain and a routed `torch.mm` of
two 8x8 fp32 tensors whose route keeps the default (a miss that has not settled).

    .venv/bin/python benchmarks/routing_parts.py > benchmarks/results/routing_parts_cpu.json
"""

from __future__ import annotations

import json
import platform
import timeit
from datetime import UTC, datetime

import torch

from agents.cache import ProbeCache
from agents.runtime import AdmissionSettings, open_session, tuned
from agents.runtime.patching import ORIGINAL
from agents.runtime.patching import mm as routed_mm

CALLS = 200_000
REPEATS = 9


def best_ns(statement: str, names: dict[str, object]) -> float:
    times = timeit.repeat(statement, globals=names, number=CALLS, repeat=REPEATS)
    return min(times) / CALLS * 1e9


def main() -> None:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    # never settles: every call below is a routing miss
    session = open_session(
        device="cpu", cache=ProbeCache(None), admission=AdmissionSettings(settle_after=0)
    )
    names: dict[str, object] = {
        "a": a,
        "b": b,
        "is_compiling": torch.compiler.is_compiling,
        "is_dynamo_compiling": torch.compiler.is_dynamo_compiling,
        "plain": ORIGINAL["mm"],
        "routed": routed_mm,
    }
    statements = {
        "is_compiling_ns": "is_compiling()",
        "is_dynamo_compiling_ns": "is_dynamo_compiling()",
        "signature_ns": "(a.dtype, a.get_device(), a.size(), a.stride(), b.size(), b.stride())",
        "mm_plain_ns": "plain(a, b)",
        "mm_routed_miss_ns": "routed(a, b)",
    }
    with torch.no_grad(), tuned(session):
        routed_mm(a, b)  # decide the route: the default
        timed = {k: best_ns(s, names) for k, s in statements.items()}
    session.close()
    timed["mm_miss_overhead_ns"] = timed["mm_routed_miss_ns"] - timed["mm_plain_ns"]
    out: dict[str, object] = {**timed} | {
        "calls": CALLS,
        "repeats": REPEATS,
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "torch": torch.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
