"""layernorm operands (rows x cols, affine) and the float64 check of the first and last rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.ops.base import TOLERANCE, Check, relative_error
from agents.ops.gemm import torch_dtype
from tps.problem import ProblemKey

EPS = 1e-5


@dataclass
class LayerNormOperands:
    problem: ProblemKey
    x: Any
    weight: Any
    bias: Any
    eps: float = EPS


class LayerNormOp:
    name = "layernorm"

    def __init__(self, rows: int = 8) -> None:
        self.rows = rows

    def operands(self, problem: ProblemKey, device: Any, *, seed: int) -> LayerNormOperands:
        import torch

        rows, cols = problem.dims["rows"], problem.dims["cols"]
        gen = torch.Generator(device=device).manual_seed(seed)
        dtype = torch_dtype(problem.dtype)

        def draw(*shape: int, low: float = -1.0) -> Any:
            t = torch.empty(shape, dtype=torch.float32, device=device)
            return t.uniform_(low, 1, generator=gen).to(dtype)

        return LayerNormOperands(problem, draw(rows, cols) * 3, draw(cols, low=0.5), draw(cols))

    def prepare_check(self, problem: ProblemKey, operands: Any) -> None:
        """Nothing to start: the reference is computed in `check`."""

    def check(self, problem: ProblemKey, operands: LayerNormOperands, output: Any) -> Check:
        import torch
        import torch.nn.functional as F

        tolerance = TOLERANCE[problem.dtype]
        rows = problem.dims["rows"]
        idx = sorted({*range(min(self.rows, rows)), *range(max(0, rows - self.rows), rows)})
        index = torch.tensor(idx, device=operands.x.device)
        x = operands.x.index_select(0, index).to("cpu").double()
        ref = F.layer_norm(
            x,
            (x.shape[1],),
            operands.weight.to("cpu").double(),
            operands.bias.to("cpu").double(),
            operands.eps,
        )
        got = output.index_select(0, index.to(output.device)).to("cpu")
        err = relative_error(got, ref)
        return Check(ok=err <= tolerance, rel_err=err, tolerance=tolerance)
