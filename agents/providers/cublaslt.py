"""cublaslt: the cuBLASLt heuristic algorithms, enumerated and run through nvmath-python.

A candidate's params are the algorithm's own attributes (kernel id, tile, stages, split-K,
reduction scheme, swizzle, cluster shape), never its heuristic rank, so an id means the
same algorithm on every host. Planning (the heuristic query) is reported as compile time.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import Candidate
from tps.problem import ProblemKey

log = logging.getLogger(__name__)
NVMATH_LOG = logging.getLogger("agents.providers.nvmath")
NVMATH_LOG.setLevel(logging.WARNING)
NVMATH_LOG.propagate = False

DTYPES = frozenset({"bf16", "fp16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2"})
ALGO_FIELDS = {
    "algo_id": "algorithm_id",
    "tile": "tile",
    "stages": "stages",
    "split_k": "split_k",
    "reduction": "reduction_scheme",
    "swizzle": "cta_swizzling",
    "custom": "custom_option",
    "cluster": "cluster_shape",
}


def _plain(value: Any) -> int | str | bool | None:
    """Turn nvmath's enums and tuples into JSON scalars that hash the same everywhere."""
    if value is None or isinstance(value, bool | int):
        name = getattr(value, "name", None)  # an IntEnum
        return value if name is None else str(name)
    if isinstance(value, tuple | list):
        return "x".join(str(_plain(v)) for v in value)
    name = getattr(value, "name", None)
    return str(name) if name is not None else str(value)


def algorithm_params(algorithm: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, attr in ALGO_FIELDS.items():
        try:
            params[key] = _plain(getattr(algorithm, attr))
        except Exception:  # an attribute this cuBLASLt build does not report
            params[key] = None
    return params


def diversify(ranked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep heuristic order, but put the best of each (kernel, tile, split-K kind) first.

    Heuristics rank for the common case and fill their top places with near-identical
    variants of one tile; a short list should instead try one of each kind, and split-K,
    where skinny and deep-K problems win, must not fall off its end.
    """

    def kind(p: dict[str, Any]) -> tuple[Any, ...]:
        return (p.get("algo_id"), p.get("tile"), (p.get("split_k") or 1) > 1)

    firsts: dict[tuple[Any, ...], int] = {}
    for i, p in enumerate(ranked):
        firsts.setdefault(kind(p), i)
    lead = sorted(firsts.values())
    rest = [i for i in range(len(ranked)) if i not in set(lead)]
    return [ranked[i] for i in lead + rest]


class _Plan:
    def __init__(self, matmul: Any, algorithms: list[Any], operands: Any) -> None:
        self.matmul = matmul
        self.operands = operands
        self.by_id = {
            Candidate(backend="cublaslt", params=algorithm_params(a)).id: a for a in algorithms
        }
        self.ranked = [algorithm_params(a) for a in algorithms]


class CublasLtProvider:
    backend = "cublaslt"
    ops = frozenset({"gemm"})

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        # Per problem, one plan per operand set in use (cold-cache timing rotates copies).
        self._plans: dict[str, list[_Plan]] = {}
        # nvmath's free() after graph capture raised CUDA_ERROR_INVALID_VALUE on the H200;
        # plans whose free fails are parked here rather than leaked mid-use.
        self._parked: list[Any] = []
        self._said_unavailable = False

    def available(self, device: Device) -> bool:
        if not device.is_gpu or device.is_rocm:
            return False
        try:
            import nvmath  # noqa: F401
        except Exception as exc:
            if not self._said_unavailable:
                self._said_unavailable = True
                log.warning(
                    "cublaslt: nvmath-python cannot be imported (%s); probing without "
                    "cuBLASLt's algorithms. Install it with: pip install 'tps[nvidia]'",
                    exc,
                )
            return False
        return True

    def supports(self, problem: ProblemKey, operands: Any = None) -> bool:
        return (
            problem.dtype in DTYPES
            and problem.ldc is None
            and problem.stride_c is None
            and not (problem.dtype.startswith("fp8") and problem.batch > 1)
        )

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if operands is None or not self.supports(problem):
            return []
        # A new probe of this problem: plans bound to an earlier probe's operands are done.
        key = problem.key_hash()
        for stale in [p for p in self._plans.get(key, []) if p.operands is not operands]:
            self._retire(key, stale)
        plan = self._plan(problem, operands)
        unique: dict[str, dict[str, Any]] = {}
        for p in plan.ranked:
            unique.setdefault(Candidate(backend=self.backend, params=p).id, p)
        ranked = diversify(list(unique.values()))
        return [Candidate(backend=self.backend, params=p) for p in ranked[:limit]]

    def _plan(self, problem: ProblemKey, operands: Any) -> _Plan:
        # One plan per problem and operand set, bound to the very operands it was planned on.
        key = problem.key_hash()
        for plan in self._plans.get(key, []):
            if plan.operands is operands:
                return plan
        import torch
        from nvmath.linalg import ComputeType
        from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences

        # nvmath logs every phase at INFO on the root logger unless given its own.
        options: dict[str, Any] = {"logger": NVMATH_LOG}
        kwargs: dict[str, Any] = {}
        if problem.dtype == "tf32":
            options["compute_type"] = ComputeType.COMPUTE_32F_FAST_TF32
        elif problem.dtype == "fp32":
            options["compute_type"] = ComputeType.COMPUTE_32F
        elif problem.dtype.startswith("fp8"):
            from nvmath import CudaDataType

            options["result_type"] = CudaDataType.CUDA_R_16BF
            kwargs["quantization_scales"] = {"a": 1.0, "b": 1.0}
        stream = torch.cuda.current_stream()
        try:
            mm = Matmul(operands.a, operands.b, options=options, stream=stream, **kwargs)
            algorithms = mm.plan(preferences=MatmulPlanPreferences(limit=self.limit), stream=stream)
        except Exception as exc:
            raise CandidateError(f"cuBLASLt cannot plan {problem.canonical()}: {exc}") from exc
        plan = _Plan(mm, list(algorithms), operands)
        self._plans.setdefault(key, []).append(plan)
        return plan

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        if not self.supports(problem):
            raise CandidateError(f"cublaslt does not take {problem.canonical()}")
        plan = self._plan(problem, operands)
        algorithm = plan.by_id.get(candidate.id)
        if algorithm is None:
            raise CandidateError("cuBLASLt heuristics do not offer this algorithm here")
        mm = plan.matmul
        key = problem.key_hash()

        def run() -> Any:
            return mm.execute(algorithm=algorithm, stream=torch.cuda.current_stream())

        return Kernel(
            candidate=candidate, run=run, keepalive=[mm], close=lambda: self._retire(key, plan)
        )

    def _retire(self, key: str, plan: _Plan) -> None:
        plans = self._plans.get(key, [])
        if plan not in plans:
            return  # another kernel of the same plan retired it already
        plans.remove(plan)
        if not plans:
            del self._plans[key]
        mm = plan.matmul
        plan.operands = None
        try:
            mm.release_operands()
            mm.last_compute_event = None  # recorded during capture; invalid to wait on
            mm.free()
        except Exception as exc:
            log.debug("parking a cuBLASLt plan whose free() failed: %s", exc)
            self._parked.append(mm)
