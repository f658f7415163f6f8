"""`tps::product`: the dispatched product as a torch.library custom op, for torch.compile.

A compiled graph names the winner by slot number, resolved while tracing (shapes are
static there), so the op is opaque to the compiler and causes no graph break. Its fake
implementation gives the winner's output layout, so the compiler plans around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from agents.runtime.dispatch import Route, Runtime


@dataclass
class Slot:
    """A route a compiled graph names, with the output strides its fake promised."""

    runtime: Runtime
    route: Route
    strides: tuple[int, ...] | None


# Filled while tracing, read by the op at run time.
SLOTS: list[Slot] = []


def add_slot(runtime: Runtime, route: Route) -> int:
    """Give `route` a slot number (once) and return it."""
    if route.slot < 0:
        out_strides = getattr(route.runner, "out_strides", None)
        strides = out_strides() if out_strides is not None else None
        route.slot = len(SLOTS)
        SLOTS.append(Slot(runtime=runtime, route=route, strides=strides))
    return route.slot


def _matmul(a: Any, b: Any) -> Any:
    from agents.runtime.patching import ORIGINAL

    return ORIGINAL["matmul"](a, b)


@torch.library.custom_op("tps::product", mutates_args=())
def product(a: torch.Tensor, b: torch.Tensor, slot: int) -> torch.Tensor:
    """Return A @ B through the winner of `slot`, or the default once that winner faulted."""
    s = SLOTS[slot]
    out: torch.Tensor
    if s.route.runner is None:
        out = _matmul(a, b)
    else:
        out = s.runtime.run(s.route, a, b)
    if s.strides is None:
        return out.contiguous()
    if out.stride() != s.strides:  # the default answered after a fault: keep the layout
        return out.new_empty_strided(out.shape, s.strides).copy_(out)
    return out


@product.register_fake
def _product_fake(a: torch.Tensor, b: torch.Tensor, slot: int) -> torch.Tensor:
    shape = (*a.shape[:-1], b.shape[-1])
    strides = SLOTS[slot].strides
    if strides is None:
        return a.new_empty(shape)
    return a.new_empty_strided(shape, strides)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    a, b, slot = inputs
    ctx.slot = slot
    ctx.save_for_backward(a, b)


def _backward(ctx: Any, grad: Any) -> tuple[Any, Any, None]:
    from agents.runtime.patching import traced_product

    a, b = ctx.saved_tensors
    runtime = SLOTS[ctx.slot].runtime
    ga = traced_product(grad, b.mT, rt=runtime) if ctx.needs_input_grad[0] else None
    gb = traced_product(a.mT, grad, rt=runtime) if ctx.needs_input_grad[1] else None
    return ga, gb, None


product.register_autograd(_backward, setup_context=_setup_context)
