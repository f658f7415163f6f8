"""GEMM operands in any layout a ProblemKey describes, and the corner-block check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.ops import OP_KINDS, TOLERANCE, Check, relative_error
from tps.problem import ProblemKey

TORCH_DTYPE_NAMES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "tf32": "float32",
    "fp64": "float64",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}
FP8 = frozenset({"fp8_e4m3", "fp8_e5m2"})


def torch_dtype(dtype: str) -> Any:
    import torch

    try:
        return getattr(torch, TORCH_DTYPE_NAMES[dtype])
    except KeyError:
        raise ValueError(f"GEMM in {dtype} is not supported by the agent") from None


def output_dtype(dtype: str) -> Any:
    """fp8 products come out in bf16; every other dtype keeps its own."""
    import torch

    return torch.bfloat16 if dtype in FP8 else torch_dtype(dtype)


@dataclass
class GemmOperands:
    """A and B as logical [batch?, M, K] and [batch?, K, N] views over their stored layouts.

    `out` is a preallocated C view when the problem fixes ldc or a C batch stride.
    """

    problem: ProblemKey
    a: Any
    b: Any
    out: Any = None

    @property
    def batched(self) -> bool:
        return self.a.dim() == 3


def _stored(
    rows: int, cols: int, *, ld: int, batch: int, stride: int | None, dtype: str,
    device: Any, gen: Any,
) -> Any:
    import torch

    bstride = stride if stride is not None else rows * ld
    numel = (batch - 1) * bstride + (rows - 1) * ld + cols
    buf = torch.empty(numel, dtype=torch.float32, device=device).uniform_(-1, 1, generator=gen)
    buf = buf.to(torch_dtype(dtype))
    if batch > 1:
        return buf.as_strided((batch, rows, cols), (bstride, ld, 1))
    return buf.as_strided((rows, cols), (ld, 1))


def gemm_operands(problem: ProblemKey, device: Any, *, seed: int = 0) -> GemmOperands:
    """Draw random operands (never zeros: they hide unwritten outputs) in the problem's layout."""
    import torch

    m, n, k = problem.dims["m"], problem.dims["n"], problem.dims["k"]
    lda, ldb, ldc = problem.gemm_lds
    batch = problem.batch
    gen = torch.Generator(device=device).manual_seed(seed)
    a_rows, a_cols = (k, m) if problem.trans_a else (m, k)
    b_rows, b_cols = (n, k) if problem.trans_b else (k, n)
    a = _stored(a_rows, a_cols, ld=lda, batch=batch, stride=problem.stride_a,
                dtype=problem.dtype, device=device, gen=gen)
    b = _stored(b_rows, b_cols, ld=ldb, batch=batch, stride=problem.stride_b,
                dtype=problem.dtype, device=device, gen=gen)
    if problem.trans_a:
        a = a.transpose(-1, -2)
    if problem.trans_b:
        b = b.transpose(-1, -2)
    out = None
    if problem.ldc is not None or problem.stride_c is not None:
        cstride = problem.stride_c if problem.stride_c is not None else m * ldc
        numel = (batch - 1) * cstride + (m - 1) * ldc + n
        flat = torch.empty(numel, dtype=output_dtype(problem.dtype), device=device)
        shape, strides = ((batch, m, n), (cstride, ldc, 1)) if batch > 1 else ((m, n), (ldc, 1))
        out = flat.as_strided(shape, strides)
    return GemmOperands(problem=problem, a=a, b=b, out=out)


def _blocks(size: int, block: int) -> list[slice]:
    """The first and the last `block` indices: tails are where wrong kernels break."""
    if size <= block:
        return [slice(0, size)]
    return [slice(0, block), slice(size - block, size)]


@OP_KINDS.register("gemm")
class GemmOp:
    name = "gemm"

    def __init__(self, block: int = 32) -> None:
        self.block = block
        self._reference: tuple[int, Any] | None = None

    def operands(self, problem: ProblemKey, device: Any, *, seed: int) -> GemmOperands:
        return gemm_operands(problem, device, seed=seed)

    def check(self, problem: ProblemKey, operands: GemmOperands, output: Any) -> Check:
        """Compare corner blocks of C with float64 products computed on the CPU."""
        import torch

        tolerance = TOLERANCE[problem.dtype]
        if tuple(output.shape[-2:]) != (problem.dims["m"], problem.dims["n"]):
            return Check(ok=False, rel_err=float("inf"), tolerance=tolerance)
        c = output if operands.batched else output.unsqueeze(0)
        # Gather the corners where the output lives and copy them over in one transfer.
        got = torch.cat([c[bi, rows, cols].flatten()
                         for bi, rows, cols in self._corners(problem)]).to("cpu")
        err = relative_error(got, self._reference_for(problem, operands))
        return Check(ok=err <= tolerance, rel_err=err, tolerance=tolerance)

    def _corners(self, problem: ProblemKey) -> list[tuple[int, slice, slice]]:
        return [
            (bi, rows, cols)
            for bi in sorted({0, problem.batch - 1})
            for rows in _blocks(problem.dims["m"], self.block)
            for cols in _blocks(problem.dims["n"], self.block)
        ]

    def _reference_for(self, problem: ProblemKey, operands: GemmOperands) -> Any:
        """Compute the float64 corner blocks once per operand set, for every candidate."""
        import torch

        if self._reference is not None and self._reference[0] == id(operands):
            return self._reference[1]
        a, b = operands.a, operands.b
        if not operands.batched:
            a, b = a.unsqueeze(0), b.unsqueeze(0)
        parts = []
        for bi, rows, cols in self._corners(problem):
            a_blk = a[bi, rows, :].to("cpu").to(torch.float64)
            b_blk = b[bi, :, cols].to("cpu").to(torch.float64)
            parts.append((a_blk @ b_blk).flatten())
        ref = torch.cat(parts)
        self._reference = (id(operands), ref)
        return ref
