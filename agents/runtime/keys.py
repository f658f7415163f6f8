"""Problem keys of the products a program runs, read from its tensors' shapes and strides."""

from __future__ import annotations

from typing import Any

from tps.problem import ProblemKey

# torch dtype name -> TPS dtype; fp32 becomes tf32 where the program allows TF32 products.
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def _operand(t: Any) -> tuple[bool, int] | None:
    """Return (transposed, leading dimension) of a [.., R, C] view; None if no BLAS reads it."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_row, s_col = t.stride(-2), t.stride(-1)
    if s_col == 1 or cols == 1:
        return False, max(s_row, cols, 1)
    if s_row == 1 or rows == 1:
        return True, max(s_col, rows, 1)
    return None


def gemm_problem(a: Any, b: Any, *, tf32: bool) -> ProblemKey | None:
    """Return the ProblemKey of C = A @ B for logical views A [.., M, K] and B [.., K, N].

    None where the product is not one GEMM TPS models: a dtype it does not tune, mixed
    dtypes, mismatched batches, empty dims, or operands whose strides no BLAS call takes.
    """
    dtype = DTYPES.get(str(a.dtype))
    if dtype is None or a.dtype != b.dtype or a.dim() != b.dim() or a.dim() not in (2, 3):
        return None
    if dtype == "fp32" and tf32:
        dtype = "tf32"
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if b.shape[-2] != k or min(m, n, k) <= 0:
        return None
    la, lb = _operand(a), _operand(b)
    if la is None or lb is None:
        return None
    dims = {"m": m, "n": n, "k": k}
    strides: dict[str, int | None] = {}
    if a.dim() == 3:
        batch = a.shape[0]
        if b.shape[0] != batch or batch <= 0:
            return None
        if batch > 1:
            dims["batch"] = batch
            strides = {
                "stride_a": _batch_stride(a, la, rows=m, cols=k),
                "stride_b": _batch_stride(b, lb, rows=k, cols=n),
            }
    try:
        return ProblemKey(
            op="gemm",
            dtype=dtype,
            dims=dims,
            trans_a=la[0],
            trans_b=lb[0],
            lda=la[1],
            ldb=lb[1],
            **strides,
        )
    except ValueError:
        return None


def _batch_stride(t: Any, layout: tuple[bool, int], *, rows: int, cols: int) -> int | None:
    """Return the batch stride, or None where it is the packed one (one problem, one key)."""
    transposed, ld = layout
    stored_rows = cols if transposed else rows
    stride = int(t.stride(0))
    return None if stride == stored_rows * ld else stride


def signature(name: str, a: Any, b: Any, tf32: bool) -> tuple[Any, ...]:
    """Return the hashable key of a call: what decides its problem, read in about a microsecond."""
    return (name, a.dtype, tf32, a.device, a.shape, a.stride(), b.shape, b.stride())
