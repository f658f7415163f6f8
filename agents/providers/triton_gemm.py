"""triton: a Triton GEMM over a space of tiles, warps and pipeline depths (NVIDIA and AMD).

The first launch of a configuration compiles it; the engine times that launch apart, as
compile time, and Triton keeps the binary for every later problem that shares it.
"""

from __future__ import annotations

from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import Candidate
from tps.problem import DTYPE_BYTES, ProblemKey

DTYPES = frozenset({"bf16", "fp16", "fp32", "tf32"})
MAX_LAYERNORM_COLS = 32768  # one row per program, held in registers
REDUCE_BLOCK = 1024  # outputs per program of the split-K sum
MAX_GEMV_ROWS = 16  # the GEMV kernel's sums live in registers, BLOCK_M x BLOCK_N per program

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, SPLIT_K), best first per M
# range, from a sweep of 30 configurations per shape on the H200
# (benchmarks/gemm_h200_sweep.py): skinny decode-like products want small M tiles, deep K
# and split-K; large ones want wide tiles.
CONFIGS: dict[str, list[tuple[int, int, int, int, int, int, int]]] = {
    "skinny": [
        (16, 128, 128, 8, 8, 4, 2),
        (16, 128, 128, 8, 8, 4, 4),
        (16, 128, 128, 8, 8, 4, 1),
        (16, 64, 256, 8, 4, 4, 1),
        (16, 32, 512, 8, 4, 3, 1),
    ],
    "small": [
        (64, 64, 128, 8, 4, 4, 2),
        (128, 128, 64, 8, 8, 4, 1),
        (128, 64, 64, 8, 4, 4, 2),
        (64, 128, 64, 8, 4, 4, 1),
    ],
    "large": [(256, 128, 64, 8, 8, 3, 1), (128, 128, 64, 8, 8, 4, 1), (128, 256, 64, 8, 8, 3, 1)],
}
# The GEMV kernel for products of a few rows (decode). In the sweep of the suite's products of
# at most 8 rows (benchmarks/gemm_h200_gemv.py) this configuration was its best on 9 of the 11
# single-row shapes, but it beat cuBLAS on one of them only (1x4096x4096, 1.07x), and with more
# rows the CUDA cores cannot keep up with the memory (2-6x slower). So it is not offered: the
# provider runs it when a candidate names it (`"kernel": "gemv"`), as priors from the fleet may.
GEMV_PARAMS = {"kernel": "gemv", "BLOCK_N": 8, "BLOCK_K": 1024, "num_warps": 4}
# How many of them to offer. In that sweep Triton came within 5% of cuBLAS only for
# M <= 64, and lost 18-37% above it: slots it cannot use go to the other providers.
OFFERED = {"skinny": 3, "small": 2, "large": 1}


def _int_param(candidate: Candidate, name: str, default: int) -> int:
    value = candidate.params.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise CandidateError(f"{candidate.label()}: {name} must be an integer, got {value!r}")
    return value


def _partials(out: Any, m: int, n: int, split: int) -> Any:
    """Return the fp32 [split, M, N] workspace of a split-K launch (None without split-K)."""
    import torch

    return torch.empty((split, m, n), dtype=torch.float32, device=out.device) if split > 1 else None


def _sum_partials(workspace: Any, out: Any, split: int) -> None:
    """Sum the K slices' partials into the 2-D output `out`, cast once (one more launch)."""
    import triton

    from agents.providers.triton_kernels import splitk_reduce_kernel

    m, n = out.shape
    grid = (triton.cdiv(m * n, REDUCE_BLOCK),)
    splitk_reduce_kernel[grid](
        workspace, out, m, n, out.stride(0), out.stride(1), SPLIT_K=split, BLOCK=REDUCE_BLOCK,
        num_warps=4,
    )  # fmt: skip


def bucket(problem: ProblemKey) -> str:
    m = problem.dims["m"]
    return "skinny" if m <= 32 else "small" if m <= 256 else "large"


def smem_bytes(cfg: tuple[int, ...], dtype: str) -> int:
    bm, bn, bk, _, _, stages = cfg
    return (bm * bk + bk * bn) * DTYPE_BYTES[dtype] * stages


def fit(cfg: tuple[int, int, int, int, int, int], dtype: str, limit: int) -> tuple[int, ...]:
    """Shrink the pipeline, then BLOCK_K, until the stages fit in shared memory."""
    bm, bn, bk, group, warps, stages = cfg
    while smem_bytes((bm, bn, bk, group, warps, stages), dtype) > limit:
        if stages > 2:
            stages -= 1
        elif bk > 32:
            bk //= 2
        else:
            break
    return (bm, bn, bk, group, warps, stages)


def as_params(cfg: tuple[int, ...], split_k: int = 1) -> dict[str, int]:
    bm, bn, bk, group, warps, stages = cfg
    params = {
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "GROUP_M": group,
        "num_warps": warps,
        "num_stages": stages,
    }
    if split_k > 1:  # absent when 1, so that the ids of unsplit configs never change
        params["SPLIT_K"] = split_k
    return params


class TritonGemmProvider:
    backend = "triton"
    ops = frozenset({"gemm", "layernorm"})

    def __init__(self, smem_limit: int | None = None) -> None:
        self.smem_limit = smem_limit

    def available(self, device: Device) -> bool:
        if not device.is_gpu:
            return False
        try:
            import triton  # noqa: F401
        except Exception:
            return False
        return True

    def _smem_limit(self, device: Device) -> int:
        if self.smem_limit is None:
            import torch

            props = torch.cuda.get_device_properties(device.index)
            self.smem_limit = int(getattr(props, "shared_memory_per_block_optin", 96 * 1024))
        return self.smem_limit

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if problem.op == "layernorm":
            if problem.dims["cols"] > MAX_LAYERNORM_COLS:
                return []
            return [
                Candidate(backend=self.backend, params={"kernel": "layernorm-row", "num_warps": w})
                for w in (4, 8, 16)
            ][:limit]
        if problem.dtype not in DTYPES:
            return []
        limit_bytes = self._smem_limit(device)
        kind = bucket(problem)
        unbatched = problem.batch == 1
        fitted = dict.fromkeys(
            (fit(c[:6], problem.dtype, limit_bytes), c[6] if unbatched else 1)
            for c in CONFIGS[kind]
        )
        fits = [(c, split) for c, split in fitted if smem_bytes(c, problem.dtype) <= limit_bytes]
        return [
            Candidate(backend=self.backend, params=as_params(c, split))
            for c, split in fits[: min(limit, OFFERED[kind])]
        ]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch
        import triton

        from agents.providers.triton_kernels import gemm_kernel

        if problem.op == "layernorm":
            return self._prepare_layernorm(candidate, problem, operands)
        if problem.dtype not in DTYPES:
            raise CandidateError(f"the Triton GEMM does not take {problem.dtype}")
        p = candidate.params
        if p.get("kernel") == "gemv":
            return self._prepare_gemv(candidate, problem, operands)
        a, b = operands.a, operands.b
        m, n, k = problem.dims["m"], problem.dims["n"], problem.dims["k"]
        batch = problem.batch
        split = _int_param(candidate, "SPLIT_K", 1)
        if split > 1 and batch > 1:
            raise CandidateError("split-K Triton GEMM takes unbatched problems only")
        out = operands.out
        if out is None:
            shape = (batch, m, n) if operands.batched else (m, n)
            out = torch.empty(shape, dtype=a.dtype, device=a.device)
        a3, b3, c3 = (t if t.dim() == 3 else t.unsqueeze(0) for t in (a, b, out))
        grid = (triton.cdiv(m, p["BLOCK_M"]) * triton.cdiv(n, p["BLOCK_N"]), batch, split)
        ieee = problem.dtype == "fp32"
        sa = a3.stride(0) if batch > 1 else 0
        sb = b3.stride(0) if batch > 1 else 0
        sc = c3.stride(0) if batch > 1 else 0
        # Split-K: each K slice writes an fp32 partial; one more launch sums and casts.
        workspace = _partials(out, m, n, split)
        target = c3 if workspace is None else workspace
        st = (m * n, n, 1) if split > 1 else (sc, c3.stride(1), c3.stride(2))

        def run() -> Any:
            gemm_kernel[grid](
                a3,
                b3,
                target,
                m,
                n,
                k,
                sa,
                a3.stride(1),
                a3.stride(2),
                sb,
                b3.stride(1),
                b3.stride(2),
                *st,
                BLOCK_M=p["BLOCK_M"],
                BLOCK_N=p["BLOCK_N"],
                BLOCK_K=p["BLOCK_K"],
                GROUP_M=p["GROUP_M"],
                IEEE=ieee,
                SPLIT_K=split,
                num_warps=p["num_warps"],
                num_stages=p["num_stages"],
            )
            if workspace is not None:
                _sum_partials(workspace, c3[0], split)
            return out

        return Kernel(candidate=candidate, run=run, poison=lambda: out.fill_(float("nan")))

    def _prepare_gemv(self, candidate: Candidate, problem: ProblemKey, operands: Any) -> Kernel:
        import torch
        import triton

        from agents.providers.triton_kernels import gemv_kernel

        p = candidate.params
        m, n, k = problem.dims["m"], problem.dims["n"], problem.dims["k"]
        if problem.batch > 1 or m > MAX_GEMV_ROWS:
            raise CandidateError(
                f"the GEMV kernel takes unbatched products of at most {MAX_GEMV_ROWS} rows"
            )
        a, b = operands.a, operands.b
        out = operands.out
        if out is None:
            out = torch.empty((m, n), dtype=a.dtype, device=a.device)
        split = _int_param(candidate, "SPLIT_K", 1)
        block_m = triton.next_power_of_2(m)
        workspace = _partials(out, m, n, split)
        target = out if workspace is None else workspace
        cs, cm, cn = (m * n, n, 1) if split > 1 else (0, out.stride(0), out.stride(1))
        grid = (triton.cdiv(n, p["BLOCK_N"]), split)

        def run() -> Any:
            gemv_kernel[grid](
                a,
                b,
                target,
                m,
                n,
                k,
                a.stride(0),
                a.stride(1),
                b.stride(0),
                b.stride(1),
                cs,
                cm,
                cn,
                BLOCK_M=block_m,
                BLOCK_N=p["BLOCK_N"],
                BLOCK_K=p["BLOCK_K"],
                SPLIT_K=split,
                num_warps=p["num_warps"],
            )
            if workspace is not None:
                _sum_partials(workspace, out, split)
            return out

        return Kernel(candidate=candidate, run=run, poison=lambda: out.fill_(float("nan")))

    def _prepare_layernorm(
        self, candidate: Candidate, problem: ProblemKey, operands: Any
    ) -> Kernel:
        import torch
        import triton

        from agents.providers.triton_kernels import layernorm_kernel

        x, w, b = operands.x, operands.weight, operands.bias
        rows, cols = x.shape
        out = torch.empty_like(x)
        block = triton.next_power_of_2(cols)
        warps = _int_param(candidate, "num_warps", 4)

        def run() -> Any:
            layernorm_kernel[(rows,)](
                x,
                w,
                b,
                out,
                x.stride(0),
                out.stride(0),
                cols,
                operands.eps,
                BLOCK=block,
                num_warps=warps,
            )
            return out

        return Kernel(candidate=candidate, run=run, poison=lambda: out.fill_(float("nan")))
