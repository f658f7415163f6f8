from typing import Any

import pytest
from pydantic import ValidationError

from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey


def linear(m: int, n: int, k: int) -> ProblemKey:
    return ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": n, "k": k}, trans_b=True)


def test_linear_problem_has_tunableop_signature() -> None:
    op_sig, params = linear(1, 6144, 4096).tunableop_signature()
    assert op_sig == "GemmTunableOp_BFloat16_TN"
    assert params == "tn_6144_1_4096_ld_4096_4096_6144"


def test_tunableop_signature_round_trips() -> None:
    for problem in (
        linear(3, 4095, 4095),
        ProblemKey(op="gemm", dtype="fp16", dims={"m": 64, "n": 32, "k": 16}, trans_a=True),
        ProblemKey(op="gemm", dims={"m": 64, "n": 32, "k": 16}, lda=40),
    ):
        assert ProblemKey.from_tunableop(*problem.tunableop_signature()) == problem


def test_packed_leading_dims_normalise_to_one_key() -> None:
    explicit = ProblemKey(op="gemm", dims={"m": 8, "n": 16, "k": 32}, lda=32, ldb=16, ldc=16)
    assert explicit.key_hash() == ProblemKey(op="gemm", dims={"m": 8, "n": 16, "k": 32}).key_hash()


@pytest.mark.parametrize(
    "dims, message",
    [
        ({"m": 8, "n": 16}, "needs dims"),
        ({"m": 8, "n": 16, "k": 0}, "greater than 0"),
        ({"m": 8, "n": 16, "k": 4, "h": 2}, "takes no dims"),
    ],
)
def test_dims_that_do_not_fit_the_op_are_rejected(dims: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ProblemKey(op="gemm", dims=dims)


def test_leading_dim_shorter_than_row_is_rejected() -> None:
    with pytest.raises(ValidationError, match="lda=4"):
        ProblemKey(op="gemm", dims={"m": 8, "n": 16, "k": 32}, lda=4)


def test_candidate_id_ignores_param_order_and_differs_by_params() -> None:
    a = Candidate(backend="triton", params={"BLOCK_M": 64, "BLOCK_N": 128})
    b = Candidate(backend="triton", params={"BLOCK_N": 128, "BLOCK_M": 64})
    c = Candidate(backend="triton", params={"BLOCK_M": 128, "BLOCK_N": 64})
    assert a.id == b.id != c.id


# An H200 as little as a spec needs: enough to name a configuration.
H200: dict[str, Any] = dict(
    vendor="nvidia",
    arch="sm_90",
    name="NVIDIA H200",
    compute_units=132,
    l2_bytes=60 * 2**20,
    mem_bandwidth_gbs=4800.0,
)


def test_hardware_fingerprint_ignores_software_versions() -> None:
    a = HardwareSpec(**H200, driver_version="580")
    b = HardwareSpec(**H200, driver_version="590")
    limited = HardwareSpec(**H200, unit_limit=16)
    assert a.fingerprint() == b.fingerprint() != limited.fingerprint()


def test_a_measured_limited_bandwidth_describes_a_configuration_without_renaming_it() -> None:
    base = {**H200, "unit_limit": 16}
    unmeasured = HardwareSpec(**base)
    first = HardwareSpec(**base, limited_bandwidth_gbs=1500.4)
    again = HardwareSpec(**base, limited_bandwidth_gbs=1489.9)
    # measurements wander; the configuration's fingerprint does not
    assert unmeasured.fingerprint() == first.fingerprint() == again.fingerprint()
    assert first.usable_bandwidth_gbs == 1500.4
    assert unmeasured.usable_bandwidth_gbs == pytest.approx(4800.0 * 16 / 132)
    # never above the whole device's, and a device without a limit uses the whole
    assert HardwareSpec(**base, limited_bandwidth_gbs=9000.0).usable_bandwidth_gbs == 4800.0
    assert HardwareSpec(**H200).usable_bandwidth_gbs == 4800.0


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan"), 2e6, "1500"])
def test_a_limited_bandwidth_out_of_bounds_is_rejected(value: object) -> None:
    with pytest.raises(ValidationError, match="limited_bandwidth_gbs"):
        HardwareSpec(**H200, unit_limit=16, limited_bandwidth_gbs=value)
