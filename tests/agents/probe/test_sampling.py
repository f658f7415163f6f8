"""Interleaved, adaptive sampling on scripted timings."""

from collections import Counter

import pytest

from agents.probe.sampling import SamplingPolicy, collect, interleaved, planned_samples
from agents.probe.timers.base import Armed
from agents.providers.base import Kernel
from tps.candidate import Candidate


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


def test_one_launch_count_for_every_candidate_from_the_fastest():
    from agents.probe.sampling import shared_reps

    assert shared_reps([8.0, 16.0, 40.0], target_us=30.0, max_reps=64) == 4
    assert shared_reps([0.0, 40.0, 90.0], target_us=30.0, max_reps=64) == 1
    assert shared_reps([0.1], target_us=30.0, max_reps=64) == 64
    assert shared_reps([], target_us=30.0, max_reps=64) == 1
