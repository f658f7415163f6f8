"""Hardware specs: what a device is, as far as kernel speed is concerned."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from tps.bounds import NO_NUL, Key, NotText

Vendor = Literal["nvidia", "amd", "intel", "cpu"]

# Fields that identify software, not hardware: they never change the fingerprint.
SOFTWARE_FIELDS = frozenset({"driver_version", "blas_version", "torch_version"})
# Fields measured on the host, which wander from one measurement to the next: they describe the
# configuration but never change its fingerprint.
MEASURED_FIELDS = frozenset({"limited_bandwidth_gbs"})

MAX_UNITS = 1_000_000
MAX_BYTES = 2**50  # a pebibyte: far above any device, far below a bigint
Tflops = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False, strict=True)]


class HardwareSpec(BaseModel):
    """A device described by its spec, never by its host's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vendor: Vendor
    arch: str = Field(
        min_length=1, max_length=32, pattern=NO_NUL, description="sm_90, gfx942, x86_64-avx512, ..."
    )
    name: str = Field(
        min_length=1, max_length=128, pattern=NO_NUL, description="product name, e.g. NVIDIA H200"
    )
    compute_units: Annotated[int, NotText] = Field(
        gt=0, le=MAX_UNITS, description="SMs, CUs or cores"
    )
    l2_bytes: Annotated[int, NotText] = Field(ge=0, le=MAX_BYTES)
    mem_bandwidth_gbs: float = Field(gt=0, le=1e6, allow_inf_nan=False, strict=True)
    memory_bytes: Annotated[int, Field(ge=0, le=MAX_BYTES), NotText] | None = None
    peak_tflops: dict[Key, Tflops] = Field(
        default_factory=dict,
        max_length=16,
        description="per dtype, dense",
        json_schema_extra={"additionalProperties": False},
    )
    clock_mhz: float | None = Field(default=None, gt=0, le=1e5, allow_inf_nan=False, strict=True)
    warp_size: Annotated[int, Field(gt=0, le=1024), NotText] | None = None
    smem_per_unit_bytes: Annotated[int, Field(ge=0, le=MAX_BYTES), NotText] | None = None
    # Green contexts and CPU thread limits give distinct configurations of one device.
    unit_limit: Annotated[int, Field(gt=0, le=MAX_UNITS), NotText] | None = None
    # Memory bandwidth is not shared out by units: on an H200, 16 of 132 SMs copy at about a
    # third of the whole chip's rate, not an eighth. The agent measures it under the limit.
    limited_bandwidth_gbs: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        strict=True,
        description="copy bandwidth measured with unit_limit in force (GB/s)",
    )
    driver_version: str | None = Field(default=None, max_length=64, pattern=NO_NUL)
    blas_version: str | None = Field(default=None, max_length=64, pattern=NO_NUL)
    torch_version: str | None = Field(default=None, max_length=64, pattern=NO_NUL)

    def fingerprint(self) -> str:
        """Return a stable hash of the hardware fields (software versions and measured
        fields excluded)."""
        body = self.model_dump(mode="json", exclude=set(SOFTWARE_FIELDS | MEASURED_FIELDS))
        payload = json.dumps(body, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def active_units(self) -> int:
        """Return the compute units the work may use (the limit, when one is set)."""
        return min(self.unit_limit or self.compute_units, self.compute_units)

    @property
    def usable_bandwidth_gbs(self) -> float:
        """Return the memory bandwidth the units in use get: measured under the limit, when it
        was, else the whole device's shared out by units."""
        return self.usable_bandwidth_of(self.mem_bandwidth_gbs)

    def usable_bandwidth_of(self, whole_gbs: float) -> float:
        """Return what the units in use get of a whole device's bandwidth of `whole_gbs`."""
        if self.unit_limit is None or self.active_units >= self.compute_units:
            return whole_gbs
        if self.limited_bandwidth_gbs is not None:
            return min(self.limited_bandwidth_gbs, whole_gbs)
        return whole_gbs * self.active_units / self.compute_units

    def software_key(self) -> str:
        """Return the versions that invalidate cached choices when they change."""
        return "|".join(f"{name}={getattr(self, name) or ''}" for name in sorted(SOFTWARE_FIELDS))
