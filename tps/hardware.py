"""Hardware specs: what a device is, as far as kernel speed is concerned."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Vendor = Literal["nvidia", "amd", "intel", "cpu"]

# Fields that identify software, not hardware: they never change the fingerprint.
SOFTWARE_FIELDS = frozenset({"driver_version", "blas_version", "torch_version"})


class HardwareSpec(BaseModel):
    """A device described by its spec, never by its host's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vendor: Vendor
    arch: str = Field(min_length=1, max_length=32, description="sm_90, gfx942, x86_64-avx512, ...")
    name: str = Field(min_length=1, max_length=128, description="product name, e.g. NVIDIA H200")
    compute_units: int = Field(gt=0, description="SMs, CUs or CPU cores in use")
    l2_bytes: int = Field(ge=0)
    mem_bandwidth_gbs: float = Field(gt=0)
    memory_bytes: int | None = Field(default=None, ge=0)
    peak_tflops: dict[str, float] = Field(default_factory=dict, description="per dtype, dense")
    clock_mhz: float | None = Field(default=None, gt=0)
    warp_size: int | None = Field(default=None, gt=0)
    smem_per_unit_bytes: int | None = Field(default=None, ge=0)
    # Green contexts and CPU thread limits give distinct configurations of one device.
    unit_limit: int | None = Field(default=None, gt=0)
    driver_version: str | None = Field(default=None, max_length=64)
    blas_version: str | None = Field(default=None, max_length=64)
    torch_version: str | None = Field(default=None, max_length=64)

    def fingerprint(self) -> str:
        """Return a stable hash of the hardware fields (software versions excluded)."""
        body = self.model_dump(mode="json", exclude=set(SOFTWARE_FIELDS))
        payload = json.dumps(body, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def active_units(self) -> int:
        """Return the compute units the work may use (the limit, when one is set)."""
        return min(self.unit_limit or self.compute_units, self.compute_units)

    def software_key(self) -> str:
        """Return the versions that invalidate cached choices when they change."""
        return "|".join(f"{name}={getattr(self, name) or ''}" for name in sorted(SOFTWARE_FIELDS))
