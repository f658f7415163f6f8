"""Public datasheet figures for hardware known only by name.

Figures are the vendors' published boost-clock numbers: dense (no sparsity) peak TFLOP/s,
FP16/BF16 from the matrix units with FP32 accumulation where the vendor publishes that figure.
AMD RDNA parts also have a large Infinity Cache behind the L2; `l2_bytes` holds the L2 only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from tps.errors import TPSError
from tps.hardware import SOFTWARE_FIELDS, HardwareSpec

MB = 1024 * 1024
GB = 1024 * MB


class UnknownHardwareError(TPSError):
    """A device name that the catalog cannot resolve."""


def _spec(
    name: str,
    *,
    vendor: str,
    arch: str,
    units: int,
    l2_mb: float,
    bw: float,
    mem_gb: int,
    fp32: float,
    fp16: float,
    bf16: float | None,
    clock: float,
    smem_kb: int,
) -> HardwareSpec:
    peaks = {"fp32": fp32, "fp16": fp16}
    if bf16 is not None:
        peaks["bf16"] = bf16
    return HardwareSpec(
        vendor=vendor,
        arch=arch,
        name=name,
        compute_units=units,
        l2_bytes=int(l2_mb * MB),
        mem_bandwidth_gbs=bw,
        memory_bytes=mem_gb * GB,
        peak_tflops=peaks,
        clock_mhz=clock,
        # HIP compiles RDNA (gfx10xx/gfx11xx) for wave32 and CDNA/GCN for wave64.
        warp_size=32 if vendor == "nvidia" or arch.startswith(("gfx10", "gfx11")) else 64,
        smem_per_unit_bytes=smem_kb * 1024,
    )


def _nv(name: str, arch: str, **kw: Any) -> HardwareSpec:
    return _spec(name, vendor="nvidia", arch=arch, **kw)


def _amd(name: str, arch: str, **kw: Any) -> HardwareSpec:
    return _spec(name, vendor="amd", arch=arch, **kw)


# (spec, aliases). Aliases are matched after normalisation (see `normalise_name`).
# fmt: off
_ENTRIES: list[tuple[HardwareSpec, tuple[str, ...]]] = [
    (
        _nv("NVIDIA H100 SXM5 80GB", "sm_90", units=132, l2_mb=50, bw=3350, mem_gb=80,
            fp32=66.9, fp16=989.4, bf16=989.4, clock=1980, smem_kb=228),
        ("h100", "h100sxm", "h100sxm5", "h10080gbhbm3", "h100sxm580gb"),
    ),
    (
        _nv("NVIDIA H100 PCIe 80GB", "sm_90", units=114, l2_mb=50, bw=2000, mem_gb=80,
            fp32=51.2, fp16=756.5, bf16=756.5, clock=1755, smem_kb=228),
        ("h100pcie", "h100pcie80gb"),
    ),
    (
        _nv("NVIDIA H200", "sm_90", units=132, l2_mb=50, bw=4800, mem_gb=141,
            fp32=66.9, fp16=989.4, bf16=989.4, clock=1980, smem_kb=228),
        ("h200", "h200sxm", "h200141gbhbm3e", "h200nvl"),
    ),
    (
        _nv("NVIDIA A100 PCIe 40GB", "sm_80", units=108, l2_mb=40, bw=1555, mem_gb=40,
            fp32=19.5, fp16=312, bf16=312, clock=1410, smem_kb=164),
        ("a100", "a100pcie", "a100pcie40gb", "a10040gbpcie"),
    ),
    (
        _nv("NVIDIA A100 PCIe 80GB", "sm_80", units=108, l2_mb=40, bw=1935, mem_gb=80,
            fp32=19.5, fp16=312, bf16=312, clock=1410, smem_kb=164),
        ("a100pcie80gb", "a10080gbpcie"),
    ),
    (
        _nv("NVIDIA A100 SXM4 40GB", "sm_80", units=108, l2_mb=40, bw=1555, mem_gb=40,
            fp32=19.5, fp16=312, bf16=312, clock=1410, smem_kb=164),
        ("a100sxm", "a100sxm440gb", "a100sxm40gb"),
    ),
    (
        _nv("NVIDIA A100 SXM4 80GB", "sm_80", units=108, l2_mb=40, bw=2039, mem_gb=80,
            fp32=19.5, fp16=312, bf16=312, clock=1410, smem_kb=164),
        ("a100sxm480gb", "a100sxm80gb", "a10080gb"),
    ),
    (
        _nv("NVIDIA RTX A4000", "sm_86", units=48, l2_mb=4, bw=448, mem_gb=16,
            fp32=19.2, fp16=76.7, bf16=76.7, clock=1560, smem_kb=100),
        ("a4000", "rtxa4000"),
    ),
    (
        _nv("NVIDIA RTX A6000", "sm_86", units=84, l2_mb=6, bw=768, mem_gb=48,
            fp32=38.7, fp16=154.8, bf16=154.8, clock=1800, smem_kb=100),
        ("a6000", "rtxa6000"),
    ),
    (
        _nv("NVIDIA L40S", "sm_89", units=142, l2_mb=96, bw=864, mem_gb=48,
            fp32=91.6, fp16=362.1, bf16=362.1, clock=2520, smem_kb=100),
        ("l40s",),
    ),
    (
        _nv("NVIDIA V100 SXM2 32GB", "sm_70", units=80, l2_mb=6, bw=900, mem_gb=32,
            fp32=15.7, fp16=125, bf16=None, clock=1530, smem_kb=96),
        ("v100", "v100sxm2", "v100sxm232gb", "v100sxm216gb"),
    ),
    (
        _nv("NVIDIA V100 PCIe 32GB", "sm_70", units=80, l2_mb=6, bw=900, mem_gb=32,
            fp32=14.0, fp16=112, bf16=None, clock=1380, smem_kb=96),
        ("v100pcie", "v100pcie32gb", "v100pcie16gb"),
    ),
    (
        _nv("NVIDIA T4", "sm_75", units=40, l2_mb=4, bw=320, mem_gb=16,
            fp32=8.1, fp16=65, bf16=None, clock=1590, smem_kb=64),
        ("t4", "teslat4"),
    ),
    (
        _nv("NVIDIA GeForce RTX 2080 Ti", "sm_75", units=68, l2_mb=5.5, bw=616, mem_gb=11,
            fp32=13.4, fp16=53.8, bf16=None, clock=1545, smem_kb=64),
        ("rtx2080ti", "2080ti"),
    ),
    (
        _nv("NVIDIA GeForce RTX 3090", "sm_86", units=82, l2_mb=6, bw=936, mem_gb=24,
            fp32=35.6, fp16=71, bf16=71, clock=1695, smem_kb=100),
        ("rtx3090", "3090"),
    ),
    (
        _nv("NVIDIA TITAN RTX", "sm_75", units=72, l2_mb=6, bw=672, mem_gb=24,
            fp32=16.3, fp16=130, bf16=None, clock=1770, smem_kb=64),
        ("titanrtx", "rtxtitan"),
    ),
    (
        _nv("NVIDIA GeForce RTX 3060 Laptop GPU", "sm_86", units=30, l2_mb=3, bw=336, mem_gb=6,
            fp32=10.9, fp16=21.9, bf16=21.9, clock=1425, smem_kb=100),
        ("rtx3060laptop", "3060laptop", "rtx3060mobile", "rtx3060m"),
    ),
    (
        # 4 MB of L2 per XCD; the 256 MB Infinity Cache sits behind it.
        _amd("AMD Instinct MI300X", "gfx942", units=304, l2_mb=32, bw=5300, mem_gb=192,
             fp32=163.4, fp16=1307.4, bf16=1307.4, clock=2100, smem_kb=64),
        ("mi300x", "mi300"),
    ),
    (
        _amd("AMD Instinct MI250X", "gfx90a", units=220, l2_mb=16, bw=3276.8, mem_gb=128,
             fp32=47.9, fp16=383, bf16=383, clock=1700, smem_kb=64),
        ("mi250x", "mi250xmi250"),
    ),
    (
        _amd("AMD Instinct MI210", "gfx90a", units=104, l2_mb=8, bw=1638.4, mem_gb=64,
             fp32=22.6, fp16=181, bf16=181, clock=1700, smem_kb=64),
        ("mi210",),
    ),
    (
        _amd("AMD Instinct MI100", "gfx908", units=120, l2_mb=8, bw=1228.8, mem_gb=32,
             fp32=23.1, fp16=184.6, bf16=92.3, clock=1502, smem_kb=64),
        ("mi100",),
    ),
    (
        _amd("AMD Instinct MI50", "gfx906", units=60, l2_mb=4, bw=1024, mem_gb=32,
             fp32=13.3, fp16=26.5, bf16=None, clock=1725, smem_kb=64),
        ("mi50", "radeoninstinctmi50"),
    ),
    (
        _amd("AMD Radeon PRO W6600", "gfx1032", units=28, l2_mb=2, bw=224, mem_gb=8,
             fp32=10.4, fp16=20.8, bf16=None, clock=2903, smem_kb=64),
        ("w6600", "radeonprow6600"),
    ),
    (
        _amd("AMD Radeon PRO W7800", "gfx1100", units=70, l2_mb=6, bw=576, mem_gb=32,
             fp32=45.2, fp16=90.5, bf16=90.5, clock=2499, smem_kb=64),
        ("w7800", "radeonprow7800"),
    ),
    (
        _amd("AMD Radeon PRO W7900", "gfx1100", units=96, l2_mb=6, bw=864, mem_gb=48,
             fp32=61.3, fp16=122.6, bf16=122.6, clock=2495, smem_kb=64),
        ("w7900", "radeonprow7900"),
    ),
]
# fmt: on

# Words that vendors and drivers put around a product name without changing which product it is.
_NOISE = ("nvidia", "amd", "geforce", "tesla", "quadro", "instinct", "radeon", "pro", "gpu")
_NOISE_RE = re.compile(r"\b(" + "|".join(_NOISE) + r")\b")


def normalise_name(name: str) -> str:
    """Reduce a device name to lowercase alphanumerics without vendor words."""
    lowered = re.sub(r"[^a-z0-9]+", " ", name.lower())
    return re.sub(r"\s+", "", _NOISE_RE.sub(" ", lowered))


class HardwareCatalog:
    """Look up datasheet specs by any of the names a device goes by."""

    def __init__(self, entries: list[tuple[HardwareSpec, tuple[str, ...]]]) -> None:
        self._by_key: dict[str, HardwareSpec] = {}
        for spec, aliases in entries:
            for alias in (spec.name, *aliases):
                key = normalise_name(alias)
                if key in self._by_key and self._by_key[key] != spec:
                    raise ValueError(f"alias {alias!r} names two catalog entries")
                self._by_key[key] = spec
        self._specs = [spec for spec, _ in entries]

    def specs(self) -> list[HardwareSpec]:
        """Return every catalog entry."""
        return list(self._specs)

    def resolve(self, name: str) -> HardwareSpec:
        """Return the spec a device name refers to, or raise UnknownHardwareError."""
        key = normalise_name(name)
        spec = self._by_key.get(key)
        if spec is None:
            # Drivers append memory types ("H100 80GB HBM3"); try without them.
            spec = self._by_key.get(re.sub(r"hbm\d*e?$", "", key))
        if spec is None:
            raise UnknownHardwareError(
                f"unknown hardware {name!r} (normalised {key!r}); "
                f"known: {', '.join(s.name for s in self._specs)}"
            )
        return spec


CATALOG = HardwareCatalog(_ENTRIES)


def resolve(name: str) -> HardwareSpec:
    """Return the catalog spec for a device name (see HardwareCatalog.resolve)."""
    return CATALOG.resolve(name)


def merge_measured(measured: HardwareSpec, catalog: HardwareSpec | None = None) -> HardwareSpec:
    """Return `measured` with gaps filled from the catalog; measured fields always win.

    When `catalog` is not given it is looked up by the measured spec's name; an unknown
    name leaves the measured spec as it is.
    """
    if catalog is None:
        try:
            catalog = resolve(measured.name)
        except UnknownHardwareError:
            return measured
    merged: dict[str, Any] = catalog.model_dump()
    for field, value in measured.model_dump(exclude_none=True).items():
        if field == "peak_tflops":
            merged[field] = {**catalog.peak_tflops, **value}
        elif field == "l2_bytes" and value == 0:
            continue  # an agent that cannot read the L2 reports 0
        else:
            merged[field] = value
    return HardwareSpec(**merged)


# Words in a product name that say which vendor made it, for devices the catalog lacks.
_VENDOR_WORDS: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia", "geforce", "rtx", "gtx", "tesla", "quadro", "titan", "jetson"),
    "amd": ("amd", "radeon", "instinct", "gfx", "firepro"),
    "intel": ("intel", "arc", "iris", "xe", "ponte", "gaudi"),
}
_AMD_PART = re.compile(r"^(gfx\d+|mi\d+[a-z]?)$")
HARDWARE_FIELDS = tuple(HardwareSpec.model_fields)


def vendor_of(name: str) -> str | None:
    """Return the vendor a product name names (`Radeon ...` -> amd), or None."""
    words = set(re.sub(r"[^a-z0-9]+", " ", name.lower()).split())
    for vendor, keys in _VENDOR_WORDS.items():
        if words & set(keys):
            return vendor
    if any(_AMD_PART.match(w) for w in words):
        return "amd"
    return None


@dataclass(frozen=True)
class ResolvedHardware:
    """A spec for a device name, and which of its fields are guesses.

    `guessed` names the fields taken from `basis` (the catalog entry most like the name)
    because neither the catalog, nor the fields given, nor the data recorded them.
    """

    spec: HardwareSpec
    guessed: tuple[str, ...] = ()
    basis: str | None = None

    def describe(self) -> str:
        """Return one line saying where the spec came from."""
        if not self.guessed:
            return f"{self.spec.name}: catalog or given spec"
        return (
            f"{self.spec.name}: not in the catalog; guessed {', '.join(self.guessed)} "
            f"from {self.basis}"
        )


def closest_entry(name: str, vendor: str | None = None) -> HardwareSpec:
    """Return the catalog entry whose name is most like `name` (of `vendor` when given)."""
    key = normalise_name(name)
    entries = [s for s in CATALOG.specs() if vendor is None or s.vendor == vendor]
    if not entries:
        entries = CATALOG.specs()
    return max(
        entries,
        key=lambda s: (SequenceMatcher(None, key, normalise_name(s.name)).ratio(), s.name),
    )


def spec_for(name: str, given: Mapping[str, Any] | None = None) -> ResolvedHardware:
    """Return a spec for a device name: the catalog's, overlaid with `given` fields.

    A name the catalog lacks takes the `given` fields (a user's flag or JSON file) and guesses
    the rest from the catalog entry most like it, saying which fields it guessed. A `given`
    that is a whole spec guesses nothing. Raises pydantic's ValidationError for bad fields.
    """
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(HARDWARE_FIELDS))
    if unknown:
        raise UnknownHardwareError(f"hardware fields {unknown} are not spec fields")
    fields = {"name": name, **given}
    try:
        catalog: HardwareSpec | None = resolve(str(fields["name"]))
    except UnknownHardwareError:
        catalog = None
    if catalog is not None:
        if not given:
            return ResolvedHardware(spec=catalog)
        measured = HardwareSpec.model_validate({**catalog.model_dump(), **given})
        return ResolvedHardware(spec=merge_measured(measured, catalog))
    vendor = fields.get("vendor") or vendor_of(str(fields["name"]))
    basis = closest_entry(str(fields["name"]), vendor)
    base = basis.model_dump()
    required = {n for n, f in HardwareSpec.model_fields.items() if f.is_required()}
    guessed = sorted(
        n
        for n in HARDWARE_FIELDS
        if n not in fields and n not in SOFTWARE_FIELDS and (n in required or base[n] is not None)
    )
    if "vendor" not in fields and vendor is not None:
        guessed.remove("vendor")  # the name says it
    spec = HardwareSpec.model_validate(
        {**{n: base[n] for n in guessed}, "vendor": vendor or base["vendor"], **fields}
    )
    return ResolvedHardware(spec=spec, guessed=tuple(guessed), basis=basis.name)
