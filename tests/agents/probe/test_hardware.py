import json
from pathlib import Path

from agents.probe.device import Device
from agents.probe.hardware import detect_hardware

CPU = Device(kind="cpu")


def test_cpu_fingerprint_is_stable_across_detections(tmp_path: Path) -> None:
    memo = tmp_path / "cpu_bandwidth.json"
    first = detect_hardware(CPU, memo_path=memo)
    again = detect_hardware(CPU, memo_path=memo)
    assert memo.is_file()
    assert first.mem_bandwidth_gbs > 0
    assert first.fingerprint() == again.fingerprint()


def test_remembered_bandwidth_is_used_until_a_measurement_is_asked_for(tmp_path: Path) -> None:
    memo = tmp_path / "cpu_bandwidth.json"
    detect_hardware(CPU, memo_path=memo)
    (key,) = json.loads(memo.read_text())
    memo.write_text(json.dumps({key: 0.5}))
    assert detect_hardware(CPU, memo_path=memo).mem_bandwidth_gbs == 0.5
    measured = detect_hardware(CPU, memo_path=memo, measure_bandwidth=True)
    assert measured.mem_bandwidth_gbs != 0.5
    assert json.loads(memo.read_text())[key] == measured.mem_bandwidth_gbs


def test_unreadable_memo_is_measured_again(tmp_path: Path) -> None:
    memo = tmp_path / "cpu_bandwidth.json"
    memo.write_text("not json")
    assert detect_hardware(CPU, memo_path=memo).mem_bandwidth_gbs > 0
