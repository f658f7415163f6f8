"""hipblaslt / rocblas: the solutions PyTorch TunableOp finds on ROCm, run through TunableOp.

TunableOp reports only the solution it chose for a problem, so each backend offers at most
that one; running it means loading a one-line results file and calling torch.matmul with
tuning off. On CUDA builds TunableOp knows only `Default`, so these backends are ROCm-only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from agents.tunableop_csv import TunableFile, TunableResult, solution_backend, write_file
from tps.candidate import Candidate
from tps.problem import ProblemKey


def find_solution(results: list[Any], problem: ProblemKey) -> TunableResult | None:
    """Return TunableOp's chosen solution for `problem` among get_results() tuples."""
    op_sig, params_sig = problem.tunableop_signature()
    for row in results:
        r = TunableResult(
            str(row[0]),
            str(row[1]),
            str(row[2]),
            float(row[3]) if len(row) > 3 and row[3] not in ("", None) else None,
        )
        if r.op_signature == op_sig and r.params_signature.startswith(params_sig):
            return r
    return None


class TunableOpProvider:
    ops = frozenset({"gemm"})

    def __init__(self, backend: str, tunable: Any = None, workdir: Path | None = None) -> None:
        self.backend = backend
        self._tunable = tunable
        self.workdir = workdir

    @property
    def tunable(self) -> Any:
        if self._tunable is None:
            import torch.cuda.tunable as tunable

            self._tunable = tunable
        return self._tunable

    def available(self, device: Device) -> bool:
        return device.is_rocm

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if operands is None or limit <= 0 or problem.batch > 1:
            return []
        import torch

        t = self.tunable
        was_enabled, was_tuning = t.is_enabled(), t.tuning_is_enabled()
        t.enable(True)
        t.tuning_enable(True)
        try:
            torch.matmul(operands.a, operands.b)
            torch.cuda.synchronize()
            found = find_solution(list(t.get_results()), problem)
        finally:
            t.tuning_enable(was_tuning)
            t.enable(was_enabled)
        if found is None or solution_backend(found.solution) != self.backend:
            return []
        return [Candidate(backend=self.backend, params={"solution": found.solution})]

    def results_file(self, problem: ProblemKey, solution: str) -> Path:
        """Write the one-line results file that makes TunableOp run `solution`."""
        op_sig, params_sig = problem.tunableop_signature()
        validators = dict(self.tunable.get_validators())
        folder = self.workdir or Path(tempfile.mkdtemp(prefix="tps-tunableop-"))
        path = folder / f"{problem.key_hash()}_{self.backend}.csv"
        write_file(
            path,
            TunableFile(
                validators=validators, results=[TunableResult(op_sig, params_sig, solution, None)]
            ),
        )
        return path

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        solution = str(candidate.params.get("solution") or "")
        if solution_backend(solution) != self.backend:
            raise CandidateError(f"{solution!r} is not a {self.backend} solution")
        t = self.tunable
        if not t.read_file(str(self.results_file(problem, solution))):
            raise CandidateError("TunableOp rejected the results file (validators differ?)")
        a, b = operands.a, operands.b

        def run() -> Any:
            was_enabled, was_tuning = t.is_enabled(), t.tuning_is_enabled()
            t.enable(True)
            t.tuning_enable(False)
            try:
                return torch.matmul(a, b)
            finally:
                t.tuning_enable(was_tuning)
                t.enable(was_enabled)

        return Kernel(candidate=candidate, run=run)
