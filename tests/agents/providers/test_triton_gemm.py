"""Triton GEMM configurations, without a GPU."""

from agents.providers.triton_gemm import CONFIGS, fit, smem_bytes


def test_triton_configs_shrink_to_fit_shared_memory():
    for configs in CONFIGS.values():
        for cfg in configs:
            assert smem_bytes(fit(cfg[:6], "fp32", 232_448), "fp32") <= 232_448
