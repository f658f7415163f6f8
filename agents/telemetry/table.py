"""Every telemetry source the agent has, by name, and the one each vendor gets."""

from __future__ import annotations

from agents.plugins import PluginTable
from agents.telemetry.readers import AmdSmiSource, NullSource, NvmlSource, TelemetrySource

TELEMETRY_SOURCES: PluginTable[TelemetrySource] = PluginTable(
    "telemetry source", {"none": NullSource, "nvml": NvmlSource, "amdsmi": AmdSmiSource}
)


def default_source(vendor: str, index: int = 0) -> TelemetrySource:
    """Return the collector for a vendor ('nvidia', 'amd'); others get none."""
    name = {"nvidia": "nvml", "amd": "amdsmi"}.get(vendor, "none")
    if name == "none":
        return TELEMETRY_SOURCES.create(name)
    return TELEMETRY_SOURCES.create(name, index=index)
