"""Provider plumbing that runs on the CPU: padding, TunableOp parsing, cuBLASLt ordering."""

import torch

from agents.ops.gemm import GemmOp, gemm_operands
from agents.probe.device import Device
from agents.providers.cublaslt import _plain, diversify
from agents.providers.padded import PaddedProvider, is_aligned
from agents.providers.triton_gemm import CONFIGS, fit, smem_bytes
from agents.providers.tunableop import TunableOpProvider, find_solution
from agents.tunableop_csv import read_file
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


def test_cublaslt_short_list_tries_one_of_each_kind_first():
    ranked = [
        {"algo_id": 66, "tile": "64x8", "split_k": 1},
        {"algo_id": 66, "tile": "64x8", "split_k": 1, "stages": "x"},
        {"algo_id": 66, "tile": "64x8", "split_k": 4},
        {"algo_id": 21, "tile": "128x128", "split_k": 1},
    ]
    order = diversify(ranked)
    assert order[:3] == [ranked[0], ranked[2], ranked[3]] and order[3] == ranked[1]
    assert _plain((1, 2, 1)) == "1x2x1" and _plain(True) is True


def test_triton_configs_shrink_to_fit_shared_memory():
    for configs in CONFIGS.values():
        for cfg in configs:
            assert smem_bytes(fit(cfg[:6], "fp32", 232_448), "fp32") <= 232_448


class RecordingTunable:
    """Stands for torch.cuda.tunable on a host without ROCm."""

    def __init__(self, results):
        self.results, self.read = results, []
        self.enabled = self.tuning = False

    def get_results(self):
        return self.results

    def get_validators(self):
        return [("PT_VERSION", "2.11.0"), ("HIPBLASLT_VERSION", "0.12")]

    def read_file(self, path):
        self.read.append(path)
        return True

    def is_enabled(self):
        return self.enabled

    def tuning_is_enabled(self):
        return self.tuning

    def enable(self, value):
        self.enabled = value

    def tuning_enable(self, value):
        self.tuning = value


def test_tunableop_solution_lookup_and_results_file(tmp_path):
    problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": 64, "n": 128, "k": 32}, trans_b=True)
    op_sig, params_sig = problem.tunableop_signature()
    results = [
        ("GemmTunableOp_Half_NN", "nn_1_2_3", "Default", 0.1),
        (op_sig, params_sig, "Gemm_Hipblaslt_4242", 0.02),
    ]
    assert find_solution(results, problem).solution == "Gemm_Hipblaslt_4242"
    tunable = RecordingTunable(results)
    provider = TunableOpProvider("hipblaslt", tunable=tunable, workdir=tmp_path)
    operands = gemm_operands(problem, "cpu", seed=0)
    kernel = provider.prepare(
        Candidate(backend="hipblaslt", params={"solution": "Gemm_Hipblaslt_4242"}),
        problem,
        operands,
        Device(kind="cpu"),
    )
    written = read_file(tunable.read[0])
    assert written.validators == {"PT_VERSION": "2.11.0", "HIPBLASLT_VERSION": "0.12"}
    assert [(r.op_signature, r.solution) for r in written.results] == [
        (op_sig, "Gemm_Hipblaslt_4242")
    ]
    out = kernel.run()
    assert torch.allclose(out.float(), (operands.a.float() @ operands.b.float()), atol=0.5)
    assert not tunable.enabled  # the global switch is restored after each launch
    assert not provider.available(Device(kind="cpu"))
