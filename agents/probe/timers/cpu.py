"""Wall-clock timing on the host, for CPU candidates."""

from __future__ import annotations

import time
from collections.abc import Sequence

from agents.probe.timers.base import Armed
from agents.providers.base import Kernel


class CpuTimer:
    """Wall-clock timing on the host with perf_counter_ns, `reps` calls per sample."""

    name = "cpu"

    def __init__(self, warmup: int = 2) -> None:
        self.warmup = warmup

    def estimate_us(self, kernels: Sequence[Kernel]) -> list[float]:
        out = []
        for kernel in kernels:
            for _ in range(self.warmup):
                kernel.run()
            start = time.perf_counter_ns()
            kernel.run()
            out.append(max((time.perf_counter_ns() - start) / 1e3 / kernel.launches, 0.01))
        return out

    def arm(self, kernel: Kernel, reps: int, kernel_us: float = 0.0) -> Armed:
        return Armed(kernel=kernel, reps=reps, kernel_us=kernel_us, mode="loop")

    def sample_rounds(
        self, armed: Sequence[Armed], orders: Sequence[Sequence[int]]
    ) -> list[dict[int, float]]:
        out: list[dict[int, float]] = []
        for order in orders:
            row: dict[int, float] = {}
            for i in order:
                a = armed[i]
                # Interleaving switches thread counts and BLAS runtimes (torch's OpenMP pool,
                # numpy's OpenBLAS threads): the first call after a switch waits for the other
                # runtime's spinning threads, milliseconds on a small box. One untimed call
                # takes that out, so each sample measures the kernel, not its predecessor.
                a.kernel.run()
                start = time.perf_counter_ns()
                for _ in range(a.reps):
                    a.kernel.run()
                row[i] = (time.perf_counter_ns() - start) / 1e3 / (a.reps * a.kernel.launches)
            out.append(row)
        return out
