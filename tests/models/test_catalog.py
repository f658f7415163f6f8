import pytest

from tps.catalog import CATALOG, UnknownHardwareError, merge_measured, normalise_name, resolve
from tps.errors import TPSError
from tps.hardware import HardwareSpec


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe 40GB"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB"),
        ("AMD Radeon PRO W7800", "AMD Radeon PRO W7800"),
        ("NVIDIA RTX A4000", "NVIDIA RTX A4000"),
        ("MI250X", "AMD Instinct MI250X"),
        ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"),
        ("nvidia h100 pcie", "NVIDIA H100 PCIe 80GB"),
        ("NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA GeForce RTX 3060 Laptop GPU"),
        ("w6600", "AMD Radeon PRO W6600"),
    ],
)
def test_device_names_resolve(name: str, product: str) -> None:
    assert resolve(name).name == product


def test_catalog_covers_the_required_products() -> None:
    names = {normalise_name(s.name) for s in CATALOG.specs()}
    for wanted in (
        "H100 SXM5 80GB", "H100 PCIe 80GB", "H200", "A100 PCIe 40GB", "A100 PCIe 80GB",
        "A100 SXM4 40GB", "A100 SXM4 80GB", "RTX A4000", "RTX A6000", "L40S", "V100 SXM2 32GB",
        "T4", "GeForce RTX 2080 Ti", "GeForce RTX 3090", "TITAN RTX",
        "GeForce RTX 3060 Laptop GPU", "MI300X", "MI250X", "MI210", "MI100", "MI50",
        "Radeon PRO W6600", "Radeon PRO W7800", "Radeon PRO W7900",
    ):  # fmt: skip
        assert normalise_name(wanted) in names, wanted
    for spec in CATALOG.specs():
        assert {"fp32", "fp16"} <= set(spec.peak_tflops)
        assert spec.l2_bytes > 0 and spec.clock_mhz


def test_unknown_name_is_a_clear_tps_error() -> None:
    with pytest.raises(UnknownHardwareError, match="unknown hardware 'Voodoo 5'") as info:
        resolve("Voodoo 5")
    assert isinstance(info.value, TPSError)


def test_measured_spec_wins_over_the_catalog() -> None:
    measured = HardwareSpec(
        vendor="nvidia",
        arch="sm_90",
        name="NVIDIA H200",
        compute_units=132,
        l2_bytes=0,  # the agent could not read it
        mem_bandwidth_gbs=4000.0,
        peak_tflops={"bf16": 900.0},
        unit_limit=66,
    )
    merged = merge_measured(measured)
    assert merged.mem_bandwidth_gbs == 4000.0
    assert merged.peak_tflops["bf16"] == 900.0
    assert merged.peak_tflops["fp32"] == resolve("H200").peak_tflops["fp32"]
    assert merged.l2_bytes == resolve("H200").l2_bytes
    assert merged.unit_limit == 66
