"""GEMM operands in any layout a ProblemKey describes, and the corner-block check."""

from __future__ import annotations

import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agents.ops.base import TOLERANCE, Check, relative_error
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
        return bool(self.a.dim() == 3)


def _stored(
    rows: int,
    cols: int,
    *,
    ld: int,
    batch: int,
    stride: int | None,
    dtype: str,
    device: Any,
    gen: Any,
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
    a = _stored(
        a_rows,
        a_cols,
        ld=lda,
        batch=batch,
        stride=problem.stride_a,
        dtype=problem.dtype,
        device=device,
        gen=gen,
    )
    b = _stored(
        b_rows,
        b_cols,
        ld=ldb,
        batch=batch,
        stride=problem.stride_b,
        dtype=problem.dtype,
        device=device,
        gen=gen,
    )
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


class GemmOp:
    name = "gemm"

    def __init__(self, block: int = 32) -> None:
        self.block = block
        # (operand set, future of its float64 corner blocks), for the latest operand set.
        self._reference: tuple[weakref.ref[GemmOperands], Future[Any]] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def operands(self, problem: ProblemKey, device: Any, *, seed: int) -> GemmOperands:
        return gemm_operands(problem, device, seed=seed)

    def prepare_check(self, problem: ProblemKey, operands: GemmOperands) -> None:
        self._start_reference(problem, operands)

    def check(self, problem: ProblemKey, operands: GemmOperands, output: Any) -> Check:
        """Compare corner blocks of C with float64 products computed on the CPU."""
        import torch

        tolerance = TOLERANCE[problem.dtype]
        if tuple(output.shape[-2:]) != (problem.dims["m"], problem.dims["n"]):
            return Check(ok=False, rel_err=float("inf"), tolerance=tolerance)
        c = output if operands.batched else output.unsqueeze(0)
        # Gather the corners where the output lives and copy them over in one transfer.
        got = torch.cat(
            [c[bi, rows, cols].flatten() for bi, rows, cols in self._corners(problem)]
        ).to("cpu")
        err = relative_error(got, self._reference_for(problem, operands))
        return Check(ok=err <= tolerance, rel_err=err, tolerance=tolerance)

    def _corners(self, problem: ProblemKey) -> list[tuple[int, slice, slice]]:
        return [
            (bi, rows, cols)
            for bi in sorted({0, problem.batch - 1})
            for rows in _blocks(problem.dims["m"], self.block)
            for cols in _blocks(problem.dims["n"], self.block)
        ]

    def _start_reference(self, problem: ProblemKey, operands: GemmOperands) -> None:
        """Copy the corner rows and columns over now; multiply them on a CPU thread.

        The float64 products of a deep K cost milliseconds of CPU; computed while the
        device plans and compiles the candidates, they are ready when checked. numpy's
        BLAS does the product: a second thread entering torch's OpenMP pool made it 3-5x
        slower on the H200 host's 16 cores.
        """
        import torch

        a, b = operands.a, operands.b
        if not operands.batched:
            a, b = a.unsqueeze(0), b.unsqueeze(0)
        blocks = [
            (
                a[bi, rows, :].to("cpu", torch.float64).numpy(),
                b[bi, :, cols].to("cpu", torch.float64).numpy(),
            )
            for bi, rows, cols in self._corners(problem)
        ]

        def multiply() -> Any:
            import numpy as np

            return torch.from_numpy(np.concatenate([(x @ y).ravel() for x, y in blocks]))

        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tps-reference")
        self._reference = (weakref.ref(operands), self._pool.submit(multiply))

    def _reference_for(self, problem: ProblemKey, operands: GemmOperands) -> Any:
        """Return the float64 corner blocks of this operand set, computed once for all."""
        if self._reference is None or self._reference[0]() is not operands:
            self._start_reference(problem, operands)
        assert self._reference is not None
        return self._reference[1].result()
