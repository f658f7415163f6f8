"""The padded provider: offered off the aligned grid, correct, its copies counted."""

from agents.ops.gemm import GemmOp, gemm_operands
from agents.probe.device import Device
from agents.providers.padded import PaddedProvider, is_aligned
from tps.candidate import Candidate
from tps.problem import ProblemKey


def test_padded_candidate_is_correct_and_counts_its_copies():
    problem = ProblemKey(op="gemm", dtype="fp32", dims={"m": 33, "n": 17, "k": 13}, trans_b=True)
    assert not is_aligned(problem)
    operands = gemm_operands(problem, "cpu", seed=3)
    kernel = PaddedProvider().prepare(
        Candidate(backend="padded", params={"align": 8, "inner": "vendor-default"}),
        problem,
        operands,
        Device(kind="cpu"),
    )
    assert GemmOp().check(problem, operands, kernel.run()).ok
    assert kernel.copy_bytes == (33 * 13 + 13 * 17) * 4


def test_aligned_problems_get_no_padded_candidate():
    problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": 64, "n": 64, "k": 64})
    assert PaddedProvider().candidates(problem, Device(kind="cuda"), limit=2) == []


def test_fp8_gets_padded_candidates_only_off_its_grid_or_layout():
    def fp8(m, n, k, **kw):
        return ProblemKey(op="gemm", dtype="fp8_e4m3", dims={"m": m, "n": n, "k": k}, **kw)

    gpu = Device(kind="cuda")
    assert PaddedProvider().candidates(fp8(64, 4096, 4096, trans_b=True), gpu, limit=2) == []
    for problem in (
        fp8(1000, 1000, 1024, trans_b=True),
        fp8(64, 4096, 4096),
        fp8(64, 64, 64, trans_a=True, trans_b=True),
    ):
        offered = PaddedProvider().candidates(problem, gpu, limit=2)
        assert [c.params["align"] for c in offered] == [16, 64], problem.canonical()
    assert (
        PaddedProvider().candidates(
            ProblemKey(op="gemm", dtype="fp8_e4m3", dims={"m": 8, "n": 8, "k": 8, "batch": 2}),
            gpu,
            limit=2,
        )
        == []
    )
