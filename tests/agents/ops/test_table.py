"""The op table: every op the engine can probe, under the name it carries."""

import pytest

from agents.ops.table import OP_KINDS
from tps.problem import OPS


def test_every_listed_op_is_a_known_op_under_its_own_name():
    assert set(OP_KINDS) == {"gemm", "conv2d", "layernorm"} <= set(OPS)
    for name in OP_KINDS:
        assert OP_KINDS.create(name).name == name


def test_an_unknown_op_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="no op named 'add'; known: conv2d, gemm, layernorm"):
        OP_KINDS.create("add")
