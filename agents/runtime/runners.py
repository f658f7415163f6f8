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
        b_dst.copy_(b)
        mm = torch.bmm if a_pad.dim() == 3 else torch.mm
        return mm(a_pad, b_pad)[..., : self.m, : self.n]

    def out_strides(self) -> tuple[int, ...]:
        """Return the strides of the outputs: rows of the padded N."""
        if self.problem.batch > 1:
            return (self.mp * self.np_, self.np_, 1)
        return (self.np_, 1)


class CublasLtRunner:
    """One nvmath Matmul planned on the first call's tensors, rebound to each call's tensors."""

    def __init__(self, *, candidate: Candidate, problem: ProblemKey, **_: Any) -> None:
        self.candidate = candidate
        self.problem = problem
        self._matmul: Any = None
        self._algorithm: Any = None

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

    def __call__(self, a: Any, b: Any) -> Any:
        import torch

        if self._matmul is None:
            self._plan(a, b)
        else:
            self._matmul.reset_operands(a=a, b=b)
        return self._matmul.execute(algorithm=self._algorithm, stream=torch.cuda.current_stream())


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
