"""The step check: a model's winners stay only if its whole steps run faster with them."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from agents.runtime import AdmissionSettings, RuntimeSession, patching, tune, untune
from agents.runtime.keys import gemm_problem
from tests.agents.runtime.conftest import entry_for, scaled

# Any winner is admitted and no trial runs: the steps alone decide.
STEPS = AdmissionSettings(
    min_gain=-1.0, rounds=3, target_us=200.0, max_reps=5, trial_calls=0, step_pairs=4
)


def _two_layers() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32))


def _slow_linear(*args: Any) -> Any:
    """A layer's own forward that costs 3 ms more: a default a winner can beat."""
    time.sleep(0.003)
    return F.linear(*args)


def _model_and_route(
    make_runtime: Any, cpu_hardware: Any, admission: AdmissionSettings = STEPS
) -> tuple[Any, Any, Any]:
    model = _two_layers()
    x = torch.randn(3, 64)
    problem = gemm_problem(x, model[0].weight.t(), tf32=False)
    rt = make_runtime(
        entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))], admission=admission
    )
    tune(model, RuntimeSession(runtime=rt))
    return model, x, rt


def test_a_winner_that_slows_the_models_steps_goes_back_to_the_default(make_runtime, cpu_hardware):
    model, x, rt = _model_and_route(make_runtime, cpu_hardware)
    provider = rt.providers["cpu-scaled"]
    with torch.no_grad():
        expected = F.linear(F.relu(F.linear(x, model[0].weight, model[0].bias)), model[2].weight)
        model(x)  # admits the winner: no trial, so the next steps are the check's
        (route,) = [r for r in rt.decisions() if r.runner is not None]
        provider.delay_s = 0.003  # in the program each launch now costs 3 ms more
        calls = provider.calls
        outputs = [model(x) for _ in range(2 * STEPS.step_pairs)]
        assert provider.calls == calls + STEPS.step_pairs  # half the steps held the default
        assert route.runner is None
        assert route.reason.startswith("lost in the model's steps")
        assert route.step_gain is not None and route.step_gain < -0.3
        assert rt.stats.lost_in_steps == 1
        calls = provider.calls
        model(x)
        assert provider.calls == calls  # the default from now on
    for y in outputs:
        assert torch.allclose(y, expected + model[2].bias, atol=1e-4)
    untune(model)


def test_a_winner_that_speeds_up_the_models_steps_stays(
    make_runtime, cpu_hardware, monkeypatch: pytest.MonkeyPatch
):
    model, x, rt = _model_and_route(make_runtime, cpu_hardware)
    provider = rt.providers["cpu-scaled"]
    with torch.no_grad():
        model(x)
        (route,) = [r for r in rt.decisions() if r.runner is not None]
        monkeypatch.setattr(patching, "_linear", _slow_linear)
        for _ in range(2 * STEPS.step_pairs):
            model(x)
        assert route.runner is not None and route.step_gain is not None
        assert route.step_gain > 0.3
        assert rt.stats.lost_in_steps == 0
        calls = provider.calls
        for _ in range(3):
            model(x)
        assert provider.calls == calls + 3  # kept: every call runs the winner, unchecked
        assert not model._forward_pre_hooks and not model._forward_hooks  # nothing to time
        model(torch.randn(5, 64))  # a new shape: a new route, maybe a new winner
        assert len(model._forward_pre_hooks) == 1 and len(model._forward_hooks) == 1
    untune(model)


def test_a_problem_that_many_layers_run_is_judged_and_counted_once(make_runtime, cpu_hardware):
    # Two layers of one shape: one problem, one route that both layers' calls find.
    model = torch.nn.Sequential(torch.nn.Linear(48, 48), torch.nn.Linear(48, 48))
    x = torch.randn(3, 48)
    problem = gemm_problem(x, model[0].weight.t(), tf32=False)
    rt = make_runtime(
        entries=[entry_for(problem, cpu_hardware, scaled(scale=1.0))], admission=STEPS
    )
    tune(model, RuntimeSession(runtime=rt))
    provider = rt.providers["cpu-scaled"]
    with torch.no_grad():
        model(x)
        (route,) = [r for r in rt.decisions() if r.runner is not None]
        provider.delay_s = 0.003
        for _ in range(2 * STEPS.step_pairs):
            model(x)
    assert route.runner is None
    assert route.reason.count("lost in the model's steps") == 1
    assert rt.stats.lost_in_steps == 1
    untune(model)


def test_steps_that_train_are_not_timed(make_runtime, cpu_hardware):
    model, x, rt = _model_and_route(make_runtime, cpu_hardware)
    with torch.no_grad():
        model(x)
    (route,) = [r for r in rt.decisions() if r.runner is not None]
    for _ in range(3 * STEPS.step_pairs):
        model(x).sum().backward()
    assert route.step_gain is None and route.runner is not None
    untune(model)


def test_untune_and_a_second_tune_leave_one_check_or_none(make_runtime, cpu_hardware):
    model, _, rt = _model_and_route(make_runtime, cpu_hardware)
    tune(model, RuntimeSession(runtime=rt))
    assert len(model._forward_pre_hooks) == 1 and len(model._forward_hooks) == 1
    untune(model)
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_the_steps_are_timed_once_the_trials_ended_and_again_for_new_winners(
    make_runtime, cpu_hardware
):
    trials = AdmissionSettings(
        min_gain=-1.0, rounds=3, target_us=200.0, max_reps=5, trial_calls=4, step_pairs=2
    )
    model, x, rt = _model_and_route(make_runtime, cpu_hardware, trials)
    problem = gemm_problem(x, model[0].weight.t(), tf32=False)
    steps = trials.verify_calls + trials.trial_calls + 2 * trials.step_pairs
    with torch.no_grad():
        for _ in range(steps - 1):
            model(x)
        (route,) = [r for r in rt.decisions() if r.problem == problem]
        assert route.trial is None and route.step_gain is None  # the last pair still runs
        model(x)
        assert route.step_gain is not None
        rt.forget({problem.key_hash()})  # a warm start or a version change decides it anew
        for _ in range(steps):
            model(x)
        (again,) = [r for r in rt.decisions() if r.problem == problem]
        assert again is not route and again.step_gain is not None
    untune(model)


def test_each_problems_winner_is_judged_on_its_own(
    make_runtime, cpu_hardware, monkeypatch: pytest.MonkeyPatch
):
    model = _two_layers()
    x = torch.randn(3, 64)
    first = gemm_problem(x, model[0].weight.t(), tf32=False)
    second = gemm_problem(torch.randn(3, 48), model[2].weight.t(), tf32=False)
    slower = scaled(scale=1.0, delay_ms=9.0)  # 6 ms more than the slowed default
    rt = make_runtime(
        entries=[
            entry_for(first, cpu_hardware, slower),
            entry_for(second, cpu_hardware, scaled(scale=1.0)),
        ],
        admission=STEPS,
    )
    tune(model, RuntimeSession(runtime=rt))
    with torch.no_grad():
        model(x)
        monkeypatch.setattr(patching, "_linear", _slow_linear)
        # two problems, one after the other; the second is taken by a step of its own
        for _ in range(2 * 2 * STEPS.step_pairs + 1):
            model(x)
    (lost,) = [r for r in rt.decisions() if r.problem == first]
    (kept,) = [r for r in rt.decisions() if r.problem == second]
    assert lost.runner is None and lost.step_gain is not None and lost.step_gain < -0.1
    assert kept.runner is not None and kept.step_gain is not None and kept.step_gain > 0.1
    assert rt.stats.lost_in_steps == 1
    untune(model)


def test_a_models_check_takes_only_the_winners_its_steps_run(make_runtime, cpu_hardware):
    first, second = torch.nn.Linear(64, 48), torch.nn.Linear(32, 16)
    x, y = torch.randn(3, 64), torch.randn(3, 32)
    problems = [gemm_problem(x, first.weight.t(), tf32=False)]
    problems.append(gemm_problem(y, second.weight.t(), tf32=False))
    entries = [entry_for(p, cpu_hardware, scaled(scale=1.0)) for p in problems]
    rt = make_runtime(entries=entries, admission=STEPS)
    session = RuntimeSession(runtime=rt)
    tune(first, session)
    tune(second, session)
    with torch.no_grad():
        second(y)  # admits the second model's winner; then only the first model runs
        for _ in range(1 + 2 * STEPS.step_pairs):
            first(x)
        (mine,) = [r for r in rt.decisions() if r.problem == problems[0]]
        (other,) = [r for r in rt.decisions() if r.problem == problems[1]]
        assert mine.step_gain is not None
        assert other.step_gain is None and not other.held  # not timed in another's steps
        for _ in range(1 + 2 * STEPS.step_pairs):
            second(y)
        assert other.step_gain is not None
    untune(first)
    untune(second)
