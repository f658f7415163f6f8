"""CPU candidates: torch and numpy BLAS with thread counts and operand layouts."""

from __future__ import annotations

import os
from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import Candidate
from tps.problem import ProblemKey


def thread_choices(device: Device) -> list[int]:
    """All threads, half of them, and one: BLAS threading pays only past some size."""
    most = device.threads or os.cpu_count() or 1
    return sorted({most, max(1, most // 2), 1}, reverse=True)


class CpuTorchProvider:
    """torch.matmul on the CPU with a thread count and an operand layout.

    layout=packed copies both operands into row-major buffers first (counted in the
    time): a transposed B can make the BLAS take a slower path.
    """

    backend = "cpu-torch"
    ops = frozenset({"gemm"})

    def available(self, device: Device) -> bool:
        return not device.is_gpu

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        out = [
            Candidate(backend=self.backend, params={"threads": t, "layout": layout})
            for layout in ("as-is", "packed")
            for t in thread_choices(device)
        ]
        return out[:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        threads = int(candidate.params.get("threads") or 1)
        packed = candidate.params.get("layout") == "packed"
        a, b = operands.a, operands.b

        def run() -> Any:
            saved = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                if packed:
                    return torch.matmul(a.contiguous(), b.contiguous())
                return torch.matmul(a, b)
            finally:
                torch.set_num_threads(saved)

        copy = (a.numel() + b.numel()) * a.element_size() if packed else 0
        return Kernel(candidate=candidate, run=run, graphable=False, copy_bytes=copy)


class CpuNumpyProvider:
    """numpy.matmul (its own BLAS build) on fp32 and fp64 operands."""

    backend = "cpu-numpy"
    ops = frozenset({"gemm"})
    dtypes = frozenset({"fp32", "fp64"})

    def available(self, device: Device) -> bool:
        return not device.is_gpu

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if problem.dtype not in self.dtypes:
            return []
        return [Candidate(backend=self.backend, params={"layout": "as-is"})][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import numpy as np
        import torch

        if problem.dtype not in self.dtypes:
            raise CandidateError(f"numpy has no {problem.dtype} GEMM")
        a, b = operands.a.numpy(), operands.b.numpy()

        def run() -> Any:
            return torch.from_numpy(np.matmul(a, b))

        return Kernel(candidate=candidate, run=run, graphable=False)
