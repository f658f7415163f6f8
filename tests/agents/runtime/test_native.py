"""The native routers: calls whose route is known stay in C++, and answer as Python's do."""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from agents.runtime import AdmissionSettings, RuntimeSession, native, tuned
from agents.runtime import patching as routing
from agents.runtime.dispatch import Route
from agents.runtime.keys import gemm_problem
from tests.agents.runtime.conftest import ANY_GAIN, entry_for, scaled

needs_native = pytest.mark.skipif(
    not native.enabled() or shutil.which("c++") is None,
    reason="the native routers need a C++ compiler (and TPS_RUNTIME_NATIVE not 0)",
)


class Subclass(torch.Tensor):
    pass


NEVER_SETTLE = AdmissionSettings(**{**ANY_GAIN.__dict__, "settle_after": 0})


@contextmanager
def python_frames() -> Iterator[list[str]]:
    """Collect the names of the routing module's Python frames entered while the block runs."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == routing.__file__:
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield names
    finally:
        sys.setprofile(None)


@needs_native
def test_the_routers_are_builtins_while_a_block_is_open(make_runtime):
    with tuned(RuntimeSession(runtime=make_runtime())):
        assert routing.NATIVE.module is not None
        for fn in (torch.mm, torch.bmm, torch.matmul, torch.addmm, F.linear):
            assert type(fn).__name__ == "builtin_function_or_method"
            assert fn is not routing.ORIGINAL[fn.__name__]


@needs_native
@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, a3, b3, bias: torch.mm(a, b),
        lambda a, b, a3, b3, bias: torch.bmm(a3, b3),
        lambda a, b, a3, b3, bias: torch.matmul(a, b),
        lambda a, b, a3, b3, bias: torch.matmul(a3, b3),
        lambda a, b, a3, b3, bias: a @ b,
        lambda a, b, a3, b3, bias: torch.addmm(bias, a, b),
        lambda a, b, a3, b3, bias: F.linear(a, b.t()),
        lambda a, b, a3, b3, bias: F.linear(a, b.t(), bias),
        lambda a, b, a3, b3, bias: F.linear(a, b.t(), bias=bias),
    ],
    ids=["mm", "bmm", "matmul", "matmul-3d", "@", "addmm", "linear", "linear-bias", "bias-kw"],
)
def test_a_call_the_default_keeps_stays_in_cpp_after_its_first(make_runtime, call):
    rt = make_runtime(admission=NEVER_SETTLE)
    a, b, bias = torch.randn(8, 16), torch.randn(16, 12), torch.randn(12)
    a3, b3 = torch.randn(3, 8, 16), torch.randn(3, 16, 12)
    with tuned(RuntimeSession(runtime=rt)):
        first = call(a, b, a3, b3, bias)  # decides the miss in Python, files its key
        with python_frames() as frames:
            again = [call(a, b, a3, b3, bias) for _ in range(5)]
    assert len(rt.fast) == 1
    assert frames in ([], ["tensor_matmul"] * 5)  # `a @ b` enters Tensor's method only
    (route,) = rt.decisions()
    assert route.runner is None and route.calls == 6
    assert rt.quiet_calls == 6
    for out in again:
        assert torch.equal(out, first)


@needs_native
def test_a_hit_goes_from_cpp_to_the_runtimes_run(make_runtime, cpu_hardware):
    a, b = torch.randn(8, 16), torch.randn(16, 12)
    rt = make_runtime(entries=[entry_for(gemm_problem(a, b, tf32=False), cpu_hardware, scaled())])
    provider = rt.providers["cpu-scaled"]
    with tuned(RuntimeSession(runtime=rt)):
        torch.mm(a, b)
        before = provider.calls
        with python_frames() as frames:
            out = torch.mm(a, b)
    assert provider.calls == before + 1  # the winner ran
    assert "product" not in frames and "run" not in frames  # Runtime.run is dispatch.py's
    assert torch.allclose(out, a @ b, atol=1e-5)
    (route,) = rt.decisions()
    assert route.calls == 2


@needs_native
def test_a_replaced_route_is_read_anew(make_runtime, cpu_hardware):
    a, b = torch.randn(8, 16), torch.randn(16, 12)
    rt = make_runtime(admission=NEVER_SETTLE)
    with tuned(RuntimeSession(runtime=rt)):
        torch.mm(a, b)
        (sig,) = rt.routes
        assert rt.fast
        runs: list[int] = []

        def runner(x: Any, y: Any) -> Any:
            runs.append(1)
            return routing.ORIGINAL["mm"](x, y)

        rt.routes[sig] = Route(problem=rt.routes[sig].problem, runner=runner, reason="hit")
        assert not rt.fast
        torch.mm(a, b), torch.mm(a, b)
        assert len(runs) == 2
        del rt.routes[sig]
        assert not rt.fast
        torch.mm(a, b)  # decided again: a miss
    assert len(runs) == 2


@needs_native
@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, out: torch.mm(a, b, out=out),
        lambda a, b, out: torch.addmm(out, a, b, beta=0.5),
        lambda a, b, out: torch.matmul(a.unsqueeze(0).expand(2, -1, -1), b),
        lambda a, b, out: torch.mm(a.to_sparse(), b),
        lambda a, b, out: torch.mm(a.as_subclass(Subclass), b),
    ],
    ids=["out", "beta", "ranks", "sparse", "subclass"],
)
def test_calls_the_routers_do_not_model_answer_as_torchs_own(make_runtime, call):
    a, b = torch.randn(8, 16), torch.randn(16, 12)
    expected = call(a, b, torch.zeros(8, 12))
    rt = make_runtime(admission=NEVER_SETTLE)
    with tuned(RuntimeSession(runtime=rt)):
        for _ in range(3):
            assert torch.allclose(call(a, b, torch.zeros(8, 12)), expected, atol=1e-5)
    assert not rt.fast


@needs_native
def test_calls_that_train_go_through_autograd_in_python(make_runtime):
    rt = make_runtime(admission=NEVER_SETTLE)
    w = torch.randn(12, 16, requires_grad=True)
    x = torch.randn(8, 16)
    with tuned(RuntimeSession(runtime=rt)):
        for _ in range(3):
            F.linear(x, w).sum().backward()
    assert not rt.fast
    assert torch.allclose(w.grad, 3 * x.sum(0).expand(12, -1), atol=1e-4)


@needs_native
def test_functions_settle_from_cpp(make_runtime):
    settle_3 = AdmissionSettings(**{**ANY_GAIN.__dict__, "settle_after": 3})
    rt = make_runtime(admission=settle_3)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with tuned(RuntimeSession(runtime=rt)):
        routed = torch.mm
        torch.mm(a, b)  # Python: decided and filed
        with python_frames() as frames:
            torch.mm(a, b)
            torch.mm(a, b)  # the third quiet call, counted in C++, settles
        assert "product" not in frames and "settle_functions" in frames
        assert rt.functions_settled and torch.mm is not routed


def test_without_a_compiler_python_routes_and_says_why(monkeypatch, caplog):
    import torch.utils.cpp_extension as cpp

    def no_compiler(**kwargs: Any) -> Any:
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp, "load", no_compiler)
    with caplog.at_level(logging.WARNING, logger="agents.runtime"):
        assert native._build() is None
    (record,) = caplog.records
    assert "Ninja is required" in record.getMessage()
    assert native.ENV in record.getMessage()


@pytest.mark.parametrize(("value", "on"), [("0", False), ("off", False), ("1", True), ("", True)])
def test_the_native_routers_can_be_turned_off(monkeypatch, value, on):
    if value:
        monkeypatch.setenv(native.ENV, value)
    else:
        monkeypatch.delenv(native.ENV, raising=False)
    assert native.enabled() is on


@needs_native
def test_build_runtime_builds_the_routers_ahead_of_a_program():
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["agent", "build-runtime"])
    assert result.exit_code == 0, result.output
    assert "built" in result.output and "tps_runtime_fastpath" in result.output


def test_build_runtime_says_why_it_cannot_and_fails(monkeypatch):
    import torch.utils.cpp_extension as cpp
    from typer.testing import CliRunner

    from cli import app

    def no_compiler(**kwargs: Any) -> Any:
        raise RuntimeError("Error checking compiler version for c++")

    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setattr(native, "failure", [])
    monkeypatch.setattr(cpp, "load", no_compiler)
    monkeypatch.delenv(native.ENV, raising=False)
    result = CliRunner().invoke(app, ["agent", "build-runtime"])
    assert result.exit_code == 1
    assert "Error checking compiler version" in " ".join(result.output.split())


@needs_native
def test_each_key_is_filed_with_its_own_route_when_threads_route_at_once(make_runtime):
    import struct
    import threading

    rt = make_runtime(admission=NEVER_SETTLE)
    shapes = [(m, 16, n) for m in (3, 5, 7, 9) for n in (4, 6, 10)]
    errors: list[BaseException] = []

    def work(part: list[tuple[int, int, int]]) -> None:
        try:
            for _ in range(20):
                for m, k, n in part:
                    a, b = torch.randn(m, k), torch.randn(k, n)
                    expected = torch.einsum("mk,kn->mn", a, b)  # not routed
                    assert torch.allclose(torch.mm(a, b), expected, atol=1e-5)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    with torch.no_grad(), tuned(RuntimeSession(runtime=rt)):
        threads = [threading.Thread(target=work, args=(shapes[i::3],)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert len(rt.fast) == len(shapes)
    for key, route in rt.fast.items():
        words = struct.unpack(f"{len(key) // 8}q", key)
        m, k = words[6], words[7]  # A's sizes follow ident, dtypes, device, flags and A's rank
        n = words[6 + 2 * 2 + 2]  # B's rank, then its sizes (K, N)
        assert route.problem.dims == {"m": m, "n": n, "k": k}
        assert route.calls == 20


@needs_native
@pytest.mark.parametrize("rows", [(8,), (2, 4)], ids=["2-d", "3-d"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_f_linears_hit_goes_from_cpp_to_the_runtimes_run(
    make_runtime, cpu_hardware, rows, with_bias
):
    x, w, bias = torch.randn(*rows, 16), torch.randn(12, 16), torch.randn(12)
    b = bias if with_bias else None
    problem = gemm_problem(x.reshape(-1, 16), w.t(), tf32=False)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, scaled())])
    provider = rt.providers["cpu-scaled"]
    expected = F.linear(x, w, b)
    with torch.no_grad(), tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w, b)  # decided, checked and filed in Python
        before = provider.calls
        with python_frames() as frames:
            out = F.linear(x, w, b)
    assert provider.calls == before + 1
    assert "linear" not in frames and "linear_with" not in frames
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5)
    (route,) = rt.decisions()
    assert route.calls == 2


@needs_native
def test_a_held_route_runs_the_default_from_cpp(make_runtime, cpu_hardware):
    x, w = torch.randn(8, 16), torch.randn(12, 16)
    problem = gemm_problem(x, w.t(), tf32=False)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, scaled())])
    provider = rt.providers["cpu-scaled"]
    with torch.no_grad(), tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)
        (route,) = rt.decisions()
        route.held = True  # the step check's default step
        before = provider.calls
        F.linear(x, w), torch.mm(x, w.t())
        assert provider.calls == before
        route.held = False
        F.linear(x, w)
        assert provider.calls == before + 1
