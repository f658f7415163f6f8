"""TunableOp-backed providers: solution lookup and the results file."""

import torch

from agents.ops.gemm import gemm_operands
from agents.probe.device import Device
from agents.providers.tunableop import TunableOpProvider, find_solution
from agents.tunableop_csv import read_file
from tps.candidate import Candidate
from tps.problem import ProblemKey


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
