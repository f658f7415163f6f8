"""Telemetry readers: NVML, AMD SMI, or none. Missing libraries give null fields, never errors."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from tps.schemas import Telemetry

log = logging.getLogger(__name__)


class TelemetrySource(Protocol):
    """A reader of one device's counters, taken as one snapshot."""

    name: str

    def snapshot(self) -> Telemetry: ...


class NullSource:
    """No telemetry: every field is null."""

    name = "none"

    def snapshot(self) -> Telemetry:
        return Telemetry()


def _read(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # one unreadable counter must not cost the others
        return None


class NvmlSource:
    """NVIDIA GPUs through nvidia-ml-py."""

    name = "nvml"

    def __init__(self, index: int = 0, nvml: Any = None) -> None:
        self.index = index
        self._nvml = nvml
        self._handle: Any = None

    def _open(self) -> Any:
        if self._handle is None:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nvml = self._nvml
            nvml.nvmlInit()
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
        return self._handle

    def snapshot(self) -> Telemetry:
        try:
            handle = self._open()
        except Exception as exc:  # no library, no driver: telemetry is absent, not fatal
            log.debug("NVML unavailable: %s", exc)
            return Telemetry()
        nv = self._nvml
        util = _read(nv.nvmlDeviceGetUtilizationRates, handle)
        temp = _read(nv.nvmlDeviceGetTemperature, handle, 0)  # NVML_TEMPERATURE_GPU
        clock = _read(nv.nvmlDeviceGetClockInfo, handle, 1)  # NVML_CLOCK_SM
        power = _read(nv.nvmlDeviceGetPowerUsage, handle)
        reasons = _read(nv.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        return Telemetry(
            source="nvml",
            temperature_c=float(temp) if temp is not None else None,
            utilization_pct=float(util.gpu) if util is not None else None,
            mem_bw_util_pct=float(util.memory) if util is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            throttle_reasons=decode_throttle(reasons or 0),
        )


# NVML clocks-event reason bits (nvml.h); "idle" and "applications clocks" are not throttling.
_THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in _THROTTLE_BITS.items() if mask & bit]


class AmdSmiSource:
    """AMD GPUs through the amdsmi Python library."""

    name = "amdsmi"

    def __init__(self, index: int = 0, amdsmi: Any = None) -> None:
        self.index = index
        self._lib = amdsmi
        self._handle: Any = None

    def _open(self) -> Any:
        if self._handle is None:
            if self._lib is None:
                import amdsmi

                self._lib = amdsmi
            lib = self._lib
            lib.amdsmi_init()
            self._handle = lib.amdsmi_get_processor_handles()[self.index]
        return self._handle

    def snapshot(self) -> Telemetry:
        try:
            handle = self._open()
        except Exception as exc:
            log.debug("AMD SMI unavailable: %s", exc)
            return Telemetry()
        lib = self._lib
        activity = _read(lib.amdsmi_get_gpu_activity, handle) or {}
        temp = _read(
            lib.amdsmi_get_temp_metric,
            handle,
            lib.AmdSmiTemperatureType.HOTSPOT,
            lib.AmdSmiTemperatureMetric.CURRENT,
        )
        clock = _read(lib.amdsmi_get_clock_info, handle, lib.AmdSmiClkType.GFX) or {}
        power = _read(lib.amdsmi_get_power_info, handle) or {}
        socket_power = power.get("current_socket_power") or power.get("average_socket_power")
        return Telemetry(
            source="amdsmi",
            temperature_c=_num(temp),
            utilization_pct=_num(activity.get("gfx_activity")),
            mem_bw_util_pct=_num(activity.get("umc_activity")),
            sm_clock_mhz=_num(clock.get("clk")),
            power_w=_num(socket_power),
        )


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
