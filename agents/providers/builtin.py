"""Register every built-in provider, op and timer, and build providers with their settings."""

from __future__ import annotations

from typing import Any

from agents.ops import conv2d as _conv2d_op  # noqa: F401  (registers the op)
from agents.ops import gemm as _gemm_op  # noqa: F401  (registers the op)
from agents.ops import layernorm as _layernorm_op  # noqa: F401  (registers the op)
from agents.probe import cuda_timer as _cuda_timer  # noqa: F401  (registers the timer)
from agents.probe.settings import ProbeSettings
from agents.providers import conv as _conv  # noqa: F401
from agents.providers import cpu as _cpu  # noqa: F401
from agents.providers import cublaslt as _cublaslt  # noqa: F401
from agents.providers import layernorm as _layernorm  # noqa: F401
from agents.providers import padded as _padded  # noqa: F401
from agents.providers import triton_gemm as _triton  # noqa: F401
from agents.providers import tunableop as _tunableop  # noqa: F401
from agents.providers import vendor as _vendor  # noqa: F401
from agents.providers.base import PROVIDERS, Provider


def create(name: str, *, settings: ProbeSettings) -> Provider:
    """Build the provider registered as `name`, passing the settings it takes."""
    options: dict[str, dict[str, Any]] = {"cublaslt": {"limit": settings.cublaslt_limit}}
    return PROVIDERS.create(name, **options.get(name, {}))
