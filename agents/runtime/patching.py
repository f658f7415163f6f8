"""The program's way in: torch's product functions, routed through the active runtime.

`tuned()` swaps `torch.nn.functional.linear`, `torch.mm`, `torch.matmul`, `torch.addmm`,
`torch.bmm` and `Tensor.__matmul__` for routing versions while it is open (process-wide,
as PyTorch TunableOp's switch is); `tune(model)` routes a module's linear layers without
touching torch. With no runtime active, or for calls TPS does not model (an `out=`
argument, scaled addmm, tensor subclasses), the original function runs untouched.

Once the block's products have all kept the default for `settle_after` calls in a row,
with no new one, torch gets its own functions back for the rest of the block: a call then
costs nothing, as a settled layer does (`settle_functions`). A function with a winner among
its products keeps routing; the others settle beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from agents.runtime import ops
from agents.runtime.dispatch import Route, Runtime

ORIGINAL: dict[str, Callable[..., Any]] = {
    "linear": F.linear,
    "mm": torch.mm,
    "matmul": torch.matmul,
    "addmm": torch.addmm,
    "bmm": torch.bmm,
    "__matmul__": torch.Tensor.__matmul__,
}
_linear, _mm, _matmul = ORIGINAL["linear"], ORIGINAL["mm"], ORIGINAL["matmul"]
_addmm, _bmm = ORIGINAL["addmm"], ORIGINAL["bmm"]
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_F32 = torch.float32
_FLAGS = torch.backends.cuda.matmul
# What `torch.backends.cuda.matmul.allow_tf32` reads, without its Python __getattr__.
_allow_tf32 = torch._C._get_cublas_allow_tf32
# Whether dynamo traces the call (torch.compile, export): constant-folded to True while it
# traces, a plain `return False` in eager (56 ns, against 150 ns for `is_compiling()`, which
# checks TorchScript first; `benchmarks/routing_parts.py`).
_is_compiling = torch.compiler.is_dynamo_compiling


class _State:
    """The runtime that routes calls now (the innermost `tuned()` block's)."""

    active: Runtime | None = None
    stack: list[Runtime | None] = []
    # Which of torch's functions are the routing versions now (keys of ROUTING).
    routed: set[tuple[Any, str]] = set()


STATE = _State()


@contextmanager
def suspended() -> Iterator[None]:
    """Route nothing while the block runs (a probe inside the runtime calls torch.mm too)."""
    saved, STATE.active = STATE.active, None
    try:
        yield
    finally:
        STATE.active = saved


def _plain(a: Any, b: Any) -> bool:
    return type(a) in _PLAIN and type(b) in _PLAIN


def _tf32(a: Any) -> bool:
    return a.dtype is _F32 and a.is_cuda and _FLAGS.allow_tf32


def _needs_grad(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class _Product(torch.autograd.Function):
    """A @ B whose backward products go through the runtime too: dA = dC B^T, dB = A^T dC."""

    @staticmethod
    def forward(ctx: Any, runtime: Runtime, route: Route, a: Any, b: Any) -> Any:
        ctx.runtime = runtime
        ctx.save_for_backward(a, b)
        if route.runner is None:  # the default forward; the backward products still route
            return _matmul(a, b)
        return runtime.run(route, a, b)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
        runtime: Runtime = ctx.runtime
        a, b = ctx.saved_tensors
        ga = runtime.product(grad, b.mT) if ctx.needs_input_grad[2] else None
        gb = runtime.product(a.mT, grad) if ctx.needs_input_grad[3] else None
        return None, None, ga, gb


def _dispatch(rt: Runtime, route: Route, a: Any, b: Any, bias: Any) -> Any:
    """Run the route's winner on A, B (plus bias), with autograd where the program trains."""
    if _needs_grad(a, b, bias):
        out = _Product.apply(rt, route, a, b)  # type: ignore[no-untyped-call]
        return out if bias is None else out + bias
    out = rt.run(route, a, b)
    return out if bias is None else out.add_(bias)


def route_product(
    rt: Runtime | None, name: str, a: Any, b: Any, bias: Any, default: Callable[[], Any]
) -> Any:
    """Route C = A @ B (+ bias) for logical views A, B; `default()` runs the original call.

    The general way in (reshaped operands, layers' fallbacks, torch.compile); the
    functions' own hot path is `_routed`.
    """
    if rt is None:
        return default()
    if _is_compiling():
        out = traced_product(a, b, rt=rt, none_if_default=True)
        if out is None:
            return default()
        return out if bias is None else out + bias
    sig = _sig(name, a, b)
    route = rt.routes.get(sig) or rt.resolve(sig, a, b)
    route.calls += 1
    if route.runner is None and not _needs_grad(a, b, bias):
        _quiet(rt)
        _keep(rt, sig, route)
        return default()
    if route.held and not _needs_grad(a, b, bias):
        return default()
    if route.checks_left and route.in_trial and not _needs_grad(a, b, bias):
        # the routed call against the original, each whole
        return rt.trial_call(route, lambda: _plus(rt.call_winner(route, a, b), bias), default)
    return _dispatch(rt, route, a, b, bias)


def _plus(out: Any, bias: Any) -> Any:
    return out if bias is None else out.add_(bias)


def _keep(rt: Runtime, sig: tuple[Any, ...], route: Route) -> None:
    """File the call's route in the native table, so that its next calls stay in C++."""
    if NATIVE.module is not None and rt.routes.get(sig) is route:
        NATIVE.module.remember(rt, route)


def _quiet(rt: Runtime) -> None:
    """Count a call the default kept; enough in a row give torch its functions back."""
    rt.quiet_calls += 1
    if rt.quiet_calls == rt.settle_at:
        settle_functions(rt)


def _sig(name: str, a: Any, b: Any) -> tuple[Any, ...]:
    """Return what decides a call's problem: dtype, device, shapes and strides (and TF32)."""
    if a.dtype is _F32:
        device = a.get_device()
        sig: tuple[Any, ...] = (name, _F32, device, a.shape, a.stride(), b.shape, b.stride())
        return (*sig, device >= 0 and _allow_tf32())
    return (name, a.dtype, a.get_device(), a.shape, a.stride(), b.shape, b.stride())


_grad_enabled = torch.is_grad_enabled


def _routing(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """Return the routing version of a two-operand product (`torch.mm`, `torch.bmm`).

    Everything a call needs is inlined here, as it runs on every product the program
    makes: a call the default keeps costs a signature and one lookup; a hit adds the
    call through its runner.
    """

    def product(input: Any, mat2: Any, *, out: Any = None) -> Any:
        rt = STATE.active
        if rt is None or out is not None or type(input) not in _PLAIN or type(mat2) not in _PLAIN:
            return original(input, mat2, out=out) if out is not None else original(input, mat2)
        if _is_compiling():
            return route_product(rt, name, input, mat2, None, lambda: original(input, mat2))
        dtype = input.dtype
        device = input.get_device()
        # size() is the shape without the property's extra frame (40 ns of a 1 µs miss), and
        # the signature is built in one tuple (a second costs as much)
        sig: tuple[Any, ...] = (
            (name, dtype, device, input.size(), input.stride(), mat2.size(), mat2.stride())
            if dtype is not _F32
            else (name, dtype, device, input.size(), input.stride(), mat2.size(), mat2.stride(),
                  device >= 0 and _allow_tf32())
        )  # fmt: skip
        route = rt.routes.get(sig)
        if route is None:
            route = rt.resolve(sig, input, mat2)
        route.calls += 1
        if _grad_enabled() and (input.requires_grad or mat2.requires_grad):
            return _Product.apply(rt, route, input, mat2)  # type: ignore[no-untyped-call]
        if NATIVE.module is not None:  # its next calls stay in C++, hits too
            _keep(rt, sig, route)
        if route.runner is None:
            rt.quiet_calls += 1
            if rt.quiet_calls == rt.settle_at:
                settle_functions(rt)
            return original(input, mat2)
        if route.held:
            return original(input, mat2)
        return rt.run(route, input, mat2)

    product.__name__ = product.__qualname__ = name
    return product


# -- the routing versions of torch's functions ------------------------------------------------
def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    return linear_with(STATE.active, input, weight, bias)


def linear_with(rt: Runtime | None, input: Any, weight: Any, bias: Any) -> Any:
    """F.linear through `rt`: [.., K] @ W[N, K]^T as one GEMM of all leading rows."""
    if rt is None or not _plain(input, weight) or input.dim() < 1 or weight.dim() != 2:
        return _linear(input, weight, bias)
    if _is_compiling():
        return _linear_via(rt, input, weight, bias)
    sig: tuple[Any, ...] = ("linear", input.dtype, input.get_device(), input.shape)
    sig += (input.stride(), weight.shape, weight.stride(), bias is None)
    if input.dtype is _F32:
        sig += (_allow_tf32(),)
    route = rt.routes.get(sig)
    if route is None:
        route = rt.resolve(sig, input.reshape(-1, input.shape[-1]), weight.t())
    route.calls += 1
    if route.runner is None and not _needs_grad(input, weight, bias):
        _quiet(rt)
        _keep(rt, sig, route)
        return _linear(input, weight, bias)
    if not _needs_grad(input, weight, bias):
        if NATIVE.module is not None:  # its next calls stay in C++, hits too
            _keep(rt, sig, route)
        if route.held:  # the step check's default step
            return _linear(input, weight, bias)
    shape = (*input.shape[:-1], weight.shape[0])
    if route.checks_left and route.in_trial and not _needs_grad(input, weight, bias):
        # the routed call against F.linear's own, each whole
        return rt.trial_call(
            route,
            lambda: _plus(
                rt.call_winner(route, input.reshape(-1, input.shape[-1]), weight.t()), bias
            ).view(shape),
            lambda: _linear(input, weight, bias),
        )
    out = _dispatch(rt, route, input.reshape(-1, input.shape[-1]), weight.t(), bias)
    return out.view(shape)


class _Quiet:
    """A layer's calls in a row that the default kept, with no shape it had not seen."""

    __slots__ = ("after", "calls")

    def __init__(self, after: int) -> None:
        self.after = after if after > 0 else -1
        self.calls = 0


def linear_layer(rt: Runtime) -> Callable[[Any, Any], Any]:
    """Return a forward for nn.Linear layers that routes through `rt`.

    A layer's routes are keyed by the input's shape alone: its weight never changes
    layout, and a route to the default is right for any input, so a call the default
    keeps costs one dict lookup over the layer's own forward. A layer whose routes all
    keep the default settles after `rt.settle_after` such calls in a row: it gets its own
    forward back and costs nothing (`Runtime.settle`).
    """
    routes: dict[Any, Route] = {}
    rt.layer_routes.append(routes)
    quiet = _Quiet(rt.settle_after)

    def forward(self: Any, input: Any) -> Any:
        route = None if _is_compiling() else routes.get(input.size())
        if route is not None and route.runner is None and not torch.is_grad_enabled():
            route.calls += 1
            quiet.calls += 1
            if quiet.calls == quiet.after:
                rt.settle(self, forward, routes)
            return _linear(input, self.weight, self.bias)
        weight, bias = self.weight, self.bias
        if route is None or input.dtype is not weight.dtype or not input.is_contiguous():
            if _is_compiling() or input.dtype is not weight.dtype or not input.is_contiguous():
                return linear_with(rt, input, weight, bias)
            k = input.shape[-1]
            sig = ("linear-layer", id(self), input.shape, input.get_device(), _tf32(input))
            route = rt.routes.get(sig) or rt.resolve(sig, input.reshape(-1, k), weight.t())
            routes[input.shape] = route
            quiet.calls = 0
        route.calls += 1
        flat = input.dim() == 2
        if _grad_enabled():
            if route.runner is None and not _needs_grad(input, weight, bias):
                return _linear(input, weight, bias)
            a = input if flat else input.view(-1, input.shape[-1])
            out = _dispatch(rt, route, a, weight.t(), bias)
        elif route.runner is None or route.held:
            return _linear(input, weight, bias)
        elif route.checks_left and route.in_trial:  # the routed call against the layer's own
            return rt.trial_call(
                route,
                lambda: routed(route, input, weight, bias),
                lambda: _linear(input, weight, bias),
            )
        else:  # inference's hit: the weight's transposed view is made once
            wt = transposed.of(weight)
            out = rt.run(route, input if flat else input.view(-1, input.shape[-1]), wt)
            if bias is not None:
                out.add_(bias)
        return out if flat else out.view(*input.shape[:-1], weight.shape[0])

    def routed(route: Route, input: Any, weight: Any, bias: Any) -> Any:
        """Inference's hit as a trial makes it: the winner, the bias, the output's shape."""
        a = input if input.dim() == 2 else input.view(-1, input.shape[-1])
        out = rt.call_winner(route, a, transposed.of(weight))
        if bias is not None:
            out.add_(bias)
        return out.view(*input.shape[:-1], weight.shape[0])

    transposed = _Transposed()
    return forward


class _Transposed:
    """A layer's weight as W^T, kept while the weight is the same tensor on the same memory.

    Made under no_grad, for inference's calls only: a view made there carries no autograd
    history, so a call that trains makes its own. A new tensor (`layer.weight = ...`) or new
    memory under the old one (`weight.data = ...`, `module.to(...)`) makes it anew.
    """

    __slots__ = ("ptr", "view", "weight")

    def __init__(self) -> None:
        self.weight: Any = None
        self.ptr = 0
        self.view: Any = None

    def of(self, weight: Any) -> Any:
        ptr = weight.data_ptr()
        if weight is not self.weight or ptr != self.ptr:
            self.weight, self.ptr, self.view = weight, ptr, weight.t()
        return self.view


def conv1d_layer(rt: Runtime) -> Callable[[Any, Any], Any]:
    """Return a forward for transformers' Conv1D (y = addmm(bias, x, W), W stored [in, out])."""
    routes: dict[Any, Route] = {}
    rt.layer_routes.append(routes)
    quiet = _Quiet(rt.settle_after)

    def forward(self: Any, x: Any) -> Any:
        route = None if _is_compiling() else routes.get(x.shape)
        if route is not None and route.runner is None and not torch.is_grad_enabled():
            route.calls += 1
            quiet.calls += 1
            if quiet.calls == quiet.after:
                rt.settle(self, forward, routes)
            out = _addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
            return out.view(*x.shape[:-1], self.nf)
        weight, bias = self.weight, self.bias
        a = x.view(-1, x.shape[-1])
        if route is None or x.dtype is not weight.dtype or not x.is_contiguous():
            if _is_compiling() or x.dtype is not weight.dtype or not x.is_contiguous():
                return addmm_with(rt, bias, a, weight).view(*x.shape[:-1], self.nf)
            sig = ("conv1d-layer", id(self), x.shape, x.get_device(), _tf32(x))
            route = rt.routes.get(sig) or rt.resolve(sig, a, weight)
            routes[x.shape] = route
            quiet.calls = 0
        route.calls += 1
        if (route.runner is None or route.held) and not _needs_grad(x, weight, bias):
            return _addmm(bias, a, weight).view(*x.shape[:-1], self.nf)
        if route.checks_left and route.in_trial and not _needs_grad(x, weight, bias):
            # the routed call against the layer's own, each whole
            shape = (*x.shape[:-1], self.nf)
            return rt.trial_call(
                route,
                lambda: rt.call_winner(route, a, weight).add_(bias).view(shape),
                lambda: _addmm(bias, a, weight).view(shape),
            )
        return _dispatch(rt, route, a, weight, bias).view(*x.shape[:-1], self.nf)

    return forward


def _linear_via(rt: Runtime, input: Any, weight: Any, bias: Any) -> Any:
    a = input.reshape(-1, input.shape[-1])
    out = traced_product(a, weight.t(), rt=rt, none_if_default=True)
    if out is None:
        return _linear(input, weight, bias)
    out = out if bias is None else out + bias
    return out.view(*input.shape[:-1], weight.shape[0])


mm = _routing("mm", _mm)
bmm = _routing("bmm", _bmm)
_same_rank_matmul = _routing("matmul", _matmul)


def addmm(
    input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1, out: Any = None
) -> Any:
    plain = out is None and beta == 1 and alpha == 1 and _plain(mat1, mat2)
    if not plain or STATE.active is None or type(input) not in _PLAIN:
        kwargs = {"beta": beta, "alpha": alpha} | ({"out": out} if out is not None else {})
        return _addmm(input, mat1, mat2, **kwargs)
    return addmm_with(STATE.active, input, mat1, mat2)


def addmm_with(rt: Runtime | None, bias: Any, a: Any, b: Any) -> Any:
    """torch.addmm(bias, A, B) through `rt` (beta = alpha = 1)."""
    return route_product(rt, "addmm", a, b, bias, lambda: _addmm(bias, a, b))


def matmul(input: Any, other: Any, *, out: Any = None) -> Any:
    rt = STATE.active
    if rt is None or out is not None or not _plain(input, other):
        return _matmul(input, other, out=out) if out is not None else _matmul(input, other)
    da, db = input.dim(), other.dim()
    if da == db and da in (2, 3):
        return _same_rank_matmul(input, other)
    if da > 2 and db == 2:
        # [.., M, K] @ [K, N] is one GEMM of M * .. rows, as torch itself runs it.
        a = input.reshape(-1, input.shape[-1])
        flat = route_product(rt, "matmul", a, other, None, lambda: _mm(a, other))
        return flat.view(*input.shape[:-1], other.shape[-1])
    return _matmul(input, other)


def tensor_matmul(self: Any, other: Any) -> Any:
    return ROUTING[_MATMUL](self, other)


ROUTING: dict[tuple[Any, str], Callable[..., Any]] = {
    (F, "linear"): linear,
    (torch, "mm"): mm,
    (torch, "matmul"): matmul,
    (torch, "addmm"): addmm,
    (torch, "bmm"): bmm,
    (torch.Tensor, "__matmul__"): tensor_matmul,
}
# The name of the signatures under which each function routes its products (`Runtime.routes`).
ROUTED_AS: dict[tuple[Any, str], str] = {
    (F, "linear"): "linear",
    (torch, "mm"): "mm",
    (torch, "matmul"): "matmul",
    (torch, "addmm"): "addmm",
    (torch, "bmm"): "bmm",
    (torch.Tensor, "__matmul__"): "matmul",
}


_MATMUL = (torch, "matmul")


class _Native:
    """The native routers, once `install_native` has run (`native.py`)."""

    module: Any = None
    tried = False


NATIVE = _Native()


def install_native() -> bool:
    """Route torch's functions through the native routers from now on, where they build.

    Each router runs the Python routing version for every call it does not settle itself;
    torch.compile traces the Python version in its place (`substitute_in_graph`).
    """
    if NATIVE.tried:
        return NATIVE.module is not None
    NATIVE.tried = True
    from agents.runtime import native

    module = native.load()
    if module is None:
        return False
    module.init(STATE, torch.Tensor, torch.nn.Parameter, _allow_tf32, settle_functions)
    kinds = {"mm": module.MM, "bmm": module.MM, "matmul": module.MATMUL}
    kinds |= {"addmm": module.ADDMM, "linear": module.LINEAR}
    for ident, key in enumerate(k for k in ROUTING if k[1] in kinds):
        name = key[1]
        router = module.router(kinds[name], ident, name, ORIGINAL[name], ROUTING[key])
        torch._dynamo.substitute_in_graph(router, skip_signature_check=True)(ROUTING[key])
        ROUTING[key] = router
    NATIVE.module = module
    if STATE.routed:  # a block is open: its functions become the native ones now
        _patch(True, list(STATE.routed))
    return True


def _patch(routing: bool, keys: Iterable[tuple[Any, str]] | None = None) -> None:
    """Install the routing versions of `keys` (all: None), or give torch its own back."""
    for key in list(ROUTING if keys is None else keys):
        owner, name = key
        setattr(owner, name, ROUTING[key] if routing else ORIGINAL[name])
        if routing:
            STATE.routed.add(key)
        else:
            STATE.routed.discard(key)


def activate(runtime: Runtime | None) -> None:
    """Make `runtime` the one that routes calls, swapping torch's functions in."""
    if not NATIVE.tried:
        install_native()
    if len(STATE.routed) < len(ROUTING):
        _patch(True)
    STATE.stack.append(STATE.active)
    STATE.active = runtime


def deactivate() -> None:
    """Restore the runtime active before; the last one out restores torch's functions."""
    STATE.active = STATE.stack.pop()
    if not STATE.stack and STATE.routed:
        _patch(False)


def settle_functions(rt: Runtime) -> bool:
    """Give torch back its own functions whose products run no winner, for the rest of
    `rt`'s block; return whether any was given back.

    Only the one open block's runtime settles (a nested block routes again). A settled
    function sees no new products: `unsettle_functions` (a warm start, a version change)
    routes them again.
    """
    rt.quiet_calls = 0
    if STATE.active is not rt or len(STATE.stack) != 1 or not STATE.routed:
        return False
    winners = rt.functions_with_winners()
    if winners is None:
        return False
    quiet = [key for key in STATE.routed if ROUTED_AS[key] not in winners]
    if not quiet:
        return False
    _patch(False, quiet)
    rt.functions_settled = True
    return True


def unsettle_functions(rt: Runtime) -> None:
    """Route torch's functions through `rt` again, if its block is open and some settled."""
    if rt.functions_settled:
        rt.functions_settled = False
        if STATE.active is rt and STATE.stack:
            _patch(True)


# -- torch.compile ----------------------------------------------------------------------------
@torch._dynamo.assume_constant_result  # type: ignore[untyped-decorator]
def slot_for(key: tuple[Any, ...]) -> int:
    """Resolve a product's route while tracing; return its slot, or -1 for the default."""
    index, dtype, tf32, device, a_shape, a_stride, b_shape, b_stride = key
    rt = RUNTIMES[index]
    a = torch.empty_strided(a_shape, a_stride, dtype=_DTYPES[dtype], device="meta")
    b = torch.empty_strided(b_shape, b_stride, dtype=_DTYPES[dtype], device="meta")
    sig = ("traced", *key)
    route = rt.routes.get(sig)
    if route is None:
        from agents.runtime.keys import gemm_problem

        problem = gemm_problem(a, b, tf32=tf32)
        with suspended():
            route = rt.decide(problem, capturing=False) or Route(problem=problem)
        rt.routes[sig] = route
    if route.runner is None:
        return -1
    with suspended():
        if not rt.admit_compiled(route):
            return -1
    del device
    return ops.add_slot(rt, route)


_DTYPES = {str(d): d for d in (torch.bfloat16, torch.float16, torch.float32)}
# Runtimes a compiled graph may name: a traced call's key holds its index here.
RUNTIMES: list[Runtime] = []


def register(rt: Runtime) -> int:
    """Return the index of `rt` among the runtimes traced calls name."""
    for i, known in enumerate(RUNTIMES):
        if known is rt:
            return i
    RUNTIMES.append(rt)
    return len(RUNTIMES) - 1


def traced_product(a: Any, b: Any, *, rt: Runtime, none_if_default: bool = False) -> Any:
    """Return A @ B through `tps::product` when a winner is routed, else the default product.

    With `none_if_default`, return None instead of the default, for callers whose own
    original call (a fused addmm, say) is the better default.
    """
    if str(a.dtype) not in _DTYPES:
        return None if none_if_default else _matmul(a, b)
    tf32 = bool(a.dtype is _F32 and a.device.type == "cuda" and _FLAGS.allow_tf32)
    key: tuple[Any, ...] = (rt.index, str(a.dtype), tf32, str(a.device), tuple(a.shape))
    key += (tuple(a.stride()), tuple(b.shape), tuple(b.stride()))
    slot = slot_for(key)
    if slot < 0:
        return None if none_if_default else _matmul(a, b)
    return torch.ops.tps.product(a, b, slot)
