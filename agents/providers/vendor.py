"""vendor-default: what the framework runs when nobody tunes anything. Always a candidate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey

# Builds the framework's own call for one op's operands.
DefaultRunner = Callable[[ProblemKey, Any, Device], Kernel]


class VendorDefaultProvider:
    """The framework's own call for each op in `runners` (op name -> its builder)."""

    backend = "vendor-default"

    def __init__(self, runners: Mapping[str, DefaultRunner]) -> None:
        self.runners = dict(runners)

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(self.runners)

    def available(self, device: Device) -> bool:
        return True

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        return [VENDOR_DEFAULT]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        runner = self.runners.get(problem.op)
        if runner is None:
            raise CandidateError(f"no framework default for op {problem.op!r}")
        return runner(problem, operands, device)


def gemm_default(problem: ProblemKey, operands: Any, device: Device) -> Kernel:
    """torch.mm / torch.bmm (torch._scaled_mm for fp8), honouring tf32 for tf32 problems."""
    import torch

    from agents.ops.gemm import FP8

    a, b, out = operands.a, operands.b, operands.out
    if problem.dtype in FP8:
        if not device.is_gpu or operands.batched or out is not None:
            raise CandidateError("fp8 GEMM needs a GPU, no batch and a packed C")
        one = torch.ones((), device=a.device, dtype=torch.float32)

        def run_fp8() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return Kernel(candidate=VENDOR_DEFAULT, run=run_fp8)

    mm = torch.bmm if operands.batched else torch.mm
    tf32 = problem.dtype == "tf32"
    flags = torch.backends.cuda.matmul

    def run() -> Any:
        saved = flags.allow_tf32
        flags.allow_tf32 = tf32
        try:
            return mm(a, b, out=out) if out is not None else mm(a, b)
        finally:
            flags.allow_tf32 = saved

    poison = (lambda: out.fill_(float("nan"))) if out is not None else None
    return Kernel(candidate=VENDOR_DEFAULT, run=run, poison=poison)
