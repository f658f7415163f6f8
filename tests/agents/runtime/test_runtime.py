"""The runtime on the CPU: hits, misses, near ties, faults, versions, record and tune."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from agents.cache import ProbeCache
from agents.daemon.workloads import WorkloadSources, read_shape_rows
from agents.runtime import AdmissionSettings, Mode, RuntimeSession, tune, tuned, untune
from agents.runtime.dispatch import HeadToHead, Trial, program_gain
from agents.runtime.keys import gemm_problem
from tests.agents.runtime.conftest import entry_for, scaled
from tps.candidate import VENDOR_DEFAULT

torch.manual_seed(0)


def linear_problem(x: Any, w: Any):
    return gemm_problem(x.reshape(-1, x.shape[-1]), w.t(), tf32=False)


@pytest.fixture
def operands() -> tuple[Any, Any, Any]:
    return torch.randn(4, 6, 64), torch.randn(48, 64), torch.randn(48)


def test_a_hit_runs_the_cached_winner_and_matches_the_default(make_runtime, cpu_hardware, operands):
    x, w, bias = operands
    winner = scaled(scale=1.0)
    rt = make_runtime(entries=[entry_for(linear_problem(x, w), cpu_hardware, winner)])
    provider = rt.providers["cpu-scaled"]
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w, bias)  # decides the route: validation and head to head
        before = provider.calls
        y = F.linear(x, w, bias)
        assert provider.calls == before + 1
    assert torch.allclose(y, F.linear(x, w, bias), atol=1e-5)
    (route,) = rt.decisions()
    assert route.reason.startswith("hit") and route.candidate == winner
    assert route.calls == 2


def test_a_miss_runs_the_default_and_is_counted(make_runtime, operands):
    x, w, _ = operands
    rt = make_runtime()
    with tuned(RuntimeSession(runtime=rt)):
        y = torch.matmul(x, w.t())
        y2 = torch.matmul(x, w.t())
    assert torch.equal(y, y2)
    assert rt.stats.misses == 1 and rt.providers["cpu-scaled"].calls == 0
    (route,) = rt.decisions()
    assert route.runner is None and route.calls == 2


def test_functions_are_restored_after_the_block(make_runtime):
    originals = (torch.mm, torch.matmul, torch.addmm, torch.bmm, F.linear, torch.Tensor.__matmul__)
    with tuned(RuntimeSession(runtime=make_runtime())):
        assert torch.mm is not originals[0]
    assert (torch.mm, torch.matmul, torch.addmm, torch.bmm, F.linear) == originals[:5]
    assert torch.Tensor.__matmul__ is originals[5]


def test_a_near_tie_goes_to_the_default(make_runtime, cpu_hardware, operands):
    x, w, _ = operands
    impossible = AdmissionSettings(min_gain=10.0, rounds=3, target_us=200.0, max_reps=5)
    rt = make_runtime(
        entries=[entry_for(linear_problem(x, w), cpu_hardware, scaled(scale=1.0))],
        admission=impossible,
    )
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)  # timed head to head at admission
        calls = rt.providers["cpu-scaled"].calls
        F.linear(x, w)
        assert rt.providers["cpu-scaled"].calls == calls  # never dispatched
    (route,) = rt.decisions()
    assert route.runner is None and route.reason.startswith("near tie")
    assert rt.stats.near_ties == 1 and rt.stats.lost_head_to_head == 0


def test_a_winner_slower_than_the_default_is_a_loss_not_a_near_tie(
    make_runtime, cpu_hardware, operands
):
    x, w, _ = operands
    rt = make_runtime(
        entries=[entry_for(linear_problem(x, w), cpu_hardware, scaled(scale=1.0))],
        admission=AdmissionSettings(min_gain=0.01, rounds=3, target_us=200.0, max_reps=5),
    )
    rt.providers["cpu-scaled"].delay_s = 0.002  # every launch of the winner costs 2 ms more
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)
    (route,) = rt.decisions()
    assert route.runner is None and route.reason.startswith("lost head to head"), route.reason
    assert route.gain is not None and route.gain < -0.5
    assert rt.stats.lost_head_to_head == 1 and rt.stats.near_ties == 0


def _slow_default(a: Any, b: Any) -> Any:
    """A default that costs 2 ms a call, so that any winner beats it head to head."""
    time.sleep(0.002)
    return torch.matmul(a, b)


TRIAL = AdmissionSettings(min_gain=0.01, rounds=3, target_us=200.0, max_reps=5, trial_calls=6)


def test_a_winner_that_loses_in_the_program_goes_back_to_the_default(
    make_runtime, cpu_hardware, operands
):
    x, w, _ = operands
    rt = make_runtime(
        entries=[entry_for(linear_problem(x, w), cpu_hardware, scaled(scale=1.0))],
        admission=TRIAL,
        default=_slow_default,
    )
    provider = rt.providers["cpu-scaled"]
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)  # admitted: far faster than the default alone
        (route,) = rt.decisions()
        assert route.runner is not None and route.head_to_head is not None
        assert route.head_to_head.gain > 0.5
        provider.delay_s = 0.01  # in the program, each launch now costs 10 ms of host time
        outputs = [F.linear(x, w) for _ in range(1 + TRIAL.trial_calls)]  # verify, then trial
        assert route.runner is None and route.reason.startswith("lost in the program")
        assert route.program_gain is not None and route.program_gain < -0.5
        assert rt.stats.lost_in_program == 1
        calls = provider.calls
        F.linear(x, w)
        assert provider.calls == calls  # the default runs from now on
    # the trial's outputs are the product, whichever side ran
    for y in outputs:
        assert torch.allclose(y, x @ w.t(), atol=1e-4)


def test_a_winner_that_holds_in_the_program_keeps_running(make_runtime, cpu_hardware, operands):
    x, w, _ = operands
    rt = make_runtime(
        entries=[entry_for(linear_problem(x, w), cpu_hardware, scaled(scale=1.0))],
        admission=TRIAL,
        default=_slow_default,
    )
    provider = rt.providers["cpu-scaled"]
    a, b = x.reshape(-1, x.shape[-1]), w.t()  # torch.mm: its trial's default is the product's
    with tuned(RuntimeSession(runtime=rt)):
        for _ in range(2 + TRIAL.trial_calls):
            torch.mm(a, b)
        (route,) = rt.decisions()
        assert route.runner is not None and route.trial is None
        assert route.program_gain is not None and route.program_gain > 0.5
        calls = provider.calls
        torch.mm(a, b)
        assert provider.calls == calls + 1
    assert rt.stats.lost_in_program == 0


def test_where_the_device_waits_on_the_host_host_time_counts_more():
    # GPT-2 medium's LM head on the H200, in the program: at decode batch 32, a Triton winner
    # saved 108 µs of device time and cost 103 µs more host time (the model ran at 0.985 of
    # the default with it); at prefill, a padded winner saved 1,876 µs for 105 µs more.
    decode = HeadToHead(
        default_device_us=146.6, winner_device_us=38.5, default_host_us=14.1, winner_host_us=46.1
    )
    prefill = HeadToHead(
        default_device_us=2212.0, winner_device_us=335.7, default_host_us=97.0, winner_host_us=211.8
    )
    busy = Trial(calls=4, winner_us=[117.0, 118.0], default_us=[14.0, 15.0], idle=1)
    waiting = dataclasses.replace(busy, idle=2)
    assert not busy.host_bound and waiting.host_bound
    assert program_gain(busy, decode, on_gpu=True) > 0  # all the device time it saves counts
    assert program_gain(waiting, decode, on_gpu=True) < -0.3  # part of it hides behind the host
    at_prefill = Trial(calls=4, winner_us=[196.0, 197.0], default_us=[91.0, 92.0], idle=2)
    assert program_gain(at_prefill, prefill, on_gpu=True) > 1.0
    # on the CPU the host time is the whole call, busy or not
    assert program_gain(waiting, decode, on_gpu=False) == program_gain(busy, decode, on_gpu=False)
    assert not Trial(calls=4).host_bound  # nothing timed yet


def test_every_entry_point_routes_its_problem(make_runtime, cpu_hardware):
    a, b = torch.randn(16, 32), torch.randn(32, 24)
    a3, b3 = torch.randn(3, 16, 32), torch.randn(3, 32, 24)
    bias = torch.randn(24)
    problems = [gemm_problem(a, b, tf32=False), gemm_problem(a3, b3, tf32=False)]
    rt = make_runtime(entries=[entry_for(p, cpu_hardware, scaled(scale=1.0)) for p in problems])
    calls = []
    with tuned(RuntimeSession(runtime=rt)):
        torch.mm(a, b), torch.bmm(a3, b3)  # decide both problems once
        for fn, expected in (
            (lambda: torch.mm(a, b), a.double() @ b.double()),
            (lambda: torch.matmul(a, b), a.double() @ b.double()),
            (lambda: a @ b, a.double() @ b.double()),
            (lambda: torch.addmm(bias, a, b), a.double() @ b.double() + bias.double()),
            (lambda: torch.bmm(a3, b3), a3.double() @ b3.double()),
            (lambda: torch.matmul(a3, b3), a3.double() @ b3.double()),
        ):
            before = rt.providers["cpu-scaled"].calls
            assert torch.allclose(fn().double(), expected, atol=1e-4)
            calls.append(rt.providers["cpu-scaled"].calls - before)
    assert calls == [1, 1, 1, 1, 1, 1]


def test_record_writes_a_workload_the_daemon_reads(make_runtime, tmp_path, operands):
    x, w, bias = operands
    record = tmp_path / "recorded.csv"
    rt = make_runtime(mode=Mode.RECORD)
    session = RuntimeSession(runtime=rt, record=record)
    with tuned(session):
        for _ in range(3):
            F.linear(x, w, bias)
        torch.mm(torch.randn(5, 64), w.t())
        torch.bmm(torch.randn(2, 8, 16), torch.randn(2, 16, 4).transpose(1, 2).contiguous().mT)
    session.close()  # a session given to tuned() is closed by its owner
    rows = read_shape_rows(record, dtype="bf16")
    counts = {(p.dims["m"], p.dims["n"], p.dims["k"]): c for p, c in rows}
    assert counts == {(24, 48, 64): 3, (5, 48, 64): 1, (8, 4, 16): 1}
    batched = next(p for p, _ in rows if p.batch == 2)
    assert batched.trans_b and batched.dtype == "fp32"
    polled = WorkloadSources(shape_csv=[record]).poll()
    assert [p.key_hash() for p in polled] == [p.key_hash() for p, _ in rows]


def test_tune_probes_a_miss_once_then_routes_it(make_runtime, tmp_path, operands, cpu_device):
    from agents.bans import BanList
    from agents.probe.engine import ProbeEngine
    from agents.probe.timers.cpu import CpuTimer
    from agents.providers.table import create_provider
    from agents.telemetry import NullSource
    from tests.agents.conftest import FAST, HOST

    engine = ProbeEngine(
        device=cpu_device,
        providers=[create_provider(n, settings=FAST) for n in ("vendor-default", "cpu-torch")],
        timer=CpuTimer(),
        telemetry=NullSource(),
        bans=BanList(),
        host_id=HOST,
        settings=FAST,
    )
    runs = []
    rt = make_runtime(mode=Mode.TUNE, probe=engine.probe)
    rt.on_probe = runs.append
    x, w, _ = operands
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)
        F.linear(x, w)
        torch.mm(x.reshape(-1, 64), w.t())  # the same problem through another function
    assert rt.stats.probes == 1 and len(runs) == 1
    assert ProbeCache.load(tmp_path / "cache.json").get(linear_problem(x, w), rt.hardware)


def test_a_wrong_winner_is_banned_at_admission(make_runtime, cpu_hardware, operands, tmp_path):
    from agents.bans import BanList

    x, w, _ = operands
    problem = linear_problem(x, w)
    wrong = scaled(scale=1.5)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, wrong)])
    with tuned(RuntimeSession(runtime=rt)):
        y = F.linear(x, w)
    assert torch.allclose(y, x @ w.t(), atol=1e-5)
    assert BanList.load(tmp_path / "bans.json").is_banned(cpu_hardware, problem, wrong)
    assert rt.cache.get(problem, cpu_hardware) is None


def test_a_fault_at_run_time_falls_back_for_good_and_logs_once(
    make_runtime, cpu_hardware, operands, tmp_path, caplog
):
    from agents.bans import BanList

    x, w, bias = operands
    problem = linear_problem(x, w)
    flaky = scaled(scale=1.0, fail_after=10_000)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, flaky)])
    provider = rt.providers["cpu-scaled"]
    caplog.set_level(logging.WARNING, logger="agents.runtime")
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w, bias)
        assert rt.decisions()[0].runner is not None
        provider.calls = 20_000  # from now on every launch raises
        outs = [F.linear(x, w, bias) for _ in range(3)]
        calls_after = provider.calls
    assert all(torch.allclose(o, F.linear(x, w, bias), atol=1e-5) for o in outs)
    assert calls_after == 20_001  # one failed launch, then the default only
    assert BanList.load(tmp_path / "bans.json").is_banned(cpu_hardware, problem, flaky)
    warnings = [r for r in caplog.records if "falls back" in r.getMessage()]
    assert len(warnings) == 1 and problem.canonical() in warnings[0].getMessage()
    assert "illegal memory access" in warnings[0].getMessage()


def test_a_wrong_answer_on_real_operands_returns_the_default(make_runtime, cpu_hardware, operands):
    x, w, _ = operands
    problem = linear_problem(x, w)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))])
    with tuned(RuntimeSession(runtime=rt)):
        route = rt.decide(problem, capturing=False)
        assert route is not None and route.runner is not None
        good = route.runner
        route.runner = lambda a, b: good(a, b) * float("nan")  # the kernel now writes NaN
        y = F.linear(x, w)
    assert torch.allclose(y, x @ w.t(), atol=1e-5)
    assert route.runner is None and "NaN or Inf" in route.reason
    assert rt.stats.faults == 1


def test_a_winner_from_other_versions_is_revalidated_per_candidate(
    make_runtime, cpu_hardware, operands, tmp_path
):
    from agents.bans import BanList

    x, w, _ = operands
    good_problem = linear_problem(x, w)
    bad_problem = linear_problem(torch.randn(7, 64), w)
    old = {"software_key": "blas_version=old|torch_version=1.0", "torch_version": "1.0"}
    rt = make_runtime(
        entries=[
            entry_for(good_problem, cpu_hardware, scaled(scale=1.0), **old),
            entry_for(bad_problem, cpu_hardware, scaled(scale=2.0), **old),
        ]
    )
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)
        F.linear(torch.randn(7, 64), w)
    assert rt.stats.revalidated == 1
    renewed = rt.cache.get(good_problem, cpu_hardware)
    assert renewed is not None and renewed.source == "revalidated"
    assert renewed.software_key == cpu_hardware.software_key()
    assert BanList.load(tmp_path / "bans.json").is_banned(
        cpu_hardware, bad_problem, scaled(scale=2.0)
    )
    # the other version's good entry stays: nothing was thrown away whole
    assert any(e.software_key.endswith("1.0") for e in rt.cache.entries())


def test_the_default_as_winner_routes_nothing(make_runtime, cpu_hardware, operands):
    x, w, _ = operands
    rt = make_runtime(entries=[entry_for(linear_problem(x, w), cpu_hardware, VENDOR_DEFAULT)])
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w)
    (route,) = rt.decisions()
    assert route.runner is None and route.reason == "hit: the default won"


def test_backward_products_are_problems_of_their_own(make_runtime, cpu_hardware):
    x = torch.randn(24, 64, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    grad = torch.randn(24, 48)
    forward = gemm_problem(x.detach(), w.detach().t(), tf32=False)
    dgrad = gemm_problem(grad, w.detach(), tf32=False)  # dX = dY W
    wgrad = gemm_problem(x.detach().t(), grad, tf32=False).model_copy()  # (dW^T) = X^T dY
    entries = [entry_for(p, cpu_hardware, scaled(scale=1.0)) for p in (forward, dgrad, wgrad)]
    rt = make_runtime(entries=entries)
    with tuned(RuntimeSession(runtime=rt)):
        y = F.linear(x, w)
        y.backward(grad)
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    F.linear(x, w).backward(grad)
    assert torch.allclose(gx, x.grad, atol=1e-4) and torch.allclose(gw, w.grad, atol=1e-4)
    routed = {r.problem.key_hash() for r in rt.decisions() if r.runner is not None}
    assert routed == {forward.key_hash(), dgrad.key_hash(), wgrad.key_hash()}


def test_compile_fullgraph_keeps_the_winner_through_the_custom_op(make_runtime, cpu_hardware):
    from agents.runtime import ops

    torch._dynamo.reset()
    layer = torch.nn.Linear(64, 50)  # N = 50: the padded winner returns rows of 64
    x = torch.randn(2, 5, 64)
    problem = linear_problem(x, layer.weight.detach())
    padded = scaled(scale=1.0).model_copy(update={"backend": "padded", "params": {"align": 64}})
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, padded)])
    model = torch.nn.Sequential(layer, torch.nn.GELU())
    tune(model, RuntimeSession(runtime=rt))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        expected = torch.nn.functional.gelu(x @ layer.weight.t() + layer.bias)
        got = compiled(x)
    assert torch.allclose(got, expected, atol=1e-5)
    slots = [s for s in ops.SLOTS if s.route.problem == problem]
    assert slots and slots[0].strides == (64, 1) and slots[0].route.candidate == padded
    # training through the compiled graph: the custom op's backward runs
    x.requires_grad_(True)
    compiled(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    untune(model)
    assert "forward" not in vars(layer)


def test_a_new_host_warm_starts_from_the_fleet_with_zero_probes(
    make_runtime, cpu_hardware, live_service
):
    """Host 1 probed; host 2, empty-cached, asks the real service once and routes the winner."""
    import httpx

    from agents.runtime.fleet import FleetPriors
    from tests.factories import batch_body, probe_run

    layer = torch.nn.Linear(64, 40)
    x = torch.randn(3, 64)
    problem = linear_problem(x, layer.weight.detach())
    unmeasured = linear_problem(torch.randn(9, 64), layer.weight.detach())
    winner = scaled(scale=1.0)
    runs = [
        probe_run(
            hardware=cpu_hardware,
            problem=problem,
            latencies=[(VENDOR_DEFAULT, 10.0), (winner, 5.0)],
            winner_id=winner.id,
        )
    ]
    with live_service.client() as client:
        pushed = client.post(
            "/v1/probe-runs", content=batch_body(runs), headers={"Content-Type": "application/json"}
        )
        assert pushed.status_code in (200, 201), pushed.text

    def no_probe(p):  # a host that can warm-start must not probe
        raise AssertionError(f"probed {p.canonical()}")

    rt = make_runtime(mode=Mode.TUNE, probe=no_probe)
    client = httpx.Client(base_url=live_service.base_url)
    asked = []
    fleet = FleetPriors(client=client, token=live_service.agent_token, margin=0.01)
    fetch = fleet.fetch
    fleet.fetch = lambda hw, ps: asked.append(len(ps)) or fetch(hw, ps)  # type: ignore[method-assign]
    rt.defer_probes = True
    session = RuntimeSession(runtime=rt, fleet=fleet)
    model = torch.nn.Sequential(layer)
    tune(model, session)
    with torch.no_grad():
        model(x)  # first forward: misses run the default, then one request for all of them
        model(torch.randn(9, 64))
        provider = rt.providers["cpu-scaled"]
        before = provider.calls
        y = model(x)
    client.close()
    assert asked == [1]  # one request, after the first forward
    assert rt.stats.probes == 0 and rt.stats.fleet_winners == 1
    assert provider.calls > before
    assert torch.allclose(y, layer(x), atol=1e-5)
    entry = rt.cache.get(problem, cpu_hardware)
    assert entry is not None and entry.source == "fleet" and entry.winner == winner
    assert rt.cache.get(unmeasured, cpu_hardware) is None


def test_the_priors_batch_answers_in_order_and_names_bad_input(live_service, cpu_hardware):
    from tps.schemas import PriorBatch, PriorBatchRequest

    problems = [gemm_problem(torch.randn(m, 8), torch.randn(8, 8), tf32=False) for m in (3, 5)]
    body = PriorBatchRequest(hardware=cpu_hardware, problems=problems).model_dump_json()
    with live_service.client() as client:
        ok = client.post(
            "/v1/priors/batch", content=body, headers={"Content-Type": "application/json"}
        )
        assert ok.status_code == 200, ok.text
        answer = PriorBatch.model_validate_json(ok.content)
        assert [p.problem_hash for p in answer.priors] == [p.key_hash() for p in problems]
        too_many = {"hardware": cpu_hardware.model_dump(mode="json"), "problems": []}
        bad = client.post("/v1/priors/batch", json=too_many)
        assert bad.status_code == 422 and "problems" in bad.text


def test_rocm_winners_go_to_pytorch_tunableop(make_runtime, cpu_hardware, tmp_path):
    from agents.runtime.tunableop import export_for_tunableop
    from agents.tunableop_csv import read_file
    from tps.candidate import Candidate

    a, b = torch.randn(32, 64), torch.randn(64, 16)
    problem = gemm_problem(a, b, tf32=False)
    hip = Candidate(backend="hipblaslt", params={"solution": "Gemm_Hipblaslt_1234"})
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, hip, torch_version="2.11.0")])
    rt.native_backends = frozenset({"hipblaslt", "rocblas"})
    results = tmp_path / "tunableop_results.csv"
    env = export_for_tunableop(rt.cache, results, validators={"ROCM_VERSION": "7.0"})
    assert env == {
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "0",
        "PYTORCH_TUNABLEOP_FILENAME": str(results),
    }
    written = read_file(results)
    assert written.validators["ROCM_VERSION"] == "7.0"
    assert written.validators["PT_VERSION"] == "2.11.0"
    (row,) = written.results
    assert (row.op_signature, row.params_signature) == problem.tunableop_signature()
    assert row.solution == "Gemm_Hipblaslt_1234"
    with tuned(RuntimeSession(runtime=rt)):
        torch.mm(a, b)
    (route,) = rt.decisions()
    assert route.runner is None and "TunableOp" in route.reason


def _layers() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 32))


def test_layers_with_no_winner_get_their_own_forward_back(make_runtime):
    settle = AdmissionSettings(min_gain=-1.0, rounds=3, target_us=200.0, settle_after=5)
    rt = make_runtime(admission=settle)
    model, x = _layers(), torch.randn(3, 64)
    expected = model(x)
    tune(model, RuntimeSession(runtime=rt))
    with torch.no_grad():
        model(x)  # decides both layers' shapes: misses, the default keeps them
        for _ in range(4):
            model(x)
        assert all("forward" in vars(m) for m in model)  # 4 kept calls in a row: routing
        model(x)
        assert not any("forward" in vars(m) for m in model)  # the 5th: settled
        assert torch.equal(model(x), expected)
        calls = [r.calls for r in rt.decisions()]
        model(x)
        assert [r.calls for r in rt.decisions()] == calls  # settled layers cost nothing
    rt.forget(misses=True)  # new fleet winners, say: the layers route again
    assert all("forward" in vars(m) for m in model)
    untune(model)
    rt.forget(misses=True)
    assert not any("forward" in vars(m) for m in model)  # untune is for good


def test_a_layer_with_a_winner_or_a_new_shape_keeps_routing(make_runtime, cpu_hardware):
    settle = AdmissionSettings(min_gain=-1.0, rounds=3, target_us=200.0, settle_after=3)
    model, x = _layers(), torch.randn(3, 64)
    first = model[0]
    problem = gemm_problem(x, first.weight.t(), tf32=False)
    rt = make_runtime(
        entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))], admission=settle
    )
    tune(model, RuntimeSession(runtime=rt))
    with torch.no_grad():
        for i in range(6):
            model(x if i % 2 else torch.randn(10 + i, 64))  # every other call a new shape
        assert "forward" in vars(first)
        assert "forward" in vars(model[1])  # never 3 kept calls in a row
        for _ in range(3):
            model(x)
        assert "forward" not in vars(model[1])
        assert "forward" in vars(first)  # its winner keeps it routing
    assert rt.providers["cpu-scaled"].calls > 0
    untune(model)


def test_a_layers_hit_follows_its_weight_to_new_memory(make_runtime, cpu_hardware):
    layer, x = torch.nn.Linear(64, 48), torch.randn(3, 64)
    problem = gemm_problem(x, layer.weight.t(), tf32=False)
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))])
    tune(layer, RuntimeSession(runtime=rt))
    provider = rt.providers["cpu-scaled"]
    with torch.no_grad():
        layer(x)  # decides the route
        before = provider.calls
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer.weight.data = torch.randn(48, 64)  # new memory under the same parameter
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer.weight = torch.nn.Parameter(torch.randn(48, 64))  # a new parameter
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer.weight.mul_(3.0)  # in place: the same memory
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-4)
    assert provider.calls == before + 4  # every call ran the winner
    untune(layer)


def test_record_mode_never_settles(make_runtime, tmp_path):
    rt = make_runtime(
        mode=Mode.RECORD,
        admission=AdmissionSettings(min_gain=-1.0, rounds=3, target_us=200.0, settle_after=2),
    )
    model, x = _layers(), torch.randn(3, 64)
    tune(model, RuntimeSession(runtime=rt, record=tmp_path / "r.csv"))
    with torch.no_grad():
        for _ in range(6):
            model(x)
    assert all("forward" in vars(m) for m in model)
    assert sorted(r.calls for r in rt.decisions()) == [6, 6]
    untune(model)


SETTLE_3 = AdmissionSettings(
    min_gain=-1.0, rounds=3, target_us=200.0, max_reps=5, trial_calls=0, settle_after=3
)


def test_functions_settle_once_every_product_keeps_the_default(make_runtime):
    rt = make_runtime(admission=SETTLE_3)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with tuned(RuntimeSession(runtime=rt)):
        routed = torch.mm
        torch.mm(a, b)
        F.linear(a, b.t())  # a new call signature: the quiet run starts again, at 1
        torch.mm(a, b)
        assert torch.mm is routed and not rt.functions_settled
        torch.mm(a, b)  # the third kept call in a row with nothing new
        assert rt.functions_settled
        assert torch.mm is not routed and F.linear is not routed
        calls = {id(r): r.calls for r in rt.decisions()}
        torch.mm(a, b), F.linear(a, b.t())
        assert {id(r): r.calls for r in rt.decisions()} == calls  # torch's own functions ran
        rt.forget()  # a warm start or a version change routes them again
        assert torch.mm is routed and not rt.functions_settled
    assert torch.mm is not routed


def test_functions_without_a_winner_settle_beside_one_with_a_winner(make_runtime, cpu_hardware):
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    rt = make_runtime(
        entries=[entry_for(gemm_problem(a, b, tf32=False), cpu_hardware, scaled(scale=1.0))],
        admission=SETTLE_3,
    )
    x, w = torch.randn(5, 16), torch.randn(4, 16)
    with tuned(RuntimeSession(runtime=rt)):
        mm, linear, matmul = torch.mm, F.linear, torch.matmul
        torch.mm(a, b)  # the winner
        for _ in range(3):
            F.linear(x, w)  # kept by the default, three calls in a row
        assert rt.functions_settled
        assert torch.mm is mm  # its product runs a winner: it keeps routing
        assert F.linear is not linear and torch.matmul is not matmul  # torch's own again
        (kept,) = [r for r in rt.decisions() if r.runner is None]
        (won,) = [r for r in rt.decisions() if r.runner is not None]
        calls = kept.calls, won.calls
        F.linear(x, w), torch.mm(a, b)
        assert (kept.calls, won.calls) == (calls[0], calls[1] + 1)  # F.linear ran as torch's
        rt.forget()  # a warm start or a version change routes every function again
        assert F.linear is linear and torch.matmul is matmul and torch.mm is mm
    assert torch.mm is not mm and F.linear is not linear


def test_functions_with_a_winner_or_in_record_mode_keep_routing(
    make_runtime, cpu_hardware, tmp_path
):
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    winner = make_runtime(
        entries=[entry_for(gemm_problem(a, b, tf32=False), cpu_hardware, scaled(scale=1.0))],
        admission=SETTLE_3,
    )
    c = torch.randn(5, 16)
    with tuned(RuntimeSession(runtime=winner)):
        routed = torch.mm
        torch.mm(a, b)
        for _ in range(6):
            torch.mm(c, b)  # a product the default keeps, beside one with a winner
        assert torch.mm is routed
    recorder = make_runtime(mode=Mode.RECORD, admission=SETTLE_3)
    with tuned(RuntimeSession(runtime=recorder, record=tmp_path / "r.csv")):
        for _ in range(6):
            torch.mm(c, b)
        assert torch.mm is routed
    assert [r.calls for r in recorder.decisions()] == [6]


def test_under_compile_a_winner_must_also_beat_inductors_product(make_runtime, cpu_hardware):
    from agents.runtime import ops

    torch._dynamo.reset()
    layer = torch.nn.Linear(64, 48)
    x = torch.randn(2, 5, 64)
    problem = linear_problem(x, layer.weight.detach())
    rt = make_runtime(entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))])
    model = torch.nn.Sequential(layer)
    tune(model, RuntimeSession(runtime=rt))
    with torch.no_grad():
        expected = model(x)  # admitted for eager calls: any gain will do
    (route,) = rt.decisions()
    assert route.runner is not None
    rt.admission = dataclasses.replace(rt.admission, min_gain=10.0)  # none beats inductor so
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        got = compiled(x)
    assert torch.allclose(got, expected, atol=1e-5)
    assert route.compiled_gain is not None and route.compiled_gain < 10.0
    assert not [s for s in ops.SLOTS if s.route is route]  # inductor's product runs
    assert route.runner is not None  # eager calls still run the winner
    untune(model)


def test_the_padded_runner_copies_a_weight_once_until_it_is_written():
    from agents.runtime.runners import PaddedRunner
    from tps.candidate import Candidate

    weight, x = torch.nn.Parameter(torch.randn(50, 64)), torch.randn(3, 64)
    problem = gemm_problem(x, weight.detach().t(), tf32=False)  # N = 50: rows padded to 64
    padded = Candidate(backend="padded", params={"align": 64})
    runner = PaddedRunner(candidate=padded, problem=problem)
    with torch.no_grad():
        wt = weight.t()  # a layer passes the same W^T view on every call
        first = runner(x, wt)
        assert torch.allclose(first, x @ wt, atol=1e-5)
        weight.data.copy_(torch.randn(50, 64))  # unseen by the version counter: the copy is kept
        assert torch.equal(runner(x, wt), first)
        runner.forget_weight()
        assert torch.allclose(runner(x, wt), x @ wt, atol=1e-5)
        weight.mul_(3.0)  # in place, counted: copied again
        assert torch.allclose(runner(x, wt), x @ wt, atol=1e-4)
        other = torch.nn.Parameter(torch.randn(50, 64)).t()  # another weight
        assert torch.allclose(runner(x, other), x @ other, atol=1e-5)
        activation = torch.randn(64, 50)  # not a weight: copied on every call
        before = runner(x, activation)
        activation.data.copy_(torch.randn(64, 50))
        after = runner(x, activation)
    assert torch.allclose(after, x @ activation, atol=1e-5) and not torch.equal(before, after)


class Conv1D(torch.nn.Module):
    """transformers' Conv1D as GPT-2 uses it: y = addmm(bias, x, W), W stored [in, out]."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(torch.randn(nf))

    def forward(self, x: Any) -> Any:
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(*x.size()[:-1], self.nf)


def test_f_linears_trial_times_the_routed_call_against_f_linear(make_runtime, cpu_hardware):
    x, w, bias = torch.randn(3, 5, 64), torch.randn(48, 64), torch.randn(48)
    rt = make_runtime(
        entries=[entry_for(linear_problem(x, w), cpu_hardware, scaled(scale=1.0))],
        admission=TRIAL,
        default=_slow_default,  # the bare product: 2 ms a call
    )
    with tuned(RuntimeSession(runtime=rt)):
        F.linear(x, w, bias)  # admitted head to head
        (route,) = rt.decisions()
        assert route.runner is not None
        rt.providers["cpu-scaled"].delay_s = 0.001  # faster than the bare product, not F.linear
        outputs = [F.linear(x, w, bias) for _ in range(1 + TRIAL.trial_calls)]
    assert route.runner is None and route.reason.startswith("lost in the program")
    for y in outputs:
        assert torch.allclose(y, x @ w.t() + bias, atol=1e-4)


@pytest.mark.parametrize("kind", ["linear", "conv1d"])
def test_a_layers_trial_times_the_routed_call_against_the_layers_own(
    make_runtime, cpu_hardware, kind
):
    # The head to head and a function's trial compare the winner with the bare default
    # product; a layer that keeps the default gets its own forward back (bias fused, no
    # routing), so its trial compares the whole routed call with that forward.
    layer = torch.nn.Linear(64, 48) if kind == "linear" else Conv1D(48, 64)
    x = torch.randn(3, 5, 64)
    b = layer.weight.detach().t() if kind == "linear" else layer.weight.detach()
    problem = gemm_problem(x.reshape(-1, 64), b, tf32=False)
    rt = make_runtime(
        entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))],
        admission=TRIAL,
        default=_slow_default,  # 2 ms a call: the winner wins head to head
    )
    provider = rt.providers["cpu-scaled"]
    tune(layer, RuntimeSession(runtime=rt))
    with torch.no_grad():
        expected = layer.__class__.forward(layer, x)
        layer(x)  # admitted
        (route,) = rt.decisions()
        assert route.runner is not None and route.trial is not None
        provider.delay_s = 0.001  # 1 ms a routed call: faster than the bare default, not the layer
        outputs = [layer(x) for _ in range(1 + TRIAL.trial_calls)]  # verified, then the trial
        assert route.runner is None and route.reason.startswith("lost in the program")
        assert route.program_gain is not None and route.program_gain < -0.5
    for y in outputs:
        assert y.shape == expected.shape and torch.allclose(y, expected, atol=1e-4)
    untune(layer)
