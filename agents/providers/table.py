"""Every candidate provider the agent has, by name, and the set each vendor starts with."""

from __future__ import annotations

from functools import partial
from typing import Any

from agents.plugins import PluginTable
from agents.probe.settings import ProbeSettings
from agents.providers.base import Provider
from agents.providers.conv import Im2colProvider, TorchConvProvider, conv2d_default
from agents.providers.cpu import CpuNumpyProvider, CpuTorchProvider
from agents.providers.cublaslt import CublasLtProvider
from agents.providers.layernorm import CompositeLayerNormProvider, layernorm_default
from agents.providers.padded import PaddedProvider
from agents.providers.triton_gemm import TritonGemmProvider
from agents.providers.tunableop import TunableOpProvider
from agents.providers.vendor import DefaultRunner, VendorDefaultProvider, gemm_default

# The framework's own call per op: what vendor-default runs.
DEFAULT_RUNNERS: dict[str, DefaultRunner] = {
    "gemm": gemm_default,
    "conv2d": conv2d_default,
    "layernorm": layernorm_default,
}

PROVIDERS: PluginTable[Provider] = PluginTable(
    "candidate provider",
    {
        "vendor-default": partial(VendorDefaultProvider, DEFAULT_RUNNERS),
        "padded": PaddedProvider,
        "cublaslt": CublasLtProvider,
        "hipblaslt": partial(TunableOpProvider, "hipblaslt"),
        "rocblas": partial(TunableOpProvider, "rocblas"),
        "triton": TritonGemmProvider,
        "cpu-torch": CpuTorchProvider,
        "cpu-numpy": CpuNumpyProvider,
        "torch-conv": TorchConvProvider,
        "im2col": Im2colProvider,
        "layernorm-composite": CompositeLayerNormProvider,
    },
)

# The providers an engine gets on each vendor's device unless told otherwise.
VENDOR_PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": (
        "vendor-default",
        "cpu-torch",
        "cpu-numpy",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
    "nvidia": (
        "vendor-default",
        "padded",
        "cublaslt",
        "triton",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
    "amd": (
        "vendor-default",
        "padded",
        "hipblaslt",
        "triton",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
}


def create_provider(name: str, *, settings: ProbeSettings) -> Provider:
    """Build the provider listed as `name`, passing the settings it takes."""
    options: dict[str, dict[str, Any]] = {"cublaslt": {"limit": settings.cublaslt_limit}}
    return PROVIDERS.create(name, **options.get(name, {}))
