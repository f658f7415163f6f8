"""The runtime on CUDA: each runner on the program's tensors, tune mode, graph capture, compile."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

from agents.cache import CacheEntry, ProbeCache  # noqa: E402
from agents.ops.gemm import gemm_operands  # noqa: E402
from agents.runtime import AdmissionSettings, Mode, RuntimeSession, open_session, tune, tuned  # noqa: E402
from agents.runtime.keys import gemm_problem  # noqa: E402
from tests.gpu.conftest import NO_NVMATH, NVMATH  # noqa: E402
from tps.candidate import Candidate  # noqa: E402

pytestmark = pytest.mark.gpu
NVIDIA = torch.version.hip is None
# Any winner is admitted, and no step check undoes it: these tests count what routes.
ANY_GAIN = AdmissionSettings(min_gain=-1.0, rounds=3, target_us=500.0, max_reps=20, step_pairs=0)


def session_with(tmp_path, winner, problem, admission=ANY_GAIN, **kwargs) -> RuntimeSession:
    session = open_session(
        device="cuda", cache=ProbeCache(tmp_path / "cache.json"), bans=tmp_path / "b.json",
        admission=admission, **kwargs,
    )  # fmt: skip
    rt = session.runtime
    rt.cache.merge(
        [
            CacheEntry(
                problem=problem,
                hardware_fingerprint=rt.hardware.fingerprint(),
                software_key=rt.hardware.software_key(),
                winner=winner,
                run_id=str(uuid.uuid4()),
            )
        ]
    )
    return session


def fleet_host(tmp_path, name) -> RuntimeSession:
    """A host of the fleet: a session with a cache and bans of its own."""
    return open_session(
        device="cuda",
        cache=ProbeCache(tmp_path / f"{name}.json"),
        bans=tmp_path / f"{name}-b.json",
    )


def offered(backend, problem, limit=4):
    from agents.probe.device import open_device
    from agents.probe.settings import ProbeSettings
    from agents.providers.table import create_provider

    device = open_device("cuda")
    provider = create_provider(backend, settings=ProbeSettings())
    operands = gemm_operands(problem, device.torch_device, seed=1)
    return provider.candidates(problem, device, limit=limit, operands=operands)


def linear_relu():
    """A bf16 Linear(1024, 3072), an input of 32 rows and relu(layer(x)) computed eagerly."""
    layer = torch.nn.Linear(1024, 3072, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        return layer, x, torch.relu(layer(x))


def close_to_default(out, a, b, dtype="bf16"):
    from agents.ops.base import TOLERANCE, relative_error

    err = relative_error(out, (a.double() @ b.double()))
    return err <= TOLERANCE[dtype], err


@pytest.mark.parametrize(
    "backend,shape",
    [("padded", (64, 4095, 1024)), ("triton", (256, 1024, 512)), ("cublaslt", (256, 1024, 512))],
)
def test_each_runner_runs_its_winner_on_fresh_tensors(tmp_path, backend, shape):
    if backend == "cublaslt" and not NVIDIA:
        pytest.skip("cuBLASLt is NVIDIA only")
    if backend == "cublaslt" and not NVMATH:
        pytest.skip(NO_NVMATH)
    m, n, k = shape
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    x0 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x0, w.t(), tf32=False)
    (winner, *_) = offered(backend, problem)
    session = session_with(tmp_path, winner, problem)
    with torch.no_grad(), tuned(session):
        for _ in range(5):  # new operands each call, as a program's activations are
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            y = F.linear(x, w)
            ok, err = close_to_default(y, x, w.t())
            assert ok, f"{winner.label()}: relative error {err:.2e}"
    (route,) = session.runtime.decisions()
    assert route.runner is not None, route.reason
    if backend == "cublaslt":  # after the first call, launched without nvmath's execute
        assert route.runner.lean
    session.close()


def test_tune_mode_probes_then_captures_in_a_cuda_graph(tmp_path):
    layer = torch.nn.Linear(1024, 4095, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    session = open_session(
        device="cuda", cache=tmp_path / "cache.json", bans=tmp_path / "b.json", mode=Mode.TUNE
    )
    tune(layer, session)
    with torch.no_grad():
        eager = layer(x)  # probes (within the budget), admits, dispatches
        assert session.runtime.stats.probes == 1
        static_x = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            layer(static_x)  # warm on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            static_y = layer(static_x)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        expected = F.linear(static_x, layer.weight, layer.bias)
    ok, err = close_to_default(static_y - layer.bias, static_x, layer.weight.t())
    assert ok, f"graph replay relative error {err:.2e}"
    assert torch.allclose(eager.float(), F.linear(x, layer.weight, layer.bias).float(), atol=0.5)
    assert static_y.shape == expected.shape
    session.close()


def test_compile_fullgraph_with_inductor_keeps_the_winner(tmp_path):
    from agents.runtime import ops

    torch._dynamo.reset()
    layer = torch.nn.Linear(1024, 4095, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 32, 1024, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x.reshape(-1, 1024), layer.weight.detach().t(), tf32=False)
    padded = Candidate(backend="padded", params={"align": 64, "inner": "vendor-default"})
    session = session_with(tmp_path, padded, problem)
    model = torch.nn.Sequential(layer, torch.nn.GELU())
    tune(model, session)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        got = compiled(x)
        expected = F.gelu(F.linear(x, layer.weight, layer.bias))
    assert [s.route.candidate for s in ops.SLOTS if s.route.problem == problem] == [padded]
    err = float((got.float() - expected.float()).norm() / expected.float().norm())
    assert err < 2e-2, err
    session.close()


def test_training_step_dispatches_backward_products(tmp_path):
    layer = torch.nn.Linear(1024, 4095, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    session = open_session(
        device="cuda", cache=tmp_path / "cache.json", bans=tmp_path / "b.json", mode=Mode.TUNE
    )
    tune(layer, session)
    layer(x).float().square().mean().backward()
    gx = x.grad.clone()
    x.grad = None
    from agents.runtime import untune

    untune(layer)
    layer.zero_grad()
    layer(x).float().square().mean().backward()
    err = float((gx.float() - x.grad.float()).norm() / x.grad.float().norm())
    assert err < 3e-2, err
    problems = {r.problem.dims["m"] for r in session.runtime.decisions()}
    assert len(session.runtime.decisions()) == 3, problems  # forward, dgrad, wgrad
    session.close()


def test_layers_without_a_winner_settle_and_a_winner_keeps_routing(tmp_path):
    """A model whose layers route nothing runs its own forwards; a routed layer stays."""
    head = torch.nn.Linear(1024, 4095, device="cuda", dtype=torch.bfloat16)  # unaligned N
    body = torch.nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16)
    model = torch.nn.Sequential(body, head)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x, head.weight.detach().t(), tf32=False)
    padded = Candidate(backend="padded", params={"align": 64, "inner": "vendor-default"})
    session = session_with(tmp_path, padded, problem)
    with torch.no_grad():
        expected = model(x)
        tune(model, session)
        for _ in range(session.runtime.settle_after + 1):
            got = model(x)
    assert "forward" not in vars(body) and "forward" in vars(head)
    assert [r.candidate for r in session.runtime.decisions() if r.runner] == [padded]
    err = float((got.float() - expected.float()).norm() / expected.float().norm())
    assert err < 2e-2, err
    session.close()


def test_a_winner_that_slows_the_models_steps_goes_back_to_the_default(tmp_path):
    """Timed by events on the stream: a winner padded to 4096 in every dimension does 64x
    the work; admitted with no trial, the model's steps alone send it back."""
    body = torch.nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16)
    model = torch.nn.Sequential(body, torch.nn.GELU())
    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x, body.weight.detach().t(), tf32=False)
    wasteful = Candidate(backend="padded", params={"align": 4096, "inner": "vendor-default"})
    steps_only = AdmissionSettings(
        min_gain=-1.0, rounds=3, target_us=500.0, max_reps=20, trial_calls=0, step_pairs=6
    )
    session = session_with(tmp_path, wasteful, problem, admission=steps_only)
    with torch.no_grad():
        expected = model(x)
        tune(model, session)
        outputs = [model(x) for _ in range(1 + 2 * steps_only.step_pairs)]
    (route,) = [r for r in session.runtime.decisions() if r.problem == problem]
    assert route.runner is None and route.reason.startswith("lost in the model's steps")
    assert route.step_gain is not None and route.step_gain < -0.3, route.reason
    for got in outputs:
        err = float((got.float() - expected.float()).norm() / expected.float().norm())
        assert err < 2e-2, err
    session.close()


def test_compiled_searches_a_product_once_and_a_second_host_compiles_it_with_no_search(tmp_path):
    """Host 1's compile searches each GEMM and records it; host 2 times only the shortlist."""
    import torch._inductor.config as inductor_config

    from agents.runtime import compiled

    layer, x, reference = linear_relu()

    first, runs = fleet_host(tmp_path, "host1"), []
    first.runtime.on_probe = runs.append
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        torch._dynamo.reset()
        f1 = torch.compile(lambda t: torch.relu(layer(t)))
        with compiled(first) as fleet1:
            y1 = f1(x)
        assert fleet1.stats.searched >= 1 and runs and fleet1.stats.hits == 0
        runs = [r for r in runs if r.problem.op == "gemm"]  # not the kernels' tuning
        assert runs and all(len(r.measurements) > 1 and r.winner_id for r in runs)
        second = fleet_host(tmp_path, "host2")  # the fleet's answer, as the service would give it
        second.runtime.cache.merge(first.runtime.cache.entries())
        torch._dynamo.reset()
        f2 = torch.compile(lambda t: torch.relu(layer(t)))
        with compiled(second, shortlist=3) as fleet2:
            for run in runs:  # the fleet's rankings, as the service would give them
                fleet2.learn(run)
            y2 = f2(x)
    assert fleet2.stats.hits >= 1 and fleet2.stats.searched == 0
    assert fleet2.stats.served > fleet2.stats.hits  # more than the winner alone
    torch.testing.assert_close(y1, reference, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(y2, reference, atol=2e-2, rtol=2e-2)
    first.close(), second.close()


def test_compile_searches_then_compiles_again_from_its_records(tmp_path):
    """`compile`: host 1's first compile searches and records; the program it returns is
    compiled again from those records, with no search, and computes the same."""
    from agents.runtime import compile as tps_compile
    from agents.runtime import inductor

    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 1024)
    ).to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        reference = model(x)
    first = fleet_host(tmp_path, "host1")
    blocks: list = []
    real = inductor.compiled

    def watched(session, **how):
        block = real(session, **how)
        blocks.append(block)
        return block

    inductor.compiled = watched
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            program = tps_compile(model, (x,), session=first, tune_kernels=False)
            out = program(x)
    finally:
        inductor.compiled = real
    assert len(blocks) == 2
    assert first.runtime.cache.entries()  # the searches, recorded
    torch.testing.assert_close(out, reference, atol=3e-2, rtol=3e-2)
    first.close()


def test_compiled_compiles_the_fastest_of_a_searchs_finalists_timed_again(tmp_path, monkeypatch):
    """Host 1 times its search's finalists again; inductor compiles their fastest median,
    which is the winner recorded for the fleet."""
    import re

    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    from agents.runtime import compiled, inductor

    # every valid configuration is a finalist (up to FINALISTS): whatever this GPU's search
    # gives, there are several to time again
    monkeypatch.setattr(inductor, "FINALIST_SPREAD", 1e9)

    layer = torch.nn.Linear(1024, 1024, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
    first, runs = fleet_host(tmp_path, "host1"), []
    first.runtime.on_probe = runs.append
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        torch._dynamo.reset()
        f = torch.compile(lambda t: layer(t))
        with compiled(first, tune_kernels=False) as fleet:
            y, codes = run_and_get_code(f, x)
    assert fleet.stats.searched == 1 and fleet.stats.retimed == 1
    (run,) = runs
    again = [m for m in run.measurements if m.samples == fleet.rounds]
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert len(again) >= 2 and winner in again
    assert winner.median_us == min(m.median_us for m in again)
    code = "\n".join(codes)
    params = winner.candidate.params
    if str(params["template_id"]).startswith("aten::"):
        assert "extern_kernels.mm" in code
    else:
        for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            assert re.search(rf"{name}\s*:\s*tl.constexpr\s*=\s*{params[name]}\b", code), name
    torch.testing.assert_close(y, x @ layer.weight.t(), atol=2e-2, rtol=2e-2)
    first.close()


def decode_step():
    """A batch-1 decode step (norm, up, silu, down, residual), its input and its output."""
    up = torch.nn.Linear(1024, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    down = torch.nn.Linear(4096, 1024, bias=False, device="cuda", dtype=torch.bfloat16)
    norm = torch.nn.RMSNorm(1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)

    def step(t):
        return t + down(F.silu(up(norm(t))))

    with torch.no_grad():
        return step, x, step(x)


def tuned_kernels(tmp_path, step, x):
    """Host 1 compiles `step` and tunes its kernels: the host, its output, its kernels' runs."""
    import torch._inductor.config as inductor_config

    from agents.runtime import compiled

    first, runs = fleet_host(tmp_path, "host1"), []
    first.runtime.on_probe = runs.append
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        torch._dynamo.reset()
        f1 = torch.compile(step, dynamic=False)
        with compiled(first) as fleet1:
            y1 = f1(x)
    assert fleet1.stats.kernels_tuned >= 1 and fleet1.stats.kernel_hits == 0
    kernel_runs = [r for r in runs if r.problem.op == "inductor_kernel"]
    assert len(kernel_runs) == fleet1.stats.kernels_tuned
    assert all(r.winner_id and any(m.valid for m in r.measurements) for r in kernel_runs)
    # the next compile is another host's process: none of host 1's tuned kernels in memory
    from torch._inductor import async_compile, codecache

    async_compile.CompiledTritonKernels.cache_clear()
    codecache.PyCodeCache.cache_clear()
    torch._dynamo.reset()
    return first, y1, kernel_runs


def test_compiled_tunes_a_decode_step_once_and_a_second_host_runs_it_untuned(tmp_path):
    """Batch-1 products become fused reductions; host 1 tunes each kernel, host 2 tunes none."""
    import torch._inductor.config as inductor_config

    from agents.runtime import compiled

    step, x, reference = decode_step()
    first, y1, _ = tuned_kernels(tmp_path, step, x)
    second = fleet_host(tmp_path, "host2")  # the fleet's answer, as the service would give it
    second.runtime.cache.merge(first.runtime.cache.entries())
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        f2 = torch.compile(step, dynamic=False)
        with compiled(second) as fleet2:
            y2 = f2(x)
            y3 = f2(x)
    assert fleet2.stats.kernel_hits >= 1 and fleet2.stats.kernels_tuned == 0
    assert fleet2.stats.kernel_hits == fleet2.stats.kernel_lookups  # every kernel was known
    for y in (y1, y2, y3):
        torch.testing.assert_close(y, reference, atol=3e-2, rtol=3e-2)
    first.close(), second.close()


def test_the_trial_sees_whether_the_device_waits_on_the_host(tmp_path):
    """Small products launched one after another leave the device idle between them (their
    kernels finish before the host launches the next); large ones keep it busy. Only in the
    first case does the trial count part of the device time a winner saves."""
    from agents.probe.device import open_device

    device = open_device("cuda")
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    big @ big  # a few ms of device time
    assert not device.idle()
    torch.cuda.synchronize()
    assert device.idle()

    def trial_of(m, n, k, calls):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        problem = gemm_problem(x, w.t(), tf32=False)
        (winner, *_) = offered("triton", problem)
        home = tmp_path / f"{m}x{n}x{k}"
        home.mkdir()
        session = session_with(home, winner, problem)
        with torch.no_grad(), tuned(session):
            for _ in range(calls):  # launched one after another, as a program's layers are
                F.linear(x, w)
        torch.cuda.synchronize()
        (route,) = session.runtime.decisions()
        session.close()
        return route

    small = trial_of(32, 256, 256, ANY_GAIN.trial_calls + 4)
    assert small.host_bound is True, small.reason
    large = trial_of(8192, 8192, 8192, ANY_GAIN.trial_calls + 4)
    assert large.host_bound is False, large.reason


def test_the_lean_cublaslt_launch_runs_on_the_current_stream_and_in_a_graph():
    if not NVIDIA:
        pytest.skip("cuBLASLt is NVIDIA only")
    if not NVMATH:
        pytest.skip(NO_NVMATH)
    from agents.probe.device import open_device
    from agents.runtime.runners import CublasLtRunner

    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    problem = gemm_problem(x, w.t(), tf32=False)
    (winner, *_) = offered("cublaslt", problem)
    runner = CublasLtRunner(candidate=winner, problem=problem, device=open_device("cuda"))
    runner(x, w.t())  # plans and executes through nvmath
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = runner(x, w.t())  # lean, on the side stream
        assert runner.lean
        # a launch on any other stream than the capturing one fails the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            static_y = runner(x, w.t())
    torch.cuda.current_stream().wait_stream(side)
    ok, err = close_to_default(y, x, w.t())
    assert ok, f"lean launch: relative error {err:.2e}"
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    ok, err = close_to_default(static_y, x, w.t())
    assert ok, f"graph replay: relative error {err:.2e}"


def test_a_new_gpu_model_searches_only_the_nearest_hardwares_fastest(tmp_path):
    """A GPU model the fleet never compiled on times the most similar hardware's fastest
    configurations of each product, with inductor, and records that search as its own."""
    import torch._inductor.config as inductor_config

    from agents.runtime import compiled

    layer, x, reference = linear_relu()
    first, runs = fleet_host(tmp_path, "host1"), []
    first.runtime.on_probe = runs.append
    second, own = fleet_host(tmp_path, "host2"), []
    # another GPU model to the fleet (the fingerprint holds the SM limit)
    second.runtime.hardware = second.runtime.hardware.model_copy(update={"unit_limit": 66})
    second.runtime.on_probe = own.append
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        torch._dynamo.reset()
        f1 = torch.compile(lambda t: torch.relu(layer(t)))
        with compiled(first, tune_kernels=False):
            f1(x)
        runs = [r for r in runs if r.problem.op == "gemm"]
        assert runs and all(len(r.measurements) > 4 for r in runs)
        torch._dynamo.reset()
        f2 = torch.compile(lambda t: torch.relu(layer(t)))
        with compiled(second, tune_kernels=False, likely=3) as fleet2:
            for run in runs:  # the most similar hardware's searches, as the service gives them
                fleet2.learn(run, nearest=True)
            y2 = f2(x)
    assert fleet2.stats.likely >= 1 and fleet2.stats.searched == fleet2.stats.likely
    assert fleet2.stats.hits == 0
    nearest = {r.problem.key_hash(): {m.candidate.id for m in r.measurements} for r in runs}
    own = [r for r in own if r.problem.op == "gemm"]
    assert own and all(r.hardware.unit_limit == 66 for r in own)
    for run in own:  # the nearest's three fastest, and its fastest extern choice at most
        assert 2 <= len(run.measurements) <= 4
        assert {m.candidate.id for m in run.measurements} <= nearest[run.problem.key_hash()]
    torch.testing.assert_close(y2, reference, atol=2e-2, rtol=2e-2)
    first.close(), second.close()


def new_gpu_kernels(tmp_path: Any, **options: Any) -> tuple[Any, ...]:
    """Host 1 tunes a decode step's kernels; a GPU model new to them (66 SMs) compiles the
    step inside `compiled(**options)` with host 1's tunings as the service gives them
    (nearest). Return its fleet, the kernel runs it recorded, host 1's, and the step's
    output against the reference."""
    import torch._inductor.config as inductor_config

    from agents.runtime import compiled

    step, x, reference = decode_step()
    first, _, kernel_runs = tuned_kernels(tmp_path, step, x)
    second, own = fleet_host(tmp_path, "host2"), []
    second.runtime.hardware = second.runtime.hardware.model_copy(update={"unit_limit": 66})
    second.runtime.on_probe = own.append
    with inductor_config.patch(force_disable_caches=True), torch.no_grad():
        f2 = torch.compile(step, dynamic=False)
        with compiled(second, **options) as fleet2:
            for run in kernel_runs:
                fleet2.learn(run, nearest=True)
            y2 = f2(x)
    first.close(), second.close()
    torch.testing.assert_close(y2, reference, atol=3e-2, rtol=3e-2)
    own = [r for r in own if r.problem.op == "inductor_kernel"]
    assert own and all(r.hardware.unit_limit == 66 for r in own)
    nearest = {r.problem.key_hash(): {m.candidate.id for m in r.measurements} for r in kernel_runs}
    return fleet2, own, nearest


def test_a_new_gpu_model_times_the_nearest_hardwares_fastest_kernel_configurations(tmp_path):
    """A GPU model new to a decode step's kernels times the most similar hardware's fastest
    launch configurations of each, and inductor's own, in place of coordinate descent."""
    fleet2, own, nearest = new_gpu_kernels(tmp_path, kernel_likely=2, kernel_descend=False)
    assert fleet2.stats.kernels_likely >= 1 and fleet2.stats.kernel_hits == 0
    assert fleet2.stats.kernels_likely == fleet2.stats.kernels_tuned
    for run in own:  # inductor's own configuration and the nearest's two fastest, at most
        assert 2 <= len(run.measurements) <= 3
        assert {m.candidate.id for m in run.measurements} <= nearest[run.problem.key_hash()]


def test_kernel_descend_tunes_further_from_the_nearest_hardwares_fastest(tmp_path):
    """With `kernel_descend`, inductor's coordinate descent starts from the fastest of the
    most similar hardware's configurations: what it records holds those it timed first, and
    its winner is no slower than the fastest of them."""
    fleet2, own, nearest = new_gpu_kernels(
        tmp_path, kernel_likely=2, kernel_descend=True, kernel_descend_min_us=0.0
    )
    assert fleet2.stats.kernels_likely >= 1 and fleet2.stats.kernel_hits == 0
    for run in own:
        timed = {m.candidate.id: m.median_us for m in run.measurements}
        likely = [us for cid, us in timed.items() if cid in nearest[run.problem.key_hash()]]
        assert likely and timed[run.winner_id] <= min(likely)
    assert fleet2.stats.kernels_descended == fleet2.stats.kernels_likely


def test_kernel_descend_passes_over_the_kernels_below_its_threshold(tmp_path):
    """A kernel whose fastest likely configuration is shorter than `kernel_descend_min_us`
    is not descended: it records only what it timed among those configurations."""
    fleet2, own, nearest = new_gpu_kernels(
        tmp_path, kernel_likely=2, kernel_descend=True, kernel_descend_min_us=1e6
    )
    assert fleet2.stats.kernels_likely >= 1 and fleet2.stats.kernels_descended == 0
    assert len(fleet2.stats.kernel_likely_us) == fleet2.stats.kernels_likely
    assert all(0 < us < 1e6 for us in fleet2.stats.kernel_likely_us)
    for run in own:
        assert 2 <= len(run.measurements) <= 3


def test_the_native_routers_key_cuda_calls_by_device_and_tf32(tmp_path):
    """On CUDA a call the default keeps stays in C++, and TF32 makes a problem of its own."""
    import sys

    from agents.runtime import patching

    a = torch.randn(64, 96, device="cuda")
    b = torch.randn(96, 80, device="cuda")
    session = open_session(
        device="cuda", cache=ProbeCache(tmp_path / "c.json"), bans=tmp_path / "b.json",
        admission=AdmissionSettings(settle_after=0),
    )  # fmt: skip
    rt = session.runtime
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == patching.__file__:
            entered.append(frame.f_code.co_name)

    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        with torch.no_grad(), tuned(session):
            if patching.NATIVE.module is None:
                pytest.skip("the native routers did not build on this host")
            for tf32 in (False, True):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                expected = patching.ORIGINAL["mm"](a, b)
                torch.mm(a, b)  # decided in Python
                sys.setprofile(profile)
                try:
                    out = torch.mm(a, b)
                finally:
                    sys.setprofile(None)
                assert torch.equal(out, expected)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
        session.close()
    assert entered == []
    assert len(rt.fast) == 2  # one key each way of TF32
    problems = {r.problem.dtype for r in rt.decisions()}
    assert problems == {"fp32", "tf32"}


def test_a_descents_next_configurations_compile_in_inductors_workers(tmp_path, monkeypatch):
    """With `kernel_ahead`, inductor's compile workers compile the configurations a descent
    tries next into Triton's cache (empty here), and the descent's own compile of each reads
    it: much shorter than the workers' compiles took, with the same output."""
    from torch._inductor import async_compile

    if async_compile.get_compile_threads() <= 1:
        pytest.skip("inductor runs no compile workers on a host of one compile thread")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    fleet2, own, _ = new_gpu_kernels(
        tmp_path, kernel_likely=2, kernel_descend=True, kernel_descend_min_us=0.0, kernel_ahead=True
    )
    ahead = fleet2.stats.ahead
    assert fleet2.stats.kernels_descended >= 1
    assert ahead.submitted >= ahead.used >= 1
    # the descent's own compile of each read Triton's cache: it added nothing there, and
    # took a fraction of what the workers' compiles took
    assert ahead.missed == 0
    assert ahead.compile_after_s < 0.5 * ahead.worker_s
