"""The op protocol: how to build operands for a problem and check an output against a reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tps.problem import ProblemKey


@dataclass(frozen=True)
class Check:
    """The outcome of comparing a candidate's output with the float64 reference."""

    ok: bool
    rel_err: float
    tolerance: float

    def reason(self) -> str:
        return f"relative error {self.rel_err:.3g} exceeds the {self.tolerance:.3g} tolerance"


# Relative Frobenius error allowed per dtype: what rounding to that dtype plus an fp32
# (or tf32) accumulation of that depth can give, with a margin; NaN never passes.
TOLERANCE: dict[str, float] = {
    "fp64": 1e-9,
    "fp32": 1e-4,
    "tf32": 5e-3,
    "fp16": 3e-3,
    "bf16": 1.5e-2,
    "fp8_e4m3": 3e-2,
    "fp8_e5m2": 6e-2,
    "int8": 1e-6,
}


class OpKind(Protocol):
    """An op the engine can probe: its operands, and the check of an output."""

    name: str

    def operands(self, problem: ProblemKey, device: Any, *, seed: int) -> Any: ...

    def prepare_check(self, problem: ProblemKey, operands: Any) -> None:
        """Start whatever `check` will need for these operands, while candidates compile."""
        ...

    def check(self, problem: ProblemKey, operands: Any, output: Any) -> Check: ...


def relative_error(got: Any, ref: Any) -> float:
    """Return ||got - ref|| / ||ref|| in float64; NaN or Inf anywhere gives inf."""
    import torch

    got = got.to(torch.float64)
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    denom = float(torch.linalg.vector_norm(ref)) or 1.0
    return float(torch.linalg.vector_norm(got - ref)) / denom
