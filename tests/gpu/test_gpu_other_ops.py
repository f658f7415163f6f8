"""conv2d (cuDNN benchmark mode, channels_last, im2col), Triton layernorm and fp8 GEMM on a GPU.

The providers set cuDNN's TF32 flag from the problem's dtype: fp32 conv2d once failed
validation on the H200 because cuDNN ran it in TF32.
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm device", allow_module_level=True)

from tests.gpu.conftest import needs_nvmath  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_conv2d_on_gpu(engine, dtype):
    dims = {"n": 8, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "pad": 1}
    run = engine.probe(ProblemKey(op="conv2d", dtype=dtype, dims=dims))
    assert {"vendor-default", "torch-conv", "im2col"} <= {
        m.candidate.backend for m in run.measurements
    }
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]


@pytest.mark.parametrize("cols", [768, 4096, 5000])
def test_triton_layernorm_on_gpu(engine, cols):
    run = engine.probe(ProblemKey(op="layernorm", dtype="bf16", dims={"rows": 4096, "cols": cols}))
    assert "triton" in {m.candidate.backend for m in run.measurements}
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]


@pytest.mark.skipif(
    torch.version.hip is not None or torch.cuda.get_device_capability() < (8, 9),
    reason="fp8 GEMM needs an NVIDIA GPU of compute capability 8.9 or newer",
)
@pytest.mark.parametrize("shape", [(64, 4096, 4096), (4000, 4000, 4000)])
@needs_nvmath
def test_fp8_gemm_default_and_cublaslt_are_valid(engine, shape):
    m, n, k = shape
    run = engine.probe(
        ProblemKey(op="gemm", dtype="fp8_e4m3", dims={"m": m, "n": n, "k": k}, trans_b=True)
    )
    backends = {m.candidate.backend for m in run.measurements if m.valid}
    assert {"vendor-default", "cublaslt"} <= backends, [m.error for m in run.measurements]


@pytest.mark.skipif(
    torch.version.hip is not None or torch.cuda.get_device_capability() < (8, 9),
    reason="fp8 GEMM needs an NVIDIA GPU of compute capability 8.9 or newer",
)
@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (False, False), (True, True)])
def test_fp8_gemm_off_the_16_grid_or_layout_runs_padded(engine, trans_a, trans_b):
    problem = ProblemKey(
        op="gemm",
        dtype="fp8_e4m3",
        dims={"m": 1000, "n": 1000, "k": 1000},
        trans_a=trans_a,
        trans_b=trans_b,
    )
    run = engine.probe(problem)
    default, *rest = run.measurements
    assert not default.valid and default.error  # torch._scaled_mm refuses it, by name
    padded = [m for m in rest if m.candidate.backend == "padded"]
    assert padded and all(m.valid for m in padded), [m.error for m in rest]
    assert run.winner_id in {m.candidate.id for m in padded}
