"""Telemetry sources: absent libraries give null fields; the gate waits and flags heat."""

from agents.telemetry import NullSource, TelemetryGate, default_source
from agents.telemetry.readers import AmdSmiSource, NvmlSource, decode_throttle
from tests.agents.conftest import ManualClock
from tps.schemas import Telemetry


class NoLibrary:
    """Stands where pynvml or amdsmi is missing: every call raises."""

    def __getattr__(self, name):
        raise ImportError(f"no {name}")


def test_missing_libraries_give_null_fields_not_errors():
    for source in (NvmlSource(nvml=NoLibrary()), AmdSmiSource(amdsmi=NoLibrary()), NullSource()):
        snap = source.snapshot()
        assert snap == Telemetry()
        assert snap.temperature_c is None and snap.utilization_pct is None


def test_cpu_hosts_get_no_telemetry_source():
    assert default_source("cpu").name == "none"


def test_throttle_reasons_are_decoded():
    assert decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert decode_throttle(0x1) == []


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
