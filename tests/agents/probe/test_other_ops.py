"""conv2d and layernorm through the real engine on the CPU."""

import pytest

from agents.providers.table import create_provider
from tests.agents.conftest import FAST, cpu_engine
from tps.candidate import VENDOR_DEFAULT
from tps.problem import ProblemKey


def engine_for(tmp_path, *names):
    from agents.opconfig import OpConfig, TunableOpEntry

    engine = cpu_engine(tmp_path, providers=[create_provider(n, settings=FAST) for n in names])
    engine.op_config = OpConfig(
        tunable_ops=[
            TunableOpEntry(name="conv2d", candidates=4),
            TunableOpEntry(name="layernorm", candidates=2),
        ]
    )
    return engine


@pytest.mark.parametrize(
    "dims",
    [
        {"n": 2, "c": 8, "h": 10, "w": 9, "k": 12, "r": 3, "s": 3, "pad": 1},
        {"n": 1, "c": 6, "h": 11, "w": 11, "k": 4, "r": 3, "s": 1, "stride": 2, "dilation": 2},
        {"n": 1, "c": 8, "h": 7, "w": 7, "k": 8, "r": 3, "s": 3, "groups": 4, "pad": 1},
    ],
)
def test_conv2d_candidates_are_measured_and_correct(tmp_path, dims):
    engine = engine_for(tmp_path, "vendor-default", "torch-conv", "im2col")
    run = engine.probe(ProblemKey(op="conv2d", dtype="fp32", dims=dims))
    backends = [m.candidate.backend for m in run.measurements]
    assert backends[0] == "vendor-default" and "torch-conv" in backends
    assert ("im2col" in backends) == (dims.get("groups", 1) == 1)
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]


def test_layernorm_candidates_are_measured_and_correct(tmp_path):
    engine = engine_for(tmp_path, "vendor-default", "layernorm-composite")
    for dtype in ("fp32", "bf16"):
        run = engine.probe(ProblemKey(op="layernorm", dtype=dtype, dims={"rows": 33, "cols": 96}))
        assert [m.candidate.backend for m in run.measurements] == [
            VENDOR_DEFAULT.backend,
            "layernorm-composite",
        ]
        assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]
