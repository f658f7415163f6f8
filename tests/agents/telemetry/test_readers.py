"""Telemetry readers: absent libraries give null fields, throttle masks decode."""

from agents.telemetry import NullSource
from agents.telemetry.readers import AmdSmiSource, NvmlSource, decode_throttle
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


def test_throttle_reasons_are_decoded():
    assert decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert decode_throttle(0x1) == []
