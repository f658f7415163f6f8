"""The runtime: a PyTorch program runs the fleet's winners, with two lines.

    from agents import runtime as tps_runtime

    with tps_runtime.tuned(mode="dispatch"):      # or: tps_runtime.tune(model)
        model(inputs)

`dispatch` runs cached winners and the default elsewhere; `record` also writes the
problems the program ran, with counts, to a shape list that `tps agent run` probes
later; `tune` probes a miss at once (within the probe budget) and then dispatches it.
With `service=`, a host with an empty cache asks the fleet once per model.

    with tps_runtime.compiled(session):           # torch.compile: inductor's GEMM search
        compiled_model(inputs)                    # once per fleet, the winners everywhere
    program = tps_runtime.compile(model, (inputs,), session=session)   # the same, in one call
"""

from __future__ import annotations

import logging
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agents.runtime.dispatch import AdmissionSettings, Mode, Route, Runtime, RuntimeStats
from agents.runtime.inductor import InductorFleet, compile, compiled
from agents.runtime.session import RuntimeSession, open_session

__all__ = [
    "AdmissionSettings",
    "InductorFleet",
    "compile",
    "compiled",
    "Mode",
    "Route",
    "Runtime",
    "RuntimeSession",
    "RuntimeStats",
    "open_session",
    "tune",
    "tuned",
    "untune",
]

log = logging.getLogger("agents.runtime")


@contextmanager
def tuned(session: RuntimeSession | None = None, **options: Any) -> Iterator[RuntimeSession]:
    """Route torch's product functions through a runtime while the block runs.

    Give an open `session`, or the options of `open_session` (device, cache, mode,
    record, service, token, ...). On exit the cache is saved and, in record mode, the
    recorded problems are merged into the record file.
    """
    from agents.runtime import patching

    own = session is None
    session = session or open_session(**options)
    patching.activate(session.runtime)
    try:
        yield session
    finally:
        patching.deactivate()
        if own:
            session.close()


def tune(model: Any, session: RuntimeSession | None = None, **options: Any) -> RuntimeSession:
    """Route `model`'s linear layers (nn.Linear and GPT-2's Conv1D) through a runtime.

    Nothing in torch is swapped: each layer's forward goes through the runtime, also
    inside torch.compile. With a service, the first forward's misses are asked of the
    fleet in one request after it returns. `untune(model)` undoes it.
    """
    import torch

    from agents.runtime import patching

    session = session or open_session(**options)
    rt = session.runtime
    _check_steps(model, rt)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = types.MethodType(patching.linear_layer(rt), module)  # type: ignore[method-assign]
        elif _is_conv1d(module):
            module.forward = types.MethodType(patching.conv1d_layer(rt), module)
    if session.fleet is not None:
        state: dict[str, Any] = {}

        def after_first_forward(*_: Any) -> None:
            state["hook"].remove()
            session.warm_start()

        state["hook"] = model.register_forward_hook(after_first_forward)
    return session


def untune(model: Any) -> None:
    """Give `model`'s layers their own forward back, for good."""
    from agents.runtime import patching

    _stop_checking(model)
    layers = {id(m) for m in model.modules()}
    for rt in patching.RUNTIMES:  # settled layers stay settled
        rt.settled = [(ref, f) for ref, f in rt.settled if id(ref()) not in layers]
    for module in model.modules():
        if "forward" in vars(module):
            del module.forward


# Each tuned model's step check (`steps.StepCheck`), undone by `untune` or a new `tune`.
_STEP_CHECKS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _check_steps(model: Any, rt: Runtime) -> None:
    """Time `model`'s forward with and without its new winners (`AdmissionSettings.step_pairs`)."""
    from agents.runtime.steps import StepCheck

    _stop_checking(model)
    if rt.admission.step_pairs > 0 and rt.mode is not Mode.RECORD:
        check = StepCheck(rt, model, pairs=rt.admission.step_pairs)
        _STEP_CHECKS[model] = check
        rt.on_new_route.append(check.arm)
        check.arm()


def _stop_checking(model: Any) -> None:
    check = _STEP_CHECKS.pop(model, None)
    if check is not None:
        check.disarm()
        check.runtime.on_new_route.remove(check.arm)


def _is_conv1d(module: Any) -> bool:
    # transformers' Conv1D: y = addmm(bias, x, W) with W stored [in, out].
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")
