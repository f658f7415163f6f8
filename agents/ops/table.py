"""Every op the engine can probe, by name."""

from __future__ import annotations

from agents.ops.base import OpKind
from agents.ops.conv2d import Conv2dOp
from agents.ops.gemm import GemmOp
from agents.ops.layernorm import LayerNormOp
from agents.plugins import PluginTable

OP_KINDS: PluginTable[OpKind] = PluginTable(
    "op", {"gemm": GemmOp, "conv2d": Conv2dOp, "layernorm": LayerNormOp}
)
