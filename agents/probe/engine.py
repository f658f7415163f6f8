"""The probe engine: for one problem, find the fastest correct candidate by measuring it."""

from __future__ import annotations

import logging
import math
import statistics
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.bans import BanList
from agents.clock import Clock, SystemClock, elapsed_ms
from agents.opconfig import OpConfig
from agents.ops import OP_KINDS, OpKind
from agents.probe.device import Device
from agents.probe.redact import redact_error
from agents.probe.sampling import collect, interleaved, shared_reps
from agents.probe.settings import ProbeSettings
from agents.probe.stats import summarize
from agents.probe.timers import Armed, Timer
from agents.providers.base import Kernel, Provider, rotating
from agents.telemetry import TelemetryGate, TelemetrySource
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Measurement, ProbeRun, Telemetry

log = logging.getLogger("agents.probe")


def _agent_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tps")
    except PackageNotFoundError:
        return None


@dataclass
class _Slot:
    """One candidate's way through a probe."""

    candidate: Candidate
    provider: Provider | None
    kernel: Kernel | None = None
    error: str | None = None
    valid: bool = True
    compile_ms: float | None = None
    rel_err: float | None = None
    armed: Armed | None = None
    values: list[float] = field(default_factory=list)


@dataclass
class _Breakdown:
    telemetry_ms: float = 0.0
    operands_ms: float = 0.0
    plan_ms: float = 0.0
    compile_ms: float = 0.0
    validation_ms: float = 0.0
    warmup_ms: float = 0.0
    capture_ms: float = 0.0
    sampling_ms: float = 0.0
    confirm_ms: float = 0.0
    copy_bytes: int = 0
    operand_copies: int = 1

    @property
    def probe_ms(self) -> float:
        """Probing once kernels exist: validation, warm-up, capture and sampling."""
        return (
            self.validation_ms
            + self.warmup_ms
            + self.capture_ms
            + self.sampling_ms
            + self.confirm_ms
        )

    def line(self) -> str:
        return (
            f"telemetry {self.telemetry_ms:.1f} ms, operands {self.operands_ms:.1f} ms, "
            f"plan {self.plan_ms:.1f} ms, compile {self.compile_ms:.1f} ms | probe "
            f"{self.probe_ms:.1f} ms = validation {self.validation_ms:.1f} + warm-up "
            f"{self.warmup_ms:.1f} + capture {self.capture_ms:.1f} + launches "
            f"{self.sampling_ms:.1f} + head-to-head {self.confirm_ms:.1f}; layout copies "
            f"{self.copy_bytes / 1e6:.1f} MB per launch"
            + (
                f"; cold cache: {self.operand_copies} operand copies in rotation"
                if self.operand_copies > 1
                else ""
            )
        )


class ProbeEngine:
    """Measure the candidates of a problem on one device and choose the winner.

    Every part is injected: the device, the providers, the timer, the telemetry source,
    the ban list, the settings and the clock, so that tests run the real engine on the
    CPU and nothing here knows which backend it is driving.
    """

    def __init__(
        self,
        *,
        device: Device,
        providers: Sequence[Provider],
        timer: Timer,
        telemetry: TelemetrySource,
        bans: BanList,
        host_id: str,
        settings: ProbeSettings | None = None,
        op_config: OpConfig | None = None,
        clock: Clock | None = None,
        hardware: HardwareSpec | None = None,
        ops: dict[str, OpKind] | None = None,
    ) -> None:
        self.device = device
        self.providers = list(providers)
        self.timer = timer
        self.telemetry = telemetry
        self.bans = bans
        self.host_id = host_id
        self.settings = settings or ProbeSettings()
        self.op_config = op_config or OpConfig.default()
        self.clock = clock or SystemClock()
        self.hardware_ = hardware
        self.ops = ops

    # -- hardware -------------------------------------------------------------------------
    def hardware(self) -> HardwareSpec:
        """Return the measured spec of the device (measured once, then kept)."""
        if self.hardware_ is None:
            from agents.probe.hardware import detect_hardware

            self.hardware_ = detect_hardware(self.device)
        return self.hardware_

    def _op(self, name: str) -> OpKind:
        if self.ops is not None and name in self.ops:
            return self.ops[name]
        return OP_KINDS.create(name)

    # -- probing --------------------------------------------------------------------------
    def probe(self, problem: ProblemKey, *, only: Sequence[Candidate] | None = None) -> ProbeRun:
        """Probe one problem: all shortlisted candidates, or `only` these plus the default."""
        from agents.errors import UnsupportedProblemError

        if not self.op_config.enabled(problem.op) and only is None:
            raise UnsupportedProblemError(f"op {problem.op!r} is not enabled in the op config")
        op = self._op(problem.op)
        hardware = self.hardware()
        times = _Breakdown()

        start = self.clock.now_ns()
        snapshot = TelemetryGate(source=self.telemetry, clock=self.clock).wait()
        times.telemetry_ms = elapsed_ms(self.clock, start)

        start = self.clock.now_ns()
        operands = op.operands(problem, self.device.torch_device, seed=self.settings.seed)
        if self.settings.validate_outputs:
            op.prepare_check(problem, operands)
        self.device.synchronize()
        times.operands_ms = elapsed_ms(self.clock, start)

        slots = self._shortlist(problem, only, operands, times)
        self._prepare(problem, hardware, operands, op, slots, times)
        if self.settings.cold_cache:
            self._rotate(problem, hardware, operands, op, slots, times)
        self._measure([s for s in slots if s.kernel is not None and s.valid], times)
        run = self._conclude(problem, hardware, slots, snapshot, times)
        for slot in slots:
            slot.armed = None
        for slot in slots:
            if slot.kernel is not None and slot.kernel.close is not None:
                slot.kernel.close()
        return run

    def _providers_for(self, problem: ProblemKey) -> list[Provider]:
        return [p for p in self.providers if problem.op in p.ops and p.available(self.device)]

    def _shortlist(
        self,
        problem: ProblemKey,
        only: Sequence[Candidate] | None,
        operands: Any,
        times: _Breakdown,
    ) -> list[_Slot]:
        providers = self._providers_for(problem)
        by_backend = {p.backend: p for p in providers}
        default = _Slot(candidate=VENDOR_DEFAULT, provider=by_backend.get(VENDOR_DEFAULT.backend))
        if only is not None:
            slots = [default]
            for c in only:
                if c.id == VENDOR_DEFAULT.id or any(s.candidate.id == c.id for s in slots):
                    continue
                provider = by_backend.get(c.backend)
                error = None if provider else f"backend {c.backend!r} is not available here"
                slots.append(
                    _Slot(candidate=c, provider=provider, error=error, valid=provider is not None)
                )
            return slots
        limit = self.op_config.candidate_limit(problem.op)
        offers: dict[str, list[Candidate]] = {}
        for p in providers:
            if p.backend == VENDOR_DEFAULT.backend:
                continue
            start = self.clock.now_ns()
            try:
                offers[p.backend] = p.candidates(
                    problem, self.device, limit=limit, operands=operands
                )
            except Exception as exc:  # a provider that cannot plan offers nothing
                log.debug("%s offered no candidates: %s", p.backend, exc)
                offers[p.backend] = []
            times.plan_ms += elapsed_ms(self.clock, start)
        chosen = pick_shortlist(offers, self.settings.provider_quota, limit)
        return [default] + [_Slot(candidate=c, provider=by_backend[c.backend]) for c in chosen]

    def _prepare(
        self,
        problem: ProblemKey,
        hardware: HardwareSpec,
        operands: Any,
        op: OpKind,
        slots: list[_Slot],
        times: _Breakdown,
    ) -> None:
        for slot in slots:
            if slot.provider is None:
                slot.valid = False
                slot.error = slot.error or f"no provider for backend {slot.candidate.backend!r}"
                continue
            ban = self.bans.is_banned(hardware, problem, slot.candidate)
            if ban is not None:
                slot.valid, slot.error = False, f"banned: {ban.reason}"
                continue
            start = self.clock.now_ns()
            try:
                slot.kernel = slot.provider.prepare(slot.candidate, problem, operands, self.device)
                if slot.kernel.poison is not None:
                    slot.kernel.poison()
                output = slot.kernel.run()  # the first launch pays any JIT compile
                self.device.synchronize()
            except Exception as exc:
                slot.valid, slot.error = False, f"{type(exc).__name__}: {exc}"[:2000]
                slot.kernel = None
                continue
            finally:
                slot.compile_ms = elapsed_ms(self.clock, start)
                times.compile_ms += slot.compile_ms
            if not self.settings.validate_outputs:
                continue
            start = self.clock.now_ns()
            check = op.check(problem, operands, output)
            times.validation_ms += elapsed_ms(self.clock, start)
            slot.rel_err = check.rel_err
            if not check.ok:
                slot.valid, slot.error = False, f"wrong result: {check.reason()}"
                self.bans.ban(hardware, problem, slot.candidate, slot.error)
                log.warning(
                    "banned %s on %s: %s",
                    slot.candidate.label(),
                    problem.canonical(),
                    check.reason(),
                )

    def _rotate(
        self,
        problem: ProblemKey,
        hardware: HardwareSpec,
        operands: Any,
        op: OpKind,
        slots: list[_Slot],
        times: _Breakdown,
    ) -> None:
        """Cold cache: give each valid candidate one kernel per operand copy, run in turn.

        The copies together hold at least twice the L2, so each launch finds its operands
        pushed out by the launches before it. Outputs were validated on the first copy.
        """
        live = [slot for slot in slots if slot.kernel is not None and slot.valid]
        if not live:
            return
        n = cold_copies(
            operand_bytes(operands), l2_bytes=hardware.l2_bytes, limit=self.settings.cold_max_copies
        )
        start = self.clock.now_ns()
        copies = [
            op.operands(problem, self.device.torch_device, seed=self.settings.seed + i)
            for i in range(1, n)
        ]
        self.device.synchronize()
        times.operands_ms += elapsed_ms(self.clock, start)
        start = self.clock.now_ns()
        for slot in live:
            assert slot.provider is not None and slot.kernel is not None
            extra: list[Kernel] = []
            try:
                for copy in copies:
                    extra.append(slot.provider.prepare(slot.candidate, problem, copy, self.device))
                    extra[-1].run()
            except Exception as exc:
                slot.valid = False
                slot.error = f"on an operand copy: {type(exc).__name__}: {exc}"[:2000]
                for kernel in extra:
                    if kernel.close is not None:
                        kernel.close()
                continue
            slot.kernel = rotating([slot.kernel, *extra])
        self.device.synchronize()
        times.compile_ms += elapsed_ms(self.clock, start)
        times.operand_copies = n

    def _measure(self, slots: list[_Slot], times: _Breakdown) -> None:
        if not slots:
            return
        s = self.settings
        start = self.clock.now_ns()
        estimates = self.timer.estimate_us([slot.kernel for slot in slots])  # type: ignore[misc]
        times.warmup_ms = elapsed_ms(self.clock, start)
        start = self.clock.now_ns()
        live = [(slot, est) for slot, est in zip(slots, estimates, strict=True) if slot.valid]
        reps = shared_reps(
            [est for _, est in live], target_us=s.target_sample_us, max_reps=s.max_reps
        )
        armed = []
        for slot, est in live:
            launches = slot.kernel.launches  # type: ignore[union-attr]
            slot.armed = self.timer.arm(slot.kernel, reps, kernel_us=est * launches)  # type: ignore[arg-type]
            armed.append(slot.armed)
            times.copy_bytes += slot.kernel.copy_bytes  # type: ignore[union-attr]
        times.capture_ms = elapsed_ms(self.clock, start)
        start = self.clock.now_ns()
        sampled = collect(self.timer, armed, s.sampling())
        times.sampling_ms = elapsed_ms(self.clock, start)
        for (slot, _), values in zip(live, sampled.values, strict=True):
            slot.values = values

    def _head_to_head(self, slots: list[_Slot], best_id: str, times: _Breakdown) -> float | None:
        """Re-time the leader against the default alone; return the leader's gain there.

        With eight candidates of similar speed the fastest median is partly luck: on the
        H200 leads of 1-7% in the round robin turned into losses when re-timed. A lead that
        does not hold head to head is noise, and the default keeps its place.
        """
        rounds = self.settings.confirm_rounds
        by_id = {slot.candidate.id: slot for slot in slots}
        best, default = by_id.get(best_id), by_id.get(VENDOR_DEFAULT.id)
        if rounds == 0 or best is None or default is None:
            return None
        if best.armed is None or default.armed is None:
            return None
        start = self.clock.now_ns()
        rows = self.timer.sample_rounds(
            [default.armed, best.armed], [interleaved([0, 1], r) for r in range(rounds)]
        )
        times.confirm_ms = elapsed_ms(self.clock, start)
        d = [row[0] for row in rows]
        b = [row[1] for row in rows]
        default.values += d
        best.values += b
        return statistics.median(d) / statistics.median(b) - 1

    def _conclude(
        self,
        problem: ProblemKey,
        hardware: HardwareSpec,
        slots: list[_Slot],
        snapshot: Telemetry,
        times: _Breakdown,
    ) -> ProbeRun:
        measurements: list[Measurement] = []
        medians: dict[str, float] = {}
        for slot in slots:
            if slot.valid and slot.values:
                summary = summarize(slot.values)
                medians[slot.candidate.id] = max(summary.median_us, 1e-3)
                measurements.append(
                    Measurement(
                        candidate=slot.candidate,
                        median_us=max(summary.median_us, 1e-3),
                        p10_us=max(summary.p10_us, 1e-3),
                        p90_us=max(summary.p90_us, 1e-3),
                        std_us=summary.std_us,
                        samples=summary.samples,
                        outliers_rejected=summary.outliers_rejected,
                        compile_ms=slot.compile_ms,
                    )
                )
            else:
                measurements.append(
                    Measurement(
                        candidate=slot.candidate,
                        valid=False,
                        error=redact_error(slot.error or "not measured"),
                        compile_ms=slot.compile_ms,
                    )
                )
        s = self.settings
        min_gain = s.thermal_min_gain if snapshot.thermal_safe else s.min_gain
        default_us = medians.get(VENDOR_DEFAULT.id)
        long_kernel = default_us is not None and default_us >= s.long_kernel_us
        if long_kernel:
            min_gain = max(min_gain, s.long_kernel_min_gain)
        winner_id, rationale = choose_winner(
            medians,
            slots,
            min_gain=min_gain,
            confirm=lambda best: self._head_to_head(slots, best, times),
        )
        if long_kernel:
            rationale += (
                f"; default above {s.long_kernel_us:.0f} us: a tuned kernel had to "
                f"win by {min_gain:.0%}"
            )
        if snapshot.thermal_safe:
            rationale += f"; device above 85 C: a tuned kernel had to win by {min_gain:.0%}"
        if snapshot.delayed_ms:
            rationale += f"; waited {snapshot.delayed_ms:.0f} ms for a busy device"
        log.debug("probe %s: %s", problem.canonical(), times.line())
        log.debug("probe %s: %s", problem.canonical(), rationale)
        return ProbeRun(
            run_id=uuid.uuid4(),
            host_id=self.host_id,
            hardware=hardware,
            problem=problem,
            measurements=measurements,
            winner_id=winner_id,
            budget_ms=times.probe_ms,
            compile_ms=times.plan_ms + times.compile_ms,
            telemetry=snapshot,
            rationale=(rationale + " | " + times.line())[:4000],
            agent_version=_agent_version(),
        )


def operand_bytes(operands: Any) -> int:
    """Return the bytes of the tensors an operand set holds, each storage counted once."""
    storages: dict[int, int] = {}
    for value in vars(operands).values():
        if hasattr(value, "untyped_storage"):
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def cold_copies(operand_bytes: int, *, l2_bytes: int, limit: int) -> int:
    """Return how many operand copies hold at least twice the L2 (2 at least, `limit` at most)."""
    return min(limit, max(2, math.ceil(2 * l2_bytes / max(operand_bytes, 1)) + 1))


def pick_shortlist(
    offers: dict[str, list[Candidate]], quota: dict[str, int], limit: int
) -> list[Candidate]:
    """Take each provider's quota of its best offers, then fill leftover slots in order."""
    chosen: list[Candidate] = []
    seen: set[str] = set()
    order = [b for b in quota if b in offers] + [b for b in offers if b not in quota]

    def take(backend: str, count: int) -> None:
        for c in offers[backend]:
            if count <= 0 or len(chosen) >= limit:
                return
            if c.id not in seen:
                chosen.append(c)
                seen.add(c.id)
                count -= 1

    for backend in order:
        take(backend, quota.get(backend, 0))
    for backend in order:
        take(backend, limit)
    return chosen


def choose_winner(
    medians: dict[str, float],
    slots: Sequence[_Slot],
    *,
    min_gain: float,
    confirm: Callable[[str], float | None] | None = None,
) -> tuple[str | None, str]:
    """Pick the fastest valid candidate; keep the default unless the winner clearly beats it.

    `confirm(best_id)` re-times the leader head to head with the default and returns its
    gain there; a leader that gains less than `min_gain` there does not win.
    """
    if not medians:
        return None, "no candidate produced a valid measurement"
    labels = {s.candidate.id: s.candidate.label() for s in slots}
    best = min(medians, key=medians.__getitem__)
    default = medians.get(VENDOR_DEFAULT.id)
    invalid = sum(1 for s in slots if not s.valid)
    tail = f"{len(medians)} measured, {invalid} failed or invalid"
    if default is None:
        return best, f"{labels[best]} fastest at {medians[best]:.2f} us; default unmeasured; {tail}"
    if best != VENDOR_DEFAULT.id and medians[best] > default * (1 - min_gain):
        return VENDOR_DEFAULT.id, (
            f"kept vendor-default {default:.2f} us: best {labels[best]} {medians[best]:.2f} us "
            f"is within {min_gain:.0%}; {tail}"
        )
    if best != VENDOR_DEFAULT.id and confirm is not None:
        gain = confirm(best)
        if gain is not None and gain < min_gain:
            return VENDOR_DEFAULT.id, (
                f"kept vendor-default {default:.2f} us: {labels[best]} led the round robin at "
                f"{medians[best]:.2f} us but gained {gain:+.1%} head to head; {tail}"
            )
        if gain is not None:
            tail += f"; head to head {gain:+.1%}"
    speedup = default / medians[best]
    return best, (
        f"{labels[best]} {medians[best]:.2f} us vs vendor-default {default:.2f} us "
        f"({speedup:.3f}x); {tail}"
    )


DEFAULT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": (
        "vendor-default",
        "cpu-torch",
        "cpu-numpy",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
    "nvidia": (
        "vendor-default",
        "padded",
        "cublaslt",
        "triton",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
    "amd": (
        "vendor-default",
        "padded",
        "hipblaslt",
        "triton",
        "torch-conv",
        "im2col",
        "layernorm-composite",
    ),
}


def build_engine(
    *,
    device: str = "auto",
    op_config: OpConfig | None = None,
    host_id: str,
    settings: ProbeSettings | None = None,
    sm_limit: int | None = None,
    providers: Sequence[str] | None = None,
    bans_path: Any = None,
    telemetry: str | None = None,
    clock: Clock | None = None,
    measure_bandwidth: bool = False,
) -> ProbeEngine:
    """Open the device and assemble an engine from the registered plugins."""
    from pathlib import Path

    import platformdirs

    from agents.probe.device import open_device
    from agents.probe.hardware import detect_hardware
    from agents.probe.timers import TIMERS
    from agents.providers import builtin
    from agents.telemetry import TELEMETRY, default_source

    settings = settings or ProbeSettings()
    dev = open_device(device, sm_limit=sm_limit)
    names = providers or DEFAULT_PROVIDERS[dev.vendor]
    chosen = [builtin.create(name, settings=settings) for name in names]
    hardware = detect_hardware(dev, measure_bandwidth=measure_bandwidth)
    if dev.is_gpu:
        # warmup=0: the engine's first launch of each candidate (compile and validation)
        # already warmed it up.
        timer: Timer = TIMERS.create(
            "cuda-graph", stream=dev.stream, warmup=0, use_graphs=settings.use_graphs
        )
    else:
        timer = TIMERS.create("cpu")
    source = TELEMETRY.create(telemetry) if telemetry else default_source(dev.vendor, dev.index)
    if bans_path is None:
        bans_path = Path(platformdirs.user_state_dir("tps")) / "bans.json"
    return ProbeEngine(
        device=dev,
        providers=chosen,
        timer=timer,
        telemetry=source,
        bans=BanList.load(bans_path),
        host_id=host_id,
        settings=settings,
        op_config=op_config,
        clock=clock,
        hardware=hardware,
    )
