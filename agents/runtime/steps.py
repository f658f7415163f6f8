"""A model's whole steps, timed with its new winners and with the defaults in turn.

A winner's trial times its own calls in the program; what the user runs is the model's
step. On the H200, OPT-350m at decode batch 1 kept one projection's winner that gained
+15.6% in its trial, and the step ran at 0.990 of eager (interval 0.984-0.999). So once
every winner of a model has ended its trial, `tune(model)` times the model's forward
`pairs` times each way, in the order default, winner, winner, default (a drift over the
run cancels out), and keeps the new winners only if the steps with them are faster: one
problem at a time, with every layer that runs it. A step that trains, that is compiled
or that a CUDA graph captures is not timed. On a GPU a step is timed by two events on the
stream (the device's span of the step: the host's launches where the device waits on
them, its kernels where it does not); on the CPU by the host clock. The check times the
loop it runs in: where steps follow each other unsynchronized, a step's last kernels run
while the host launches the next one, and part of what a winner saves there is hidden.
"""

from __future__ import annotations

import logging
import statistics
import time
import weakref
from typing import Any

import torch

from agents.runtime.dispatch import Route, Runtime

log = logging.getLogger("agents.runtime")

# default, winner, winner, default: each pair has one step of each side
_HELD = (True, False, False, True)


class StepCheck:
    """Time a model's steps with and without its winners that no step check has kept yet."""

    def __init__(self, runtime: Runtime, model: Any, *, pairs: int, min_gain: float = 0.0) -> None:
        self.runtime = runtime
        self.model = weakref.ref(model)
        self.pairs = pairs
        self.min_gain = min_gain
        # The model's hooks while the check has something to look at or time: a module with
        # no hooks takes torch's fast call path, so a settled model pays nothing.
        self._hooks: tuple[Any, ...] = ()
        self.checking: list[Route] = []
        self.samples: list[tuple[bool, Any, Any]] = []
        self._step: tuple[bool, Any] | None = None
        # Whether a route was made since this check last found nothing new to take.
        self._pending = True
        # Each route's calls before a step that looks for new winners (routes by id).
        self._counts: dict[int, int] | None = None

    def arm(self) -> None:
        """Hook the model's forward (a new route may be a new winner to time)."""
        self._pending = True
        model = self.model()
        if not self._hooks and model is not None:
            self._hooks = (
                model.register_forward_pre_hook(self.before),
                model.register_forward_hook(self.after),
            )

    def disarm(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = ()

    # forward hooks of the model's root module
    def before(self, module: Any, args: Any) -> None:
        if torch.compiler.is_dynamo_compiling():
            return
        if self._step is not None:  # the last step raised: not counted
            self._hold(held=False)
            self._step = None
        rt = self.runtime
        if not self.checking:
            if not self._pending:
                self.disarm()  # nothing new: until the next new route
            else:  # this step looks: the routes it calls are the model's
                self._counts = {id(r): r.calls for r in rt.routes.values()}
            return
        capturing = rt.device.is_gpu and torch.cuda.is_current_stream_capturing()
        if torch.is_grad_enabled() or capturing:
            return
        held = _HELD[len(self.samples) % 4]
        self._hold(held=held)
        self._step = (held, self._stamp())

    def after(self, module: Any, args: Any, output: Any) -> None:
        if self._counts is not None:
            counts, self._counts = self._counts, None
            routes = self.runtime.routes.values()
            self._look([r for r in routes if r.calls != counts.get(id(r), 0)])
            return
        if self._step is None:
            return
        held, start = self._step
        self._step = None
        self.samples.append((held, start, self._stamp()))
        self._hold(held=False)
        if len(self.samples) >= 2 * self.pairs:
            self._decide()

    # ---------------------------------------------------------------------------------------
    def _look(self, called: list[Route]) -> None:
        """Take the new winners of one problem among the routes a step `called` (every layer
        that runs it), once none of those is in its trial.

        One problem at a time: a winner that gains is not sent back with one that loses,
        and a problem that many layers run is judged on all of them at once. Only what the
        model's step calls: another model of the same runtime has steps of its own.
        """
        if any(r.runner is not None and r.checks_left > 0 for r in called):
            return  # a trial still runs: its calls alternate on their own
        # Every layer's calls of one problem find the same route: each is taken once.
        called = list({id(r): r for r in called}.values())
        new = [r for r in called if r.runner is not None and r.step_gain is None]
        problems = sorted({r.problem.key_hash() for r in new if r.problem is not None})
        if len(problems) <= 1:  # the others, if any, are taken by the next looks
            self._pending = False
        if problems:
            first = problems[0]
            self.checking = [
                r for r in new if r.problem is not None and r.problem.key_hash() == first
            ]
        self.samples = []

    def _hold(self, *, held: bool) -> None:
        for route in self.checking:
            route.held = held

    def _stamp(self) -> Any:
        if self.runtime.device.is_gpu:
            event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            event.record()
            return event
        return time.perf_counter_ns()

    def _ms(self, start: Any, end: Any) -> float:
        if self.runtime.device.is_gpu:
            return float(start.elapsed_time(end))
        return float(end - start) / 1e6

    def _decide(self) -> None:
        if self.runtime.device.is_gpu:
            self.samples[-1][2].synchronize()
        timed = [(held, self._ms(start, end)) for held, start, end in self.samples]
        ratios = []
        for i in range(0, len(timed) - 1, 2):
            (first_held, first), (_, second) = timed[i], timed[i + 1]
            default, winners = (first, second) if first_held else (second, first)
            ratios.append(default / max(winners, 1e-9))
        gain = statistics.median(ratios) - 1
        default_ms = statistics.median(t for held, t in timed if held)
        winners_ms = statistics.median(t for held, t in timed if not held)
        checked, self.checking, self.samples = self.checking, [], []
        kept = gain > self.min_gain
        timing = (
            f"the steps took {winners_ms:.3f} ms with the winners against {default_ms:.3f} ms "
            f"without ({gain:+.1%}, {len(ratios)} pairs)"
        )
        log.info("%d winner(s) %s: %s", len(checked), "kept" if kept else "lost", timing)
        for route in checked:
            route.step_gain = gain
            if not kept:
                route.runner = None
                route.reason = f"lost in the model's steps: {route.reason}, but {timing}"
        if not kept:
            self.runtime.stats.lost_in_steps += len(checked)
