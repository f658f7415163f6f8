"""padded: copy operands into buffers with aligned leading dimensions, multiply, slice.

cuBLAS ran (4095, 4095, 4095) bf16 in 1026 µs on the H200 against about 180 µs at 4096:
unaligned rows push it onto slow kernels. Both operand copies run on every launch and
count in the measured time; the result is the [M, N] slice of the padded product.

fp8 products run only with every dimension a multiple of 16, A row-major and B
column-major: there the copies also fix the layout, so a problem the vendor default
refuses gets a kernel at all.
"""

from __future__ import annotations

from typing import Any

from agents.errors import CandidateError
from agents.ops.gemm import FP8, GemmOperands
from agents.probe.device import Device
from agents.providers.base import Kernel
from agents.providers.vendor import gemm_default
from tps.candidate import Candidate
from tps.problem import DTYPE_BYTES, ProblemKey


def round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def is_aligned(problem: ProblemKey, *, align_bytes: int = 16) -> bool:
    """Return whether every leading dimension (and K) is a multiple of `align_bytes`."""
    size = DTYPE_BYTES[problem.dtype]
    lds = (*problem.gemm_lds, problem.dims["k"])
    return all((ld * size) % align_bytes == 0 for ld in lds)


def fp8_needs_padding(problem: ProblemKey) -> bool:
    """Return whether an fp8 GEMM is off the grid or layout its kernels accept."""
    dims = (problem.dims["m"], problem.dims["n"], problem.dims["k"])
    packed = all(ld is None for ld in (problem.lda, problem.ldb, problem.ldc))
    layout_ok = not problem.trans_a and problem.trans_b and packed
    return problem.batch == 1 and (any(d % 16 for d in dims) or not layout_ok)


class PaddedProvider:
    backend = "padded"
    ops = frozenset({"gemm"})

    def available(self, device: Device) -> bool:
        return device.is_gpu

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if problem.dtype in FP8:
            if not fp8_needs_padding(problem):
                return []
            aligns: tuple[int, ...] = (16, 64)
        elif is_aligned(problem):
            return []
        else:
            aligns = (8, 64)  # 16-byte rows, then whole tiles
        return [
            Candidate(backend=self.backend, params={"align": a, "inner": "vendor-default"})
            for a in aligns
        ][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        fp8 = problem.dtype in FP8
        if fp8 and (problem.batch > 1 or problem.ldc is not None or problem.stride_c is not None):
            raise CandidateError("padded fp8 takes unbatched problems with a packed C only")
        align = int(candidate.params.get("align") or 8)
        if fp8 and align % 16:
            raise CandidateError(f"fp8 needs dimensions padded to a multiple of 16, not {align}")
        m, n, k = problem.dims["m"], problem.dims["n"], problem.dims["k"]
        mp, np_, kp = round_up(m, align), round_up(n, align), round_up(k, align)
        batch = problem.batch
        # fp8: A row-major and B column-major whatever the problem's layout (the copies
        # transpose); other dtypes keep the problem's transposes.
        trans_a = False if fp8 else problem.trans_a
        trans_b = True if fp8 else problem.trans_b
        padded = ProblemKey(
            op="gemm",
            dtype=problem.dtype,
            dims={"m": mp, "n": np_, "k": kp} | ({"batch": batch} if batch > 1 else {}),
            trans_a=trans_a,
            trans_b=trans_b,
        )
        lead = (batch,) if batch > 1 else ()
        a_store = torch.zeros(
            lead + ((kp, mp) if trans_a else (mp, kp)),
            dtype=operands.a.dtype,
            device=operands.a.device,
        )
        b_store = torch.zeros(
            lead + ((np_, kp) if trans_b else (kp, np_)),
            dtype=operands.b.dtype,
            device=operands.b.device,
        )
        a_pad = a_store.transpose(-1, -2) if trans_a else a_store
        b_pad = b_store.transpose(-1, -2) if trans_b else b_store
        a_dst, b_dst = a_pad[..., :m, :k], b_pad[..., :k, :n]
        inner = gemm_default(padded, GemmOperands(problem=padded, a=a_pad, b=b_pad), device)
        a, b = operands.a, operands.b

        def run() -> Any:
            a_dst.copy_(a)
            b_dst.copy_(b)
            return inner.run()[..., :m, :n]

        copy = (a.numel() + b.numel()) * a.element_size()
        return Kernel(candidate=candidate, run=run, keepalive=[a_store, b_store], copy_bytes=copy)
