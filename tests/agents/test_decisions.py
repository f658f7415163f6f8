"""Statistics and decision rules, on numbers chosen to make each rule bite."""

from collections import Counter

import pytest

from agents.ops.base import Check
from agents.probe.decision import choose_winner, pick_shortlist, required_margin, validation_error
from agents.probe.sampling import SamplingPolicy, collect, interleaved, planned_samples
from agents.probe.settings import ProbeSettings
from agents.probe.stats import reject_outliers, summarize
from agents.probe.timers.base import Armed
from agents.providers.base import Kernel
from tps.candidate import VENDOR_DEFAULT, Candidate


def test_iqr_rejects_outliers_and_keeps_the_rest():
    values = [10.0, 10.2, 9.9, 10.1, 10.0, 55.0, 10.3, 0.5]
    kept, dropped = reject_outliers(values)
    assert dropped == 2 and 55.0 not in kept and 0.5 not in kept
    summary = summarize(values)
    assert summary.outliers_rejected == 2 and 9.9 <= summary.median_us <= 10.3
    assert summary.samples == 8 and summary.cv < 0.02


class ScriptedTimer:
    """Returns per-kernel sample streams from a script: one noisy, one steady kernel."""

    name = "scripted"

    def __init__(self, streams):
        self.streams = [iter(s) for s in streams]

    def estimate_us(self, kernels):
        return [10.0 for _ in kernels]

    def arm(self, kernel, reps, kernel_us=0.0):
        return Armed(kernel=kernel, reps=reps, kernel_us=kernel_us)

    def sample_rounds(self, armed, orders):
        return [{i: next(self.streams[i]) for i in order} for order in orders]


def _armed(n):
    return [
        Armed(
            kernel=Kernel(candidate=Candidate(backend=f"k{i}"), run=lambda: None),
            reps=1,
            kernel_us=10.0,
        )
        for i in range(n)
    ]


def test_noisy_candidates_get_more_samples_up_to_the_cap():
    import itertools

    noisy = itertools.cycle([5.0, 20.0, 8.0, 30.0])  # CV far above 15%
    steady = itertools.cycle([10.0, 10.1, 9.9])
    policy = SamplingPolicy(samples=10, max_samples=100, max_extra_us=1e9)
    sampled = collect(ScriptedTimer([noisy, steady]), _armed(2), policy)
    assert len(sampled.values[1]) == 10
    assert len(sampled.values[0]) == 100
    assert sampled.extended == [0]


def test_sample_count_shrinks_to_fit_the_budget_but_never_below_the_minimum():
    policy = SamplingPolicy(samples=10, min_samples=5, budget_us=20_000)
    assert planned_samples(policy, 100.0) == 10
    assert planned_samples(policy, 3_000.0) == 6
    assert planned_samples(policy, 1e6) == 5


@pytest.mark.parametrize("n", range(1, 10))
def test_round_robin_balances_positions_and_neighbours(n):
    cycle = n if n % 2 == 0 else 2 * n
    rows = [interleaved(list(range(10, 10 + n)), r) for r in range(cycle)]
    assert all(sorted(row) == list(range(10, 10 + n)) for row in rows)
    for position in range(n):  # every candidate in every position equally often
        assert Counter(row[position] for row in rows) == {c: cycle // n for c in range(10, 10 + n)}
    pairs = Counter((a, b) for row in rows for a, b in zip(row, row[1:], strict=False))
    # every candidate follows every other one equally often (n - 1 pairs per row)
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) <= 1


def test_a_rotation_would_fail_the_neighbour_balance():
    rows = [interleaved([0, 1, 2, 3], r) for r in range(4)]
    rotation = [[(k + r) % 4 for k in range(4)] for r in range(4)]
    assert rows != rotation
    assert (
        Counter((a, b) for row in rotation for a, b in zip(row, row[1:], strict=False))[(0, 1)] == 3
    )


def _labels(*backends):
    candidates = [
        VENDOR_DEFAULT if b == "vendor-default" else Candidate(backend=b) for b in backends
    ]
    return [c.id for c in candidates], {c.id: c.label() for c in candidates}


def test_default_keeps_its_place_unless_clearly_beaten():
    (default, fast), labels = _labels("vendor-default", "fast")
    medians = {default: 100.0, fast: 99.5}
    decision = choose_winner(medians, labels=labels, failed=0, min_gain=0.01)
    assert decision.winner_id == default and "within 1%" in decision.rationale
    medians[fast] = 90.0
    assert choose_winner(medians, labels=labels, failed=0, min_gain=0.01).winner_id == fast


def test_a_lead_that_does_not_hold_head_to_head_loses():
    (default, lucky), labels = _labels("vendor-default", "lucky")
    medians = {default: 100.0, lucky: 90.0}
    lost = choose_winner(medians, labels=labels, failed=0, min_gain=0.01, confirm=lambda _: -0.05)
    assert lost.winner_id == default and "head to head" in lost.rationale
    held = choose_winner(medians, labels=labels, failed=0, min_gain=0.01, confirm=lambda _: 0.08)
    assert held.winner_id == lucky and "head to head +8.0%" in held.rationale


def test_without_a_measured_default_the_fastest_wins():
    (_, slow, fast), labels = _labels("vendor-default", "slow", "fast")
    decision = choose_winner({slow: 20.0, fast: 10.0}, labels=labels, failed=1, min_gain=0.5)
    assert decision.winner_id == fast and "default unmeasured" in decision.rationale
    assert "1 failed or invalid" in decision.rationale
    assert choose_winner({}, labels=labels, failed=3, min_gain=0.01).winner_id is None


def test_a_hot_device_or_a_long_kernel_raises_the_margin():
    settings = ProbeSettings()
    assert required_margin(settings, default_us=10.0, thermal_safe=False).min_gain == 0.01
    hot = required_margin(settings, default_us=10.0, thermal_safe=True)
    assert hot.min_gain == 0.05 and "85 C" in hot.notes[0]
    long = required_margin(settings, default_us=800.0, thermal_safe=False)
    assert long.min_gain == 0.05 and "above 500 us" in long.notes[0]


def test_a_wrong_output_is_a_validation_error():
    assert validation_error(Check(ok=True, rel_err=1e-6, tolerance=1e-4)) is None
    error = validation_error(Check(ok=False, rel_err=0.5, tolerance=1e-4))
    assert error is not None and error.startswith("wrong result: relative error 0.5")


def test_shortlist_takes_quotas_then_fills_leftover_slots():
    offers = {
        "cublaslt": [Candidate(backend="cublaslt", params={"a": i}) for i in range(6)],
        "triton": [Candidate(backend="triton", params={"b": i}) for i in range(1)],
        "padded": [],
    }
    chosen = pick_shortlist(offers, {"padded": 1, "cublaslt": 3, "triton": 3}, 7)
    assert [c.backend for c in chosen] == ["cublaslt"] * 3 + ["triton"] + ["cublaslt"] * 3


def test_one_launch_count_for_every_candidate_from_the_fastest():
    from agents.probe.sampling import shared_reps

    assert shared_reps([8.0, 16.0, 40.0], target_us=30.0, max_reps=64) == 4
    assert shared_reps([0.0, 40.0, 90.0], target_us=30.0, max_reps=64) == 1
    assert shared_reps([0.1], target_us=30.0, max_reps=64) == 64
    assert shared_reps([], target_us=30.0, max_reps=64) == 1
