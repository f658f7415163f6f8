"""The telemetry table: each vendor gets its reader."""

from agents.telemetry import TELEMETRY_SOURCES, default_source


def test_cpu_hosts_get_no_telemetry_source():
    assert default_source("cpu").name == "none"


def test_each_gpu_vendor_gets_its_library_reader():
    assert default_source("nvidia", 1).name == "nvml"
    assert default_source("amd").name == "amdsmi"
    assert set(TELEMETRY_SOURCES) == {"none", "nvml", "amdsmi"}
