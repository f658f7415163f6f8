"""GPU providers end to end: cuBLASLt, Triton, padded, the engine, green contexts, ROCm."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm device", allow_module_level=True)

from agents.ops.gemm import GemmOp, gemm_operands  # noqa: E402
from agents.probe.device import open_device  # noqa: E402
from agents.probe.settings import ProbeSettings  # noqa: E402
from agents.providers.table import create_provider  # noqa: E402
from tests.gpu.conftest import NVMATH, needs_nvmath  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

pytestmark = pytest.mark.gpu
NVIDIA = torch.version.hip is None


def linear(m, n, k, dtype="bf16"):
    return ProblemKey(op="gemm", dtype=dtype, dims={"m": m, "n": n, "k": k}, trans_b=True)


def _check_all(provider_name, problem, limit=4):
    device = open_device("cuda")
    provider = create_provider(provider_name, settings=ProbeSettings())
    operands = gemm_operands(problem, device.torch_device, seed=1)
    cands = provider.candidates(problem, device, limit=limit, operands=operands)
    assert cands, f"{provider_name} offered nothing for {problem.canonical()}"
    op = GemmOp()
    for c in cands:
        kernel = provider.prepare(c, problem, operands, device)
        if kernel.poison:
            kernel.poison()
        check = op.check(problem, operands, kernel.run())
        assert check.ok, f"{c.label()}: {check.reason()}"
    return cands


@pytest.mark.skipif(not NVIDIA, reason="cuBLASLt is NVIDIA only")
@needs_nvmath
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32"])
def test_cublaslt_algorithms_are_enumerated_and_correct(dtype):
    cands = _check_all("cublaslt", linear(256, 1024, 512, dtype), limit=8)
    assert len(cands) >= 2
    assert len({c.id for c in cands}) == len(cands)
    assert all({"tile", "stages", "split_k", "algo_id"} <= set(c.params) for c in cands)


@pytest.mark.skipif(not NVIDIA, reason="cuBLASLt is NVIDIA only")
@needs_nvmath
def test_cublaslt_ids_do_not_depend_on_rank():
    first = _check_all("cublaslt", linear(512, 512, 512), limit=8)
    again = _check_all("cublaslt", linear(512, 512, 512), limit=8)
    assert {c.id for c in first} == {c.id for c in again}


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (1000, 1000, 1000), (4095, 513, 257)])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_triton_gemm_is_correct_on_odd_shapes(shape, dtype):
    _check_all("triton", linear(*shape, dtype=dtype), limit=2)


@pytest.mark.parametrize("split", [2, 4, 8])
@pytest.mark.parametrize("shape", [(1, 4096, 14336), (7, 1000, 3001), (33, 130, 257)])
def test_triton_split_k_sums_its_slices_exactly_once(shape, split):
    from agents.providers.triton_gemm import as_params
    from tps.candidate import Candidate

    problem = linear(*shape)
    device = open_device("cuda")
    provider = create_provider("triton", settings=ProbeSettings())
    operands = gemm_operands(problem, device.torch_device, seed=2)
    c = Candidate(backend="triton", params=as_params((16, 64, 128, 8, 4, 3), split))
    kernel = provider.prepare(c, problem, operands, device)
    kernel.poison()
    for _ in range(2):  # a second launch must not add to the first one's result
        out = kernel.run()
    check = GemmOp().check(problem, operands, out)
    assert check.ok, f"{c.label()}: {check.reason()}"


@pytest.mark.parametrize("split", [1, 4])
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (1, 1000, 3001), (5, 130, 257), (16, 64, 999)])
def test_triton_gemv_is_correct_and_idempotent(shape, split):
    from agents.providers.triton_gemm import GEMV_PARAMS
    from tps.candidate import Candidate

    problem = linear(*shape)
    device = open_device("cuda")
    provider = create_provider("triton", settings=ProbeSettings())
    operands = gemm_operands(problem, device.torch_device, seed=3)
    params = {**GEMV_PARAMS, **({"SPLIT_K": split} if split > 1 else {})}
    kernel = provider.prepare(Candidate(backend="triton", params=params), problem, operands, device)
    kernel.poison()
    for _ in range(2):
        out = kernel.run()
    check = GemmOp().check(problem, operands, out)
    assert check.ok, f"{params}: {check.reason()}"


def test_triton_handles_all_transposes_and_batches():
    for ta in (False, True):
        for tb in (False, True):
            p = ProblemKey(
                op="gemm",
                dtype="fp16",
                dims={"m": 96, "n": 80, "k": 72, "batch": 3},
                trans_a=ta,
                trans_b=tb,
            )
            _check_all("triton", p, limit=1)


def test_padded_is_correct_for_unaligned_shapes():
    _check_all("padded", linear(4095, 4095, 4095), limit=2)


def test_engine_probe_on_gpu_is_a_valid_run(engine):
    run = engine.probe(linear(2048, 2048, 128))
    backends = {m.candidate.backend for m in run.measurements}
    assert "vendor-default" in backends and len(run.measurements) <= 8
    assert run.winner_id is not None and run.compile_ms > 0
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]
    spec = engine.hardware()
    assert spec.compute_units > 0 and spec.l2_bytes > 0 and spec.torch_version


def test_engine_probe_unaligned_offers_padded(engine):
    run = engine.probe(linear(4095, 4095, 4095))
    assert "padded" in {m.candidate.backend for m in run.measurements}


@pytest.mark.skipif(not NVIDIA, reason="NVML is NVIDIA only")
def test_nvml_telemetry_reads_the_device():
    from agents.telemetry import default_source

    snap = default_source("nvidia").snapshot()
    assert snap.source == "nvml" and snap.temperature_c is not None
    assert snap.sm_clock_mhz is not None


GREEN = """
import json, sys, torch
from agents.probe.device import open_device
from agents.probe.hardware import detect_hardware
limit = int(sys.argv[1]) or None
dev = open_device("cuda", sm_limit=limit)
s = dev.stream or torch.cuda.current_stream()
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
with torch.cuda.stream(s):
    for _ in range(3): a @ b
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=dev.stream):
        for _ in range(5): a @ b
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(s); g.replay(); e1.record(s)
e1.synchronize()
spec = detect_hardware(dev)
print(json.dumps({
    "ms": e0.elapsed_time(e1) / 5,
    "unit_limit": spec.unit_limit,
    "limited_bandwidth_gbs": spec.limited_bandwidth_gbs,
    "usable_bandwidth_gbs": spec.usable_bandwidth_gbs,
    "fingerprint": spec.fingerprint(),
    "unmeasured": spec.model_copy(update={"limited_bandwidth_gbs": None}).fingerprint(),
}))
"""


@pytest.mark.skipif(not NVIDIA, reason="green contexts are CUDA only")
def test_green_context_limits_sms_one_context_per_process():
    def time_with(limit):
        out = subprocess.run(
            [sys.executable, "-c", GREEN, str(limit)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    full, limited = time_with(0), time_with(16)
    assert limited["unit_limit"] == 16 and full["unit_limit"] is None
    assert limited["ms"] > 3 * full["ms"], (full, limited)
    # the limit's own bandwidth is measured, and it names no other configuration
    assert full["limited_bandwidth_gbs"] is None
    assert 0 < limited["limited_bandwidth_gbs"] < full["usable_bandwidth_gbs"], (full, limited)
    assert limited["fingerprint"] == limited["unmeasured"] != full["fingerprint"]


@pytest.mark.skipif(NVIDIA, reason="hipBLASLt and rocBLAS run on ROCm hosts only")
def test_tunableop_solutions_on_rocm():
    _check_all("hipblaslt", linear(1024, 1024, 1024), limit=1)


@pytest.fixture(scope="module")
def cold_engine(tmp_path_factory):
    from agents.probe.assemble import build_engine

    return build_engine(
        device="cuda",
        host_id="0123456789abcdef",
        bans_path=tmp_path_factory.mktemp("cold") / "bans.json",
        settings=ProbeSettings(cold_cache=True),
    )


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (4095, 4095, 4095)])
def test_cold_cache_probe_rotates_copies_through_every_provider(cold_engine, shape):
    run = cold_engine.probe(linear(*shape))
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]
    assert "operand copies in rotation" in run.rationale
    backends = {m.candidate.backend for m in run.measurements}
    # the vendor's default and Triton, and cuBLASLt where nvmath-python is installed
    assert "vendor-default" in backends and len(backends) >= (3 if NVMATH or not NVIDIA else 2)


def test_cold_cache_reads_from_memory_what_warm_reads_from_the_l2(cold_engine, engine):
    # 16x4096x4096 bf16: B (32 MiB) fits the H200's 60 MiB L2 warm; cold, it comes from HBM.
    problem = linear(16, 4096, 4096)
    cold = cold_engine.probe(problem, only=[]).measurements[0].median_us
    warm = engine.probe(problem, only=[]).measurements[0].median_us
    assert cold > 1.03 * warm, (cold, warm)  # 1.06-1.18x measured on the H200
