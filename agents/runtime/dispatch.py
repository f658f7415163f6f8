"""The runtime: route each product a program runs to its cached winner, or to the default.

A route is resolved once per call signature (op, dtype, shapes, strides) and kept, so a
hit costs a tuple and a dict lookup before the winner launches. Nothing is dispatched
on trust: a winner runs only after it was checked against a float64 reference and beat
the default head to head on this host, by the engine's margin, called the way the
program calls it (launches from Python, host time included). It is checked once more
against the default on the program's first real operands, then timed beside the default
on the program's next calls: a call's host time inside a program can be several times
what it is in a loop of its own, and a winner whose launch costs more there than its
kernel saves goes back to the default. A winner that raises or answers wrong at run time
goes back to the default for good, and is banned.
"""

from __future__ import annotations

import logging
import statistics
import time
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agents.bans import BanList
from agents.cache import CacheEntry, ProbeCache
from agents.ops.base import TOLERANCE, relative_error
from agents.probe.device import Device
from agents.probe.sampling import interleaved
from agents.probe.timers.base import Timer
from agents.probe.timers.table import TIMERS
from agents.providers.base import Kernel, Provider
from agents.runtime.keys import gemm_problem
from agents.runtime.runners import Runner, make_runner
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

log = logging.getLogger("agents.runtime")


class Mode(StrEnum):
    """What a miss does: run the default (dispatch), also note it (record), or probe it (tune)."""

    DISPATCH = "dispatch"
    RECORD = "record"
    TUNE = "tune"


@dataclass(frozen=True)
class HeadToHead:
    """A winner against the default, per call in µs: device time and host time of each."""

    default_device_us: float
    winner_device_us: float
    default_host_us: float
    winner_host_us: float

    @property
    def gain(self) -> float:
        """The winner's gain over the default, paying both its host and its device time."""
        default = self.default_device_us + self.default_host_us
        return default / (self.winner_device_us + self.winner_host_us) - 1


@dataclass
class Trial:
    """A winner timed beside the default on the program's own calls: host µs per call, and
    how many calls found the device idle (its queued work done: it waits on the host)."""

    calls: int
    winner_us: list[float] = field(default_factory=list)
    default_us: list[float] = field(default_factory=list)
    idle: int = 0

    @property
    def host_bound(self) -> bool:
        """Whether the device waited on the host in at least half of the timed calls."""
        return 2 * self.idle >= len(self.winner_us) + len(self.default_us) > 0


# Where the device waits on the host, the share of a call's device time that the program
# still waits for: the host's next launches hide the rest, and how much they hide depends on
# what follows the call (all of it after a decode step's LM head, which ends the step; none
# of it mid-layer), which a trial cannot see.
EXPOSED_WHEN_HOST_BOUND = 0.5


def program_gain(trial: Trial, duel: HeadToHead | None, *, on_gpu: bool) -> float:
    """Return the winner's gain over the default in the program, from the trial's host times.

    On a GPU a call costs its host time and its device time (the head to head's). Where the
    device waits on the host (small kernels launched one after another), every µs of host
    time a winner adds shows in the program, but only part of the device time it saves
    (`EXPOSED_WHEN_HOST_BOUND`). On the H200, GPT-2 medium's LM head at decode batch 32 ran
    a Triton winner that saved 108 µs of device time and cost 103 µs more host time: the model
    ran at 0.985 of the default. At prefill, a padded winner of the same head saved 1,876 µs
    for 105 µs more host time, and the model ran 1.18x faster. On the CPU the host time is
    the whole call.
    """
    winner = statistics.median(trial.winner_us)
    default = statistics.median(trial.default_us)
    if on_gpu and duel is not None:
        exposed = EXPOSED_WHEN_HOST_BOUND if trial.host_bound else 1.0
        winner += exposed * duel.winner_device_us
        default += exposed * duel.default_device_us
    return default / max(winner, 1e-3) - 1


@dataclass(eq=False)
class Route:
    """Where calls of one signature go: a runner, or the default (runner None)."""

    problem: ProblemKey | None
    runner: Runner | None = None
    candidate: Candidate | None = None
    # How the choice was made, for logs and the bench ("hit", "miss", "near tie",
    # "lost head to head", ...).
    reason: str = "miss"
    # Calls still to check before the route runs its winner alone: the first compare its
    # output with the default's, the rest (`trial`) time it beside the default in the program.
    checks_left: int = 0
    trial: Trial | None = None
    head_to_head: HeadToHead | None = None
    # The gain measured on the program's own calls, once the trial ended, and whether the
    # device waited on the host in that trial (then half its device time counted).
    program_gain: float | None = None
    host_bound: bool | None = None
    calls: int = 0
    slot: int = -1
    gain: float | None = None
    # The gain over inductor's own product of the problem, once a compiled graph asked.
    compiled_gain: float | None = None
    # The model's steps' gain with this winner, once a step check timed them (`steps`), and
    # whether the check's current step runs the default instead.
    step_gain: float | None = None
    held: bool = False

    @property
    def in_trial(self) -> bool:
        """Whether the next call is one of the trial's (its outputs already verified)."""
        trial = self.trial
        return trial is not None and 0 < self.checks_left <= trial.calls


class Routes(dict[tuple[Any, ...], Route]):
    """A runtime's routes by call signature; replacing or dropping one empties `fast`."""

    def __init__(self, fast: dict[bytes, Route]) -> None:
        super().__init__()
        self.fast = fast

    def __setitem__(self, sig: tuple[Any, ...], route: Route) -> None:
        if sig in self:
            self.fast.clear()
        super().__setitem__(sig, route)

    def __delitem__(self, sig: tuple[Any, ...]) -> None:
        self.fast.clear()
        super().__delitem__(sig)

    def pop(self, *args: Any) -> Any:
        self.fast.clear()
        return super().pop(*args)

    def popitem(self) -> tuple[tuple[Any, ...], Route]:
        self.fast.clear()
        return super().popitem()

    def clear(self) -> None:
        self.fast.clear()
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.fast.clear()
        super().update(*args, **kwargs)

    def setdefault(self, sig: tuple[Any, ...], route: Route | None = None) -> Route:
        return super().setdefault(sig, route)  # type: ignore[arg-type]

    def __ior__(self, other: Any) -> Routes:  # type: ignore[override,misc]
        self.update(other)
        return self


@dataclass
class RuntimeStats:
    """What the runtime did, for the program and the bench."""

    hits: int = 0
    misses: int = 0
    probes: int = 0
    near_ties: int = 0
    # cached winners slower than the default head to head, by the margin or more
    lost_head_to_head: int = 0
    faults: int = 0
    # winners admitted head to head that lost on the program's own calls
    lost_in_program: int = 0
    # winners kept by their trials that did not make the model's steps faster
    lost_in_steps: int = 0
    revalidated: int = 0
    fleet_winners: int = 0
    admission_ms: float = 0.0
    probe_s: float = 0.0


ProbeFn = Callable[[ProblemKey], ProbeRun]
# Signatures of layers' own routes and of compiled graphs': not routed by torch's functions.
LAYER_SIGNATURES = frozenset({"linear-layer", "conv1d-layer", "traced"})


@dataclass
class AdmissionSettings:
    """How a winner earns its place: margin over the default, head-to-head rounds and reps."""

    min_gain: float = 0.01
    rounds: int = 9
    target_us: float = 2000.0
    max_reps: int = 200
    # The first calls on the program's own operands are compared with the default's output.
    verify_calls: int = 1
    # The next calls alternate the winner and the default, timing each call's host time in
    # the program; the winner stays only if it still gains by `min_gain` (0: no trial).
    trial_calls: int = 16
    # A layer whose every route keeps the default gets its own forward back after this
    # many such calls in a row (0: never). Not in record mode, which counts every call.
    settle_after: int = 64
    # Once a model's winners ended their trials, its steps run this many times each way,
    # with and without them, and they stay only if the steps gain (0: no step check).
    step_pairs: int = 12


class Runtime:
    """Route products to the winners of a probe cache on one device.

    Everything it touches is injected: the cache, the device and its hardware spec, the
    providers by backend, the ban list, the probe (tune mode) and the timer, so that
    tests run it on the CPU with CPU providers.
    """

    def __init__(
        self,
        *,
        cache: ProbeCache,
        device: Device,
        hardware: HardwareSpec,
        providers: Mapping[str, Provider],
        mode: Mode = Mode.DISPATCH,
        bans: BanList | None = None,
        probe: ProbeFn | None = None,
        on_probe: Callable[[ProbeRun], None] | None = None,
        timer: Timer | None = None,
        admission: AdmissionSettings | None = None,
        default: Callable[[Any, Any], Any] | None = None,
        native_backends: frozenset[str] = frozenset(),
    ) -> None:
        if mode is Mode.TUNE and probe is None:
            raise ValueError("tune mode needs a probe to run on a miss")
        self.cache = cache
        self.device = device
        self.hardware = hardware
        self.providers = dict(providers)
        self.mode = Mode(mode)
        self.bans = bans if bans is not None else BanList()
        self.probe = probe
        self.on_probe = on_probe
        self.timer = timer
        self.admission = admission or AdmissionSettings()
        self.default = default or _torch_matmul
        # Backends the framework's own default call already runs (TunableOp on ROCm).
        self.native_backends = native_backends
        self.stats = RuntimeStats()
        # Calls the default keeps, by the native routers' keys (`patching.install_native`):
        # emptied whenever a route is replaced or dropped.
        self.fast: dict[bytes, Route] = {}
        self.routes: dict[tuple[Any, ...], Route] = Routes(self.fast)
        # What each new route calls: the step checks' `arm` (`steps.StepCheck`).
        self.on_new_route: list[Callable[[], None]] = []
        # Routes a compiled graph names by number (the custom op's `slot` argument).
        self.slots: list[Route] = []
        self._logged: set[tuple[str, str]] = set()
        # Set while a fleet warm start is pending: misses wait for it instead of probing.
        self.defer_probes = False
        # One decision per problem, shared by every call signature that names it.
        self._decided: dict[str, Route] = {}
        # Per problem: whether its winner also beats inductor's product (torch.compile).
        self._beats_inductor: dict[str, bool] = {}
        # Layers' own route tables (keyed by input shape), emptied whenever routes are.
        self.layer_routes: list[dict[Any, Route]] = []
        # Layers given their own forward back, with the routing forward to restore.
        self.settled: list[tuple[weakref.ref[Any], Callable[..., Any]]] = []
        # torch's functions: calls the default kept in a row, and the count that settles them
        # (-1: never); whether some are torch's own again (`patching.settle_functions`).
        self.quiet_calls = 0
        self.settle_at = self.settle_after if self.settle_after > 0 else -1
        self.functions_settled = False
        from agents.runtime.patching import STATE, register

        self._state = STATE
        # Compiled graphs name this runtime by number: registered here, never while tracing.
        self.index = register(self)

    # -- the hot path ----------------------------------------------------------------------
    def run(self, route: Route, a: Any, b: Any) -> Any:
        """Run the route's winner on A and B; on any fault, run the default and stop using it."""
        if route.checks_left > 0:
            return self._checked(route, a, b)
        runner = route.runner
        assert runner is not None
        state = self._state
        saved, state.active = state.active, None  # the runner's own torch calls run as they are
        try:
            return runner(a, b)
        except Exception as exc:
            self.fault(route, f"raised {type(exc).__name__}: {exc}")
            return self.default(a, b)
        finally:
            state.active = saved

    def product(self, a: Any, b: Any) -> Any:
        """Return A @ B for logical views, through the cache: the backward products' way in."""
        sig = (
            "product",
            a.dtype,
            _tf32(a),
            a.get_device(),
            a.shape,
            a.stride(),
            b.shape,
            b.stride(),
        )
        route = self.routes.get(sig) or self.resolve(sig, a, b)
        route.calls += 1
        if route.runner is None:
            return self.default(a, b)
        return self.run(route, a, b)

    # -- resolving a signature once ------------------------------------------------------------
    def resolve(self, sig: tuple[Any, ...], a: Any, b: Any) -> Route:
        """Find where calls of `sig` go, and keep the answer (except during graph capture)."""
        from agents.runtime.patching import suspended

        self.quiet_calls = 0  # a new product: the functions' quiet run starts again
        problem = gemm_problem(a, b, tf32=_tf32(a))
        with suspended():  # probes and admission call torch's own products
            route = self.decide(problem, capturing=_capturing(a))
        if route is not None:
            self.routes[sig] = route
            for call in self.on_new_route:
                call()
            return route
        return Route(problem=problem, reason="unresolved during graph capture")

    def decide(self, problem: ProblemKey | None, *, capturing: bool) -> Route | None:
        """Return the route of `problem`, deciding it once; None if it must wait (capture)."""
        if problem is None:
            return Route(problem=None, reason="not a GEMM TPS models")
        key = problem.key_hash()
        route = self._decided.get(key)
        if route is None:
            route = self._resolve_problem(problem, capturing=capturing)
            if route is not None:
                self._decided[key] = route
        return route

    # -- layers that route nothing ------------------------------------------------------------
    @property
    def settle_after(self) -> int:
        """Calls in a row, all kept by the default, after which a layer stops routing."""
        return 0 if self.mode is Mode.RECORD else self.admission.settle_after

    def settle(self, layer: Any, forward: Callable[..., Any], routes: Mapping[Any, Route]) -> bool:
        """Give `layer` its own forward back if none of its routes runs a winner.

        What the layer then runs is exactly what it ran without TPS, at no cost. A later
        `forget` (a fleet warm start, a version change) gives it the routing forward again.
        """
        if self.mode is Mode.RECORD or any(r.runner is not None for r in routes.values()):
            return False
        if "forward" in vars(layer):
            del layer.forward
            self.settled.append((weakref.ref(layer), forward))
        return True

    def functions_with_winners(self) -> frozenset[str] | None:
        """The names under which torch's functions route a product that runs a winner
        (`patching.ROUTED_AS`); None where a backward product runs one, whose function is
        not known."""
        names = frozenset(
            sig[0]
            for sig, route in self.routes.items()
            if route.runner is not None and sig[0] not in LAYER_SIGNATURES
        )
        return None if "product" in names else names

    def unsettle(self) -> None:
        """Route the settled layers and functions again (their next call decides anew)."""
        from agents.runtime.patching import unsettle_functions

        unsettle_functions(self)
        for ref, forward in self.settled:
            layer = ref()
            if layer is not None and "forward" not in vars(layer):
                layer.forward = types.MethodType(forward, layer)
        self.settled.clear()

    def forget(self, problems: set[str] | None = None, *, misses: bool = False) -> None:
        """Decide again the problems of these hashes (and every miss, with `misses`)."""
        self.unsettle()
        for table in self.layer_routes:
            table.clear()
        for sig, route in list(self.routes.items()):
            key = route.problem.key_hash() if route.problem is not None else None
            if (problems and key in problems) or (misses and route.reason == "miss"):
                del self.routes[sig]
                self._decided.pop(key or "", None)

    def _resolve_problem(self, problem: ProblemKey, *, capturing: bool) -> Route | None:
        entry, stale = self.cache.lookup(problem, self.hardware)
        if entry is None and self.mode is Mode.TUNE and not self.defer_probes:
            if capturing:
                return None  # no probing inside a capture: decide on a later eager call
            entry, stale = self._tune(problem), False
        if entry is None:
            self.stats.misses += 1
            return Route(problem=problem, reason="miss")
        if capturing:
            return None  # admission times and synchronizes: not inside a capture
        return self.admit(problem, entry, stale=stale)

    def _tune(self, problem: ProblemKey) -> CacheEntry | None:
        assert self.probe is not None
        start = time.perf_counter()
        try:
            run = self.probe(problem)
        except Exception as exc:
            log.warning("probe of %s failed: %s", problem.canonical(), exc)
            return None
        finally:
            self.stats.probe_s += time.perf_counter() - start
        self.stats.probes += 1
        if self.on_probe is not None:
            self.on_probe(run)
        entry = self.cache.put(run)
        if self.cache.path is not None:
            self.cache.save()
        return entry

    # -- admission: validation and head to head ----------------------------------------------
    def admit(self, problem: ProblemKey, entry: CacheEntry, *, stale: bool = False) -> Route:
        """Check a cached winner on this host and return its route (the default's if it fails)."""
        candidate = entry.winner
        if candidate.id == VENDOR_DEFAULT.id:
            self.stats.hits += 1
            return Route(problem=problem, reason="hit: the default won")
        if candidate.backend in self.native_backends:
            self.stats.hits += 1
            return Route(
                problem=problem, candidate=candidate, reason="hit: PyTorch TunableOp runs it"
            )
        ban = self.bans.is_banned(self.hardware, problem, candidate)
        if ban is not None:
            return Route(problem=problem, reason=f"banned: {ban.reason}")
        start = time.perf_counter()
        try:
            route = self._admit(problem, candidate, stale=stale)
        finally:
            self.stats.admission_ms += (time.perf_counter() - start) * 1e3
        if route.runner is not None:
            self.stats.hits += 1
            if stale:
                self.stats.revalidated += 1
                self.cache.merge([_rekeyed(entry, self.hardware)])
                if self.cache.path is not None:
                    self.cache.save()
        return route

    def _admit(self, problem: ProblemKey, candidate: Candidate, *, stale: bool) -> Route:
        from agents.ops.gemm import GemmOp, gemm_operands

        try:
            runner = make_runner(
                candidate,
                problem,
                device=self.device,
                provider=self.providers.get(candidate.backend),
            )
        except (LookupError, ValueError) as exc:
            return Route(problem=problem, reason=f"cannot run {candidate.label()}: {exc}")
        operands = gemm_operands(problem, self.device.torch_device, seed=1)
        op = GemmOp()
        try:
            out = runner(operands.a, operands.b)
            self.device.synchronize()
            check = op.check(problem, operands, out)
        except Exception as exc:
            self.fault_candidate(problem, candidate, f"raised {type(exc).__name__}: {exc}")
            return Route(problem=problem, reason=f"{candidate.label()} raised")
        if not check.ok:
            self.fault_candidate(problem, candidate, f"wrong result: {check.reason()}")
            return Route(problem=problem, reason=f"{candidate.label()} gave a wrong result")
        duel = self._head_to_head(operands, runner)
        gain = duel.gain
        what = "re-validated after a version change" if stale else "hit"
        if gain < self.admission.min_gain:
            # within the margin either way: a near tie; slower by more: a loss
            lost = gain <= -self.admission.min_gain
            if lost:
                self.stats.lost_head_to_head += 1
            else:
                self.stats.near_ties += 1
            verdict = "lost head to head" if lost else "near tie"
            return Route(
                problem=problem,
                candidate=candidate,
                gain=gain,
                reason=f"{verdict}: {candidate.label()} gained {gain:+.1%} head to head",
            )
        return Route(
            problem=problem,
            runner=runner,
            candidate=candidate,
            gain=gain,
            reason=f"{what}: {candidate.label()} {gain:+.1%} head to head",
            checks_left=self.admission.verify_calls + self.admission.trial_calls,
            trial=Trial(calls=self.admission.trial_calls) if self.admission.trial_calls else None,
            head_to_head=duel,
        )

    def admit_compiled(self, route: Route) -> bool:
        """Whether a routed winner also beats inductor's own product of its problem.

        Under torch.compile the default is not the eager call but what inductor makes of
        the product (padded, fused, autotuned under max-autotune, with the compile's own
        settings). The winner enters a compiled graph only where it beats that, head to
        head and by the same margin; it is decided once per problem, while tracing.
        """
        assert route.problem is not None and route.runner is not None
        key = route.problem.key_hash()
        known = self._beats_inductor.get(key)
        if known is None:
            known = self._versus_inductor(route)
            self._beats_inductor[key] = known
        return known

    def _versus_inductor(self, route: Route) -> bool:
        from torch import _inductor
        from torch.fx.experimental.proxy_tensor import make_fx

        from agents.ops.gemm import gemm_operands

        assert route.problem is not None and route.runner is not None
        operands = gemm_operands(route.problem, self.device.torch_device, seed=1)
        try:
            graph = make_fx(_torch_matmul)(operands.a, operands.b)
            inductor = _inductor.compile(graph, [operands.a, operands.b])
            gain = self._head_to_head(operands, route.runner, default=inductor).gain
        except Exception as exc:  # inductor cannot build it here: keep inductor's product
            log.warning("no compiled head to head for %s: %s", route.problem.canonical(), exc)
            return False
        route.compiled_gain = gain
        return gain >= self.admission.min_gain

    def _head_to_head(
        self, operands: Any, runner: Runner, *, default: Callable[..., Any] | None = None
    ) -> HeadToHead:
        """Time the winner against the default, called as the program calls them.

        Each side's cost is its host time per call (Python and launch) plus its time per
        call in a launch loop timed on the device. A program whose GPU waits on the host
        (a decode step) pays the first; one whose host waits on the GPU pays the second.
        Summing them never admits a winner whose slower launch eats its faster kernel.
        """
        a, b = operands.a, operands.b
        timer = self.timer or _eager_timer(self.device)
        baseline = default or self.default
        calls = [lambda: baseline(a, b), lambda: runner(a, b)]
        kernels = [Kernel(candidate=VENDOR_DEFAULT, run=c, graphable=False) for c in calls]
        estimates = timer.estimate_us(kernels)
        s = self.admission
        reps = max(1, min(s.max_reps, int(s.target_us / max(max(estimates), 1e-3))))
        armed = [timer.arm(k, reps) for k in kernels]
        orders = [interleaved([0, 1], r) for r in range(s.rounds)]
        rows = timer.sample_rounds(armed, orders)
        host = self._host_us(calls, orders, reps=min(reps, 50))
        return HeadToHead(
            default_device_us=statistics.median(row[0] for row in rows),
            winner_device_us=statistics.median(row[1] for row in rows),
            default_host_us=host[0],
            winner_host_us=host[1],
        )

    def _host_us(
        self, calls: list[Callable[[], Any]], orders: list[list[int]], *, reps: int
    ) -> list[float]:
        """Return each call's median host time per call (µs), the device drained before each."""
        samples: list[list[float]] = [[] for _ in calls]
        for order in orders:
            for i in order:
                self.device.synchronize()
                start = time.perf_counter_ns()
                for _ in range(reps):
                    calls[i]()
                samples[i].append((time.perf_counter_ns() - start) / 1e3 / reps)
        self.device.synchronize()
        return [statistics.median(v) for v in samples]

    # -- a new route's first calls: checked, then timed in the program ------------------------
    def _checked(self, route: Route, a: Any, b: Any) -> Any:
        """Run one of a new route's first calls: a verified call, or a call of its trial."""
        trial = route.trial
        if trial is None or route.checks_left > trial.calls:
            route.checks_left -= 1
            return self._verified(route, a, b)
        return self.trial_call(
            route, lambda: self.call_winner(route, a, b), lambda: self._call_default(a, b)
        )

    def trial_call(
        self, route: Route, winner: Callable[[], Any], default: Callable[[], Any]
    ) -> Any:
        """Make one call of the route's trial: the winner's way or the default's, in turn,
        timed on the host; the last one judges the winner (`program_gain`).

        `winner` and `default` are the whole call as the program makes it each way. A
        layer passes its own forward as the default: once a layer keeps the default it gets
        that forward back, with no routing, no separate bias add and no reshaping around the
        product. On the H200, OPT-350m's attention projections at decode batch 1 ran a
        cuBLASLt winner that beat the bare default product on the host, 19.3 against 22.5 µs,
        and the step ran at 0.84 of eager: the routed layer's call cost about 16 µs more host
        time than the layer's own.
        """
        trial = route.trial
        assert trial is not None
        if self.device.is_gpu and _capturing_now():  # nothing to time while a graph records
            return winner()
        route.checks_left -= 1
        winner_turn = route.checks_left % 2 == 0
        if self.device.is_gpu and self.device.idle():
            trial.idle += 1
        start = time.perf_counter_ns()
        out = winner() if winner_turn else default()
        took = (time.perf_counter_ns() - start) / 1e3
        (trial.winner_us if winner_turn else trial.default_us).append(took)
        if route.checks_left == 0:
            self._judge(route, trial)
        return out

    def call_winner(self, route: Route, a: Any, b: Any) -> Any:
        """Call the route's winner once, with the runtime off; on a fault, the default."""
        runner = route.runner
        if runner is None:  # it faulted earlier in these checks
            return self.default(a, b)
        state = self._state
        saved, state.active = state.active, None
        try:
            return runner(a, b)
        except Exception as exc:
            self.fault(route, f"raised {type(exc).__name__}: {exc}")
            return self.default(a, b)
        finally:
            state.active = saved

    def _call_default(self, a: Any, b: Any) -> Any:
        state = self._state
        saved, state.active = state.active, None
        try:
            return self.default(a, b)
        finally:
            state.active = saved

    def _verified(self, route: Route, a: Any, b: Any) -> Any:
        """Compare the winner's output with the default's; on a mismatch return the default's."""
        out = self.call_winner(route, a, b)
        if route.runner is None:
            return out
        expected = self.default(a, b)
        assert route.problem is not None
        tolerance = TOLERANCE[route.problem.dtype]
        err = relative_error(out.detach(), expected.detach().double())
        if err > tolerance:
            reason = "NaN or Inf" if err == float("inf") else f"relative error {err:.2e}"
            self.fault(route, f"wrong result on the program's operands: {reason}")
            return expected
        return out

    def _judge(self, route: Route, trial: Trial) -> None:
        """Keep the winner only if it still gains with the host time it costs in the program
        (`program_gain`): the host time is taken again here, as the program's own Python and
        caches make it, and whether the device waits on the host."""
        route.trial = None
        if route.runner is None or not trial.winner_us or not trial.default_us:
            return
        on_gpu = self.device.is_gpu
        route.host_bound = on_gpu and trial.host_bound
        route.program_gain = gain = program_gain(trial, route.head_to_head, on_gpu=on_gpu)
        if gain >= self.admission.min_gain:
            return
        self.stats.lost_in_program += 1
        route.runner = None
        timed = len(trial.winner_us) + len(trial.default_us)
        waited = (
            f"; the device waited on the host in {trial.idle} of {timed} calls"
            if on_gpu and trial.host_bound
            else ""
        )
        route.reason = (
            f"lost in the program: {route.reason}, but a call took "
            f"{statistics.median(trial.winner_us):.1f} µs of host time against the default's "
            f"{statistics.median(trial.default_us):.1f} µs{waited} ({gain:+.1%} in all)"
        )

    # -- faults ------------------------------------------------------------------------------

    def fault(self, route: Route, reason: str) -> None:
        """Send this route to the default for good; ban its candidate and say so once."""
        candidate, problem = route.candidate, route.problem
        route.runner = None
        route.reason = f"fault: {reason}"
        if candidate is not None and problem is not None:
            self.fault_candidate(problem, candidate, reason)

    def fault_candidate(self, problem: ProblemKey, candidate: Candidate, reason: str) -> None:
        self.stats.faults += 1
        self.bans.ban(self.hardware, problem, candidate, reason)
        if self.cache.forget(problem, self.hardware, candidate) and self.cache.path is not None:
            self.cache.save()
        key = (problem.key_hash(), candidate.id)
        if key not in self._logged:
            self._logged.add(key)
            log.warning(
                "%s on %s falls back to the default: %s",
                candidate.label(),
                problem.canonical(),
                reason[:300],
            )

    # -- what was seen -----------------------------------------------------------------------
    def problems(self) -> list[tuple[ProblemKey, int]]:
        """Return each product's problem with how many calls it had, most called first."""
        routes = {id(r): r for r in self.routes.values() if r.problem is not None}
        counted = [(r.problem, r.calls) for r in routes.values() if r.problem is not None]
        return sorted(counted, key=lambda pc: -pc[1])

    def decisions(self) -> list[Route]:
        """Return one route per problem seen."""
        return [r for r in {id(r): r for r in self.routes.values()}.values() if r.problem]


def _rekeyed(entry: CacheEntry, hardware: HardwareSpec) -> CacheEntry:
    return entry.model_copy(
        update={
            "software_key": hardware.software_key(),
            "torch_version": hardware.torch_version,
            "blas_version": hardware.blas_version,
            "source": "revalidated",
        }
    )


def _torch_matmul(a: Any, b: Any) -> Any:
    from agents.runtime import patching

    return patching.ORIGINAL["matmul"](a, b)


def _tf32(a: Any) -> bool:
    import torch

    return bool(a.dtype is torch.float32 and a.is_cuda and torch.backends.cuda.matmul.allow_tf32)


def _capturing(a: Any) -> bool:
    import torch

    return bool(a.is_cuda and torch.cuda.is_current_stream_capturing())


def _capturing_now() -> bool:
    import torch

    return bool(torch.cuda.is_current_stream_capturing())


def _eager_timer(device: Device) -> Timer:
    if device.is_gpu:
        return TIMERS.create("cuda-graph", stream=device.stream, warmup=2, use_graphs=False)
    return TIMERS.create("cpu")
