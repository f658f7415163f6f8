"""Device telemetry: collectors behind one small protocol, and the busy/thermal gate."""

from agents.telemetry.gate import TelemetryGate
from agents.telemetry.sources import TELEMETRY, NullSource, TelemetrySource, default_source

__all__ = ["TELEMETRY", "NullSource", "TelemetryGate", "TelemetrySource", "default_source"]
