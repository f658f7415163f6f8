"""Measure what the device is: the HardwareSpec a probe run carries."""

from __future__ import annotations

import json
import logging
import os
import platform
from pathlib import Path
from typing import Any

import platformdirs

from agents.probe.device import Device
from tps.catalog import merge_measured
from tps.hardware import HardwareSpec

log = logging.getLogger(__name__)


def detect_hardware(
    device: Device, *, measure_bandwidth: bool = False, memo_path: Path | None = None
) -> HardwareSpec:
    """Return the device's spec from the runtime, NVML and, for gaps, the datasheet catalog.

    A CPU's copy bandwidth is measured once and remembered in `memo_path` (by default in
    the user's cache folder): measured anew on every start it would wander by 10% and
    change the hardware fingerprint, so the host would never find its own observations.
    """
    if device.is_gpu:
        return merge_measured(_detect_gpu(device, measure_bandwidth))
    memo = memo_path or platformdirs.user_cache_path("tps") / "cpu_bandwidth.json"
    return merge_measured(_detect_cpu(device, measure=measure_bandwidth, memo_path=memo))


def _detect_cpu(device: Device, *, measure: bool, memo_path: Path) -> HardwareSpec:
    import torch

    flags, name = _cpuinfo()
    machine = platform.machine() or "cpu"
    isa = next((f for f in ("avx512f", "avx2", "neon", "sve") if f in flags), None)
    arch = f"{machine}-{isa}" if isa else machine
    threads = device.threads or os.cpu_count() or 1
    return HardwareSpec(
        vendor="cpu",
        arch=arch[:32],
        name=(name or machine)[:128],
        compute_units=os.cpu_count() or threads,
        unit_limit=threads if threads < (os.cpu_count() or threads) else None,
        l2_bytes=_cache_bytes(2),
        mem_bandwidth_gbs=_remembered_cpu_gbs(f"{name}|{os.cpu_count()}", measure, memo_path),
        torch_version=torch.__version__,
        blas_version=_cpu_blas(),
    )


def _cpuinfo() -> tuple[set[str], str | None]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set(), platform.processor() or None
    flags: set[str] = set()
    name = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "model name" and name is None:
            name = value.strip()
    return flags, name


def _cache_bytes(level: int) -> int:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((index / "level").read_text()) == level:
                size = (index / "size").read_text().strip().upper()
                scale = {"K": 2**10, "M": 2**20}.get(size[-1:], 1)
                return int(size.rstrip("KM")) * scale
        except (OSError, ValueError):
            continue
    return 0


def _remembered_cpu_gbs(key: str, measure: bool, memo_path: Path) -> float:
    """Return the remembered copy bandwidth of this CPU, measuring it when asked or unknown."""
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    known = memo.get(key)
    if isinstance(known, int | float) and known > 0 and not measure:
        return float(known)
    memo[key] = _cpu_copy_gbs()
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        memo_path.write_text(json.dumps(memo, indent=1))
    except OSError as exc:  # a read-only home still probes; the fingerprint may then wander
        log.warning("cannot remember the CPU bandwidth in %s: %s", memo_path, exc)
    return float(memo[key])


def _cpu_copy_gbs() -> float:
    """Copy 64 MiB a few times and count bytes read plus written."""
    import time

    import numpy as np

    src = np.ones(8 * 2**20, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return round(2 * src.nbytes / best / 1e9, 1)


def _cpu_blas() -> str | None:
    import torch

    config = torch.__config__.show()
    for lib in ("mkl", "openblas", "blis", "accelerate"):
        if lib in config.lower():
            return lib
    return None


def _detect_gpu(device: Device, measure_bandwidth: bool) -> HardwareSpec:
    import torch

    props = torch.cuda.get_device_properties(device.index)
    rocm = torch.version.hip is not None
    arch = (
        str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
        if rocm
        else f"sm_{props.major}{props.minor}"
    )
    nvml = _nvml_facts(device.index) if not rocm else {}
    bandwidth = _gpu_copy_gbs(device) if measure_bandwidth else nvml.get("bandwidth_gbs")
    if bandwidth is None:
        bandwidth = _gpu_copy_gbs(device)
    limited = device.sm_limit is not None and device.sm_limit < props.multi_processor_count
    return HardwareSpec(
        vendor="amd" if rocm else "nvidia",
        arch=arch,
        name=props.name[:128],
        compute_units=props.multi_processor_count,
        unit_limit=device.sm_limit,
        # on the green context's stream: what its SMs alone can move
        limited_bandwidth_gbs=_gpu_copy_gbs(device) if limited else None,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        mem_bandwidth_gbs=bandwidth,
        memory_bytes=int(props.total_memory),
        clock_mhz=nvml.get("clock_mhz"),
        warp_size=int(getattr(props, "warp_size", 64 if rocm else 32)),
        smem_per_unit_bytes=getattr(props, "shared_memory_per_multiprocessor", None),
        driver_version=nvml.get("driver") or None,
        blas_version=_gpu_blas(rocm),
        torch_version=torch.__version__,
    )


def _nvml_facts(index: int) -> dict[str, Any]:
    try:
        import pynvml as nv

        nv.nvmlInit()
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        facts: dict[str, Any] = {}
        driver = nv.nvmlSystemGetDriverVersion()
        facts["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        facts["clock_mhz"] = float(nv.nvmlDeviceGetMaxClockInfo(handle, 1))  # SM
        mem_mhz = nv.nvmlDeviceGetMaxClockInfo(handle, 2)  # memory
        bus_bits = nv.nvmlDeviceGetMemoryBusWidth(handle)
        facts["bandwidth_gbs"] = round(mem_mhz * 1e6 * 2 * bus_bits / 8 / 1e9, 1)
        return facts
    except Exception as exc:  # no NVML: those fields come from the catalog or a copy
        log.debug("NVML facts unavailable: %s", exc)
        return {}


def _gpu_blas(rocm: bool) -> str | None:
    import torch

    if rocm:
        return f"rocm-{torch.version.hip}"
    try:
        from nvmath.bindings import cublasLt

        return f"cublasLt-{cublasLt.get_version()}"
    except Exception:
        return f"cuda-{torch.version.cuda}"


def _gpu_copy_gbs(device: Device) -> float:
    """Time a 1 GiB device-to-device copy kernel with events; count bytes read plus written.

    The copy is an elementwise kernel on the device's stream (a green context's, when set),
    not a memcpy, which a copy engine could serve outside the SMs in use.
    """
    import torch

    s = device.stream if device.stream is not None else torch.cuda.current_stream()
    with torch.cuda.stream(s):
        src = torch.ones(2**28, dtype=torch.float32, device=device.torch_device)
        dst = torch.empty_like(src)
        torch.mul(src, 1.0, out=dst)
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record(s)
        for _ in range(5):
            torch.mul(src, 1.0, out=dst)
        end.record(s)
    end.synchronize()
    seconds = float(start.elapsed_time(end)) / 1000 / 5
    return round(2 * src.nbytes / seconds / 1e9, 1)
