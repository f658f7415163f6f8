"""The real probe engine on the CPU: selection, validation, bans, the decision rules."""

import pytest

from agents.bans import BanList
from agents.errors import UnsupportedProblemError
from agents.providers.table import create_provider
from tests.agents.conftest import FAST, ManualClock, WrongProvider, cpu_engine, gemm
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey
from tps.schemas import ProbeRun


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp64"])
@pytest.mark.parametrize(
    "trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)]
)
def test_probe_is_a_valid_run_in_every_layout(engine, dtype, trans_a, trans_b):
    run = engine.probe(gemm(dtype=dtype, trans_a=trans_a, trans_b=trans_b))
    ProbeRun.model_validate(run.model_dump(mode="json"))
    assert run.measurements[0].candidate == VENDOR_DEFAULT
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]
    assert run.winner_id in {m.candidate.id for m in run.measurements}
    assert run.host_id == "0123456789abcdef" and run.compile_ms > 0 and run.budget_ms > 0
    assert "vs vendor-default" in run.rationale or "kept vendor-default" in run.rationale


def test_leading_dims_strides_and_batches_are_probed(engine):
    for problem in (
        gemm(lda=70, ldb=50, ldc=45),
        ProblemKey(op="gemm", dims={"m": 16, "n": 24, "k": 8, "batch": 3}, stride_a=200),
    ):
        run = engine.probe(problem)
        assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]


def test_planted_wrong_candidate_is_banned_and_the_ban_persists(tmp_path):
    providers = [create_provider("vendor-default", settings=FAST), WrongProvider()]
    run = cpu_engine(tmp_path, providers=providers).probe(gemm())
    wrong = next(m for m in run.measurements if m.candidate.backend == "cpu-wrong")
    assert not wrong.valid and wrong.median_us is None
    assert "wrong result" in wrong.error and run.winner_id == VENDOR_DEFAULT.id

    reloaded = BanList.load(tmp_path / "bans.json")
    assert len(reloaded) == 1 and next(iter(reloaded)).candidate == wrong.candidate
    again = cpu_engine(tmp_path, providers=providers).probe(gemm())
    banned = next(m for m in again.measurements if m.candidate.backend == "cpu-wrong")
    assert banned.error.startswith("banned:") and banned.compile_ms is None


def test_only_probes_the_given_candidates_plus_the_default(engine):
    mine = Candidate(backend="cpu-torch", params={"threads": 1, "layout": "packed"})
    ghost = Candidate(backend="no-such-backend")
    run = engine.probe(gemm(), only=[mine, ghost])
    assert [m.candidate for m in run.measurements] == [VENDOR_DEFAULT, mine, ghost]
    assert run.measurements[1].valid and not run.measurements[2].valid
    assert "not available" in run.measurements[2].error


def test_steer_sees_the_shortlist_and_picks_what_is_timed(engine):
    shown: list[list[Candidate]] = []
    stranger = Candidate(backend="cpu-torch", params={"threads": 99})

    def steer(offered):
        shown.append(offered)
        return [stranger, offered[-1]]  # one never planned: not timed

    run = engine.probe(gemm(), steer=steer)
    (offered,) = shown
    assert VENDOR_DEFAULT not in offered and len(offered) >= 2
    assert [m.candidate for m in run.measurements] == [VENDOR_DEFAULT, offered[-1]]
    assert all(m.valid for m in run.measurements)

    full = engine.probe(gemm(), steer=lambda offered: None)
    assert [m.candidate for m in full.measurements] == [VENDOR_DEFAULT, *offered]


def test_candidate_budget_comes_from_the_op_config(tmp_path):
    run = cpu_engine(tmp_path, candidates=2).probe(gemm())
    assert len(run.measurements) == 3  # the default plus two


def test_disabled_op_is_refused(engine):
    with pytest.raises(UnsupportedProblemError, match="not enabled"):
        engine.probe(ProblemKey(op="add", dims={"numel": 10}))


def test_busy_device_delays_the_probe_without_sleeping(tmp_path):
    from tps.schemas import Telemetry

    class Busy:
        name = "busy"

        def snapshot(self):
            return Telemetry(source="busy", utilization_pct=95.0, temperature_c=90.0)

    clock = ManualClock()
    run = cpu_engine(tmp_path, telemetry=Busy(), clock=clock).probe(gemm())
    assert clock.slept == [0.5, 0.5, 0.5]
    assert run.telemetry.delayed_ms == 1500 and run.telemetry.thermal_safe
    assert "85 C" in run.rationale


class _Paced:
    """A timer that reports the default at `default_us` and any other kernel 3% faster."""

    name = "paced"

    def __init__(self, default_us):
        self.default_us = default_us
        self.reps = []

    def estimate_us(self, kernels):
        return [10.0 if k.candidate == VENDOR_DEFAULT else 5.0 for k in kernels]

    def arm(self, kernel, reps, kernel_us=0.0):
        from agents.probe.timers.base import Armed

        self.reps.append(reps)
        return Armed(kernel=kernel, reps=reps, kernel_us=kernel_us)

    def sample_rounds(self, armed, orders):
        return [
            {
                i: self.default_us * (1.0 if armed[i].kernel.candidate == VENDOR_DEFAULT else 0.97)
                for i in order
            }
            for order in orders
        ]


@pytest.mark.parametrize("default_us,tuned_wins", [(100.0, True), (800.0, False)])
def test_a_long_kernel_must_win_by_the_long_kernel_gain(tmp_path, default_us, tuned_wins):
    settings = FAST.model_copy(update={"long_kernel_us": 500.0, "long_kernel_min_gain": 0.05})
    timer = _Paced(default_us)
    run = cpu_engine(tmp_path, settings=settings, timer=timer, candidates=1).probe(gemm())
    assert (run.winner_id != VENDOR_DEFAULT.id) is tuned_wins, run.rationale
    assert ("had to win by 5%" in run.rationale) is not tuned_wins
    assert timer.reps == [10, 10]  # one launch count, from the fastest estimate


def test_cold_cache_rotates_operand_copies_that_outgrow_the_l2(tmp_path):
    settings = FAST.model_copy(update={"cold_cache": True, "cold_max_copies": 8})
    launches = []

    class Counting:
        """The real CPU timer, noting how many launches each sampled kernel makes."""

        name = "counting"

        def __init__(self):
            from agents.probe.timers.cpu import CpuTimer

            self.inner = CpuTimer()

        def estimate_us(self, kernels):
            return self.inner.estimate_us(kernels)

        def arm(self, kernel, reps, kernel_us=0.0):
            launches.append(kernel.launches)
            return self.inner.arm(kernel, reps, kernel_us)

        def sample_rounds(self, armed, orders):
            return self.inner.sample_rounds(armed, orders)

    run = cpu_engine(tmp_path, settings=settings, timer=Counting()).probe(gemm())
    assert all(m.valid for m in run.measurements), [m.error for m in run.measurements]
    assert launches and set(launches) == {8}  # 1 MiB of L2 against ~20 kB of operands: capped
    assert "8 operand copies in rotation" in run.rationale
