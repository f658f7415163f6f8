"""open_session's device: a green context's SM limit is a CUDA device's only."""

from __future__ import annotations

import pytest

from agents.runtime import open_session


@pytest.mark.parametrize(
    ("sm_limit", "said"), [(8, "the CPU has no SMs to limit"), (0, "at least 1 SM, not 0")]
)
def test_an_sm_limit_the_device_cannot_have_is_refused_by_name(tmp_path, sm_limit, said):
    with pytest.raises(ValueError, match=said):
        open_session(device="cpu", cache=tmp_path / "cache.json", sm_limit=sm_limit)
    assert not (tmp_path / "cache.json").exists()


def test_a_cpu_session_without_a_limit_opens(tmp_path):
    session = open_session(device="cpu", cache=tmp_path / "cache.json")
    try:
        assert session.runtime.device.kind == "cpu" and session.runtime.hardware.vendor == "cpu"
    finally:
        session.close()
