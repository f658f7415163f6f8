"""The op config file users write."""

import pytest

from agents.errors import OpConfigError
from agents.opconfig import OpConfig

YAML = """
tunable_ops:
  - {name: gemm, enabled: true, candidates: 7}
  - {name: conv2d, enabled: true, candidates: 12}
  - {name: layernorm}
  - {name: add, enabled: false}
"""


def test_loads_the_documented_example(tmp_path):
    path = tmp_path / "ops.yaml"
    path.write_text(YAML)
    config = OpConfig.load(path)
    assert config.candidate_limit("gemm") == 7 and config.candidate_limit("conv2d") == 12
    assert config.enabled("layernorm") and not config.enabled("add")
    assert not config.enabled("dedispersion") and config.candidate_limit("add") == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("tunable_ops: [{name: matmul}]", "unknown op 'matmul'"),
        ("tunable_ops: [{name: gemm}, {name: gemm}]", "listed twice"),
        ("tunable_ops: [{name: gemm, candidates: -1}]", "greater than or equal"),
        ("ops: []", "top-level 'tunable_ops'"),
        ("tunable_ops: [", "not valid YAML"),
    ],
)
def test_bad_files_get_clear_messages(tmp_path, text, message):
    path = tmp_path / "ops.yaml"
    path.write_text(text)
    with pytest.raises(OpConfigError, match=message):
        OpConfig.load(path)
