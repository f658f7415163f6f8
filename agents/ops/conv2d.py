"""conv2d operands (NCHW input, KCRS weight) and the float64 check of one output corner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.ops.base import TOLERANCE, Check, relative_error
from agents.ops.gemm import torch_dtype
from tps.problem import ProblemKey


@dataclass
class ConvOperands:
    problem: ProblemKey
    x: Any
    weight: Any
    stride: int
    pad: int
    dilation: int
    groups: int


def conv_args(problem: ProblemKey) -> dict[str, int]:
    d = problem.dims
    return {
        "stride": d.get("stride", 1),
        "padding": d.get("pad", 0),
        "dilation": d.get("dilation", 1),
        "groups": d.get("groups", 1),
    }


class Conv2dOp:
    name = "conv2d"

    def __init__(self, images: int = 1, channels: int = 8) -> None:
        self.images = images
        self.channels = channels

    def operands(self, problem: ProblemKey, device: Any, *, seed: int) -> ConvOperands:
        import torch

        d = problem.dims
        args = conv_args(problem)
        if d["c"] % args["groups"] or d["k"] % args["groups"]:
            raise ValueError("conv2d channels must divide by groups")
        gen = torch.Generator(device=device).manual_seed(seed)
        dtype = torch_dtype(problem.dtype)

        def draw(*shape: int) -> Any:
            t = torch.empty(shape, dtype=torch.float32, device=device)
            return t.uniform_(-1, 1, generator=gen).to(dtype)

        x = draw(d["n"], d["c"], d["h"], d["w"])
        weight = draw(d["k"], d["c"] // args["groups"], d["r"], d["s"])
        return ConvOperands(
            problem, x, weight, args["stride"], args["padding"], args["dilation"], args["groups"]
        )

    def prepare_check(self, problem: ProblemKey, operands: Any) -> None:
        """Nothing to start: the reference is computed in `check`."""

    def check(self, problem: ProblemKey, operands: ConvOperands, output: Any) -> Check:
        """Compare the first images and output channels with a float64 conv on the CPU."""
        import torch.nn.functional as F

        tolerance = TOLERANCE[problem.dtype]
        n = min(self.images, operands.x.shape[0])
        groups = operands.groups
        # With groups, a corner must take whole groups of output channels.
        per_group = operands.weight.shape[0] // groups
        k = per_group * groups if groups > 1 else min(self.channels, operands.weight.shape[0])
        x = operands.x[:n].to("cpu").double()
        w = operands.weight[:k].to("cpu").double()
        ref = F.conv2d(
            x,
            w,
            stride=operands.stride,
            padding=operands.pad,
            dilation=operands.dilation,
            groups=groups,
        )
        got = output[:n, :k].to("cpu")
        if tuple(got.shape) != tuple(ref.shape):
            return Check(ok=False, rel_err=float("inf"), tolerance=tolerance)
        err = relative_error(got, ref)
        return Check(ok=err <= tolerance, rel_err=err, tolerance=tolerance)
