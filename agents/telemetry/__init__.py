"""Device telemetry: readers behind one small protocol, and the busy/thermal gate."""

from agents.telemetry.gate import TelemetryGate
from agents.telemetry.readers import NullSource, TelemetrySource
from agents.telemetry.table import TELEMETRY_SOURCES, default_source

__all__ = ["TELEMETRY_SOURCES", "NullSource", "TelemetryGate", "TelemetrySource", "default_source"]
