"""The gate waits out a busy device and flags a hot one."""

from agents.telemetry import TelemetryGate
from tests.agents.conftest import ManualClock
from tps.schemas import Telemetry


class Sequence:
    name = "sequence"

    def __init__(self, *utilizations):
        self.values = list(utilizations)

    def snapshot(self):
        return Telemetry(source="sequence", utilization_pct=self.values.pop(0), temperature_c=60)


def test_gate_waits_while_busy_then_probes():
    clock = ManualClock()
    snap = TelemetryGate(source=Sequence(90.0, 80.0, 10.0), clock=clock).wait()
    assert clock.slept == [0.5, 0.5] and snap.delayed_ms == 1000 and not snap.thermal_safe
    idle = TelemetryGate(source=Sequence(5.0), clock=ManualClock()).wait()
    assert idle.delayed_ms == 0
