"""layernorm candidates besides torch's fused kernel: a composite form and Triton rows."""

from __future__ import annotations

from typing import Any

from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey


def layernorm_default(problem: ProblemKey, operands: Any, device: Device) -> Kernel:
    import torch.nn.functional as F

    x, w, b = operands.x, operands.weight, operands.bias
    shape = (x.shape[-1],)
    return Kernel(candidate=VENDOR_DEFAULT, run=lambda: F.layer_norm(x, shape, w, b, operands.eps))


class CompositeLayerNormProvider:
    """mean, variance and affine as separate float32 tensor ops (what unfused code runs)."""

    backend = "layernorm-composite"
    ops = frozenset({"layernorm"})

    def available(self, device: Device) -> bool:
        return True

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        return [Candidate(backend=self.backend, params={"accumulate": "fp32"})][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        x, w, b, eps = operands.x, operands.weight.float(), operands.bias.float(), operands.eps

        def run() -> Any:
            xf = x.float()
            var, mean = torch.var_mean(xf, dim=-1, keepdim=True, unbiased=False)
            return ((xf - mean) * torch.rsqrt(var + eps) * w + b).to(x.dtype)

        return Kernel(candidate=candidate, run=run)
