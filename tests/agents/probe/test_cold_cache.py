"""Cold-cache arithmetic: operand bytes and the copies that outgrow the L2."""

from tests.agents.conftest import gemm


def test_cold_copies_hold_twice_the_l2():
    from agents.ops.gemm import gemm_operands
    from agents.probe.cold_cache import cold_copies, operand_bytes

    operands = gemm_operands(gemm(m=64, n=32, k=16), "cpu", seed=0)
    assert operand_bytes(operands) == (64 * 16 + 16 * 32) * 4
    assert cold_copies(1 << 20, l2_bytes=1 << 20, limit=32) == 3
    assert cold_copies(4 << 20, l2_bytes=1 << 20, limit=32) == 2
    assert cold_copies(1, l2_bytes=1 << 20, limit=32) == 32
