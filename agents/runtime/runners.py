"""Runners: a winning candidate run on the program's own tensors, call after call.

A probe prepares a candidate once for operands it owns; a runner takes whatever tensors
the program passes, in the exact layout of its problem. Most backends prepare per call
(their preparation is a few Python lines); the padded and cuBLASLt runners keep their
buffers and plans, made on the first call, which is before any graph capture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from agents.ops.gemm import GemmOperands
from agents.plugins import PluginTable
from agents.probe.device import Device
from agents.providers.base import Provider
from agents.providers.padded import round_up
from tps.candidate import Candidate
from tps.problem import ProblemKey


class Runner(Protocol):
    """Run one candidate on logical views A [.., M, K] and B [.., K, N] of one problem."""

    def __call__(self, a: Any, b: Any) -> Any: ...


RunnerFactory = Callable[..., Runner]


class ProviderRunner:
    """Prepare the candidate for the call's tensors through its provider, then launch it."""

    def __init__(
        self, *, candidate: Candidate, problem: ProblemKey, device: Device, provider: Provider
    ) -> None:
        self.candidate = candidate
        self.problem = problem
        self.device = device
        self.provider = provider

    def __call__(self, a: Any, b: Any) -> Any:
        operands = GemmOperands(problem=self.problem, a=a, b=b)
        return self.provider.prepare(self.candidate, self.problem, operands, self.device).run()


class PaddedRunner:
    """Copy A and B into zero-padded buffers with aligned rows, multiply, return the [M, N] view.

    The buffers are made once and reused: only their [M, K] and [K, N] corners are written,
    so the padding stays zero. The product is fresh each call, so outputs never share memory.

    B copied from a model's weight is kept while it is still that weight, unchanged: the
    same view of a parameter (a layer passes its W^T view on every call), on the same memory,
    with no in-place write since (its version counter). On GPT-2 medium's LM head the copy
    of the 1024 x 50257 weight was about a fifth of the winner's device time (364 µs a call
    against 279 µs for its product, `benchmarks/diag_prefill_kernels.py`). Under graph
    capture B is copied on every call, so a replay reads the weight as it is then. Writes
    the version counter does not see (through `.data`) need `forget_weight()`.
    """

    def __init__(self, *, candidate: Candidate, problem: ProblemKey, **_: Any) -> None:
        if problem.dtype.startswith("fp8"):
            raise ValueError("the padded runner takes fp8 products only through a probe")
        self.candidate = candidate
        self.problem = problem
        align = int(candidate.params.get("align") or 8)
        d = problem.dims
        self.m, self.n, self.k = d["m"], d["n"], d["k"]
        self.mp, self.np_, self.kp = (round_up(x, align) for x in (self.m, self.n, self.k))
        self._views: tuple[Any, Any, Any, Any] | None = None
        # the weight whose copy b_pad holds now: the view itself, its pointer and version
        self._weight: Any = None
        self._weight_at: tuple[int, int] = (0, -1)

    def _buffers(self, a: Any, b: Any) -> tuple[Any, Any, Any, Any]:
        import torch

        p, lead = self.problem, ((self.problem.batch,) if self.problem.batch > 1 else ())
        a_shape = (self.kp, self.mp) if p.trans_a else (self.mp, self.kp)
        b_shape = (self.np_, self.kp) if p.trans_b else (self.kp, self.np_)
        a_store = torch.zeros(lead + a_shape, dtype=a.dtype, device=a.device)
        b_store = torch.zeros(lead + b_shape, dtype=b.dtype, device=b.device)
        a_pad = a_store.transpose(-1, -2) if p.trans_a else a_store
        b_pad = b_store.transpose(-1, -2) if p.trans_b else b_store
        return a_pad, b_pad, a_pad[..., : self.m, : self.k], b_pad[..., : self.k, : self.n]

    def __call__(self, a: Any, b: Any) -> Any:
        import torch

        if self._views is None:
            self._views = self._buffers(a, b)
        a_pad, b_pad, a_dst, b_dst = self._views
        a_dst.copy_(a)
        if b is not self._weight or (b.data_ptr(), b._version) != self._weight_at:
            b_dst.copy_(b)
            self._keep(b)
        elif b.is_cuda and torch.cuda.is_current_stream_capturing():
            b_dst.copy_(b)  # a replay copies the weight as it is then
        mm = torch.bmm if a_pad.dim() == 3 else torch.mm
        return mm(a_pad, b_pad)[..., : self.m, : self.n]

    def _keep(self, b: Any) -> None:
        """Remember B if it is a view of a parameter (a weight): its copy can then be reused."""
        import torch

        base = b._base if b._base is not None else b
        if isinstance(base, torch.nn.Parameter):
            self._weight, self._weight_at = b, (b.data_ptr(), b._version)
        else:  # an activation: never held between calls
            self.forget_weight()

    def forget_weight(self) -> None:
        """Copy B again on the next call (a weight written where its version cannot show)."""
        self._weight, self._weight_at = None, (0, -1)

    def out_strides(self) -> tuple[int, ...]:
        """Return the strides of the outputs: rows of the padded N."""
        if self.problem.batch > 1:
            return (self.mp * self.np_, self.np_, 1)
        return (self.np_, 1)


class CublasLtRunner:
    """One nvmath Matmul planned on the first call's tensors, then launched lean.

    The first call plans and executes through nvmath, which checks the operands, the stream
    and the algorithm. Later calls reuse what that call used (the matmul and layout
    descriptors, the algorithm, alpha and beta) and call cublasLtMatmul on the call's
    pointers, a fresh output of the first's shape and strides, and a workspace of the
    algorithm's size made on the first call (before any graph capture). Through nvmath's
    `execute` a call cost far more host time than cuBLAS's own: on the H200 every cuBLASLt
    winner lost its head to head in the program, by 32-86%, for that alone.
    """

    def __init__(self, *, candidate: Candidate, problem: ProblemKey, **_: Any) -> None:
        self.candidate = candidate
        self.problem = problem
        self._matmul: Any = None
        self._algorithm: Any = None
        self._launch: Callable[[Any, Any], Any] | None = None
        self._workspace: Any = None
        self._algo: Any = None

    def _plan(self, a: Any, b: Any) -> None:
        import torch
        from nvmath.linalg import ComputeType
        from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences

        from agents.providers.cublaslt import NVMATH_LOG, algorithm_params

        options: dict[str, Any] = {"logger": NVMATH_LOG}
        if self.problem.dtype == "tf32":
            options["compute_type"] = ComputeType.COMPUTE_32F_FAST_TF32
        elif self.problem.dtype == "fp32":
            options["compute_type"] = ComputeType.COMPUTE_32F
        stream = torch.cuda.current_stream()
        matmul = Matmul(a, b, options=options, stream=stream)
        algorithms = matmul.plan(preferences=MatmulPlanPreferences(limit=64), stream=stream)
        for algorithm in algorithms:
            params = algorithm_params(algorithm)
            if Candidate(backend="cublaslt", params=params).id == self.candidate.id:
                self._matmul, self._algorithm = matmul, algorithm
                return
        raise LookupError("cuBLASLt heuristics no longer offer this algorithm here")

    def _lean(self, out: Any) -> Callable[[Any, Any], Any]:
        """Return a launch of the planned matmul on new operands, from the first call's."""
        import numpy as np
        import torch
        from nvmath.bindings import cublasLt

        mm = self._matmul
        chosen = mm.algorithm_object_to_buffer[self._algorithm]
        # nvmath's own workspace: the largest any planned algorithm asked for
        size = int(np.max(mm.algorithms_buffer["workspace_size"]))
        self._workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=out.device)
        self._algo = chosen["algo"]  # the algorithm's struct, kept alive for its pointer
        handle, desc, algo = mm.handle, mm.mm_desc, self._algo.ctypes.data
        a_layout, b_layout, c_layout, d_layout = (
            mm.a_layout_ptr, mm.b_layout_ptr, mm.c_layout_ptr, mm.d_layout_ptr
        )  # fmt: skip
        alpha, beta = mm.alpha.ctypes.data, mm.beta.ctypes.data
        workspace = self._workspace.data_ptr()
        shape, strides, dtype, device = tuple(out.shape), out.stride(), out.dtype, out.device
        empty, matmul = torch.empty_strided, cublasLt.matmul
        # The current stream's handle as an int: the one Triton's launcher reads. On the H200
        # host, torch.cuda.current_stream().cuda_stream took 4.4 µs of a 16.6 µs launch
        # (it builds a Stream object), this 0.09 µs.
        stream, index = torch._C._cuda_getCurrentRawStream, device.index

        def launch(a: Any, b: Any) -> Any:
            d = empty(shape, strides, dtype=dtype, device=device)
            matmul(
                handle, desc, alpha, a.data_ptr(), a_layout, b.data_ptr(), b_layout, beta,
                0, c_layout, d.data_ptr(), d_layout, algo, workspace, size, stream(index),
            )  # fmt: skip
            return d

        return launch

    @property
    def lean(self) -> bool:
        """Whether calls now launch cublasLtMatmul directly (after the first call)."""
        return self._launch is not None

    def __call__(self, a: Any, b: Any) -> Any:
        import torch

        if self._launch is not None:
            return self._launch(a, b)
        if self._matmul is None:
            self._plan(a, b)
        else:
            self._matmul.reset_operands(a=a, b=b)
        out = self._matmul.execute(algorithm=self._algorithm, stream=torch.cuda.current_stream())
        if self._matmul.num_operands == 2:  # no C: beta is 0 and C's pointer is null
            self._launch = self._lean(out)
        return out


# Backends whose winners run through a runner of their own (buffers, plans kept between
# calls); every other backend runs through its provider (ProviderRunner).
RUNNERS: PluginTable[Runner] = PluginTable(
    "runner", {"padded": PaddedRunner, "cublaslt": CublasLtRunner}
)


def make_runner(
    candidate: Candidate, problem: ProblemKey, *, device: Device, provider: Provider | None
) -> Runner:
    """Return the runner of `candidate` for `problem`; raise LookupError if none can run it."""
    if candidate.backend in RUNNERS:
        return RUNNERS.create(
            candidate.backend, candidate=candidate, problem=problem, device=device
        )
    if provider is None:
        raise LookupError(f"backend {candidate.backend!r} is not available on this host")
    return ProviderRunner(candidate=candidate, problem=problem, device=device, provider=provider)
