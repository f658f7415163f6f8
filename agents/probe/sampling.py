"""Interleaved, adaptive sampling of armed kernels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.probe.stats import SampleSummary, summarize
from agents.probe.timers.base import Armed, Timer


@dataclass(frozen=True)
class SamplingPolicy:
    samples: int = 10
    min_samples: int = 5
    max_samples: int = 100
    cv_threshold: float = 0.15
    extra_batch: int = 10
    # Soft budget for the timed part; a large problem gets fewer (never < min_samples) samples.
    budget_us: float = 20_000.0
    # Hard cap on what extra samples for noisy candidates may add.
    max_extra_us: float = 200_000.0


@dataclass
class SampleSet:
    values: list[list[float]]
    rounds: int = 0
    extended: list[int] = field(default_factory=list)

    def summary(self, i: int) -> SampleSummary:
        return summarize(self.values[i])


def interleaved(indices: Sequence[int], round_: int) -> list[int]:
    """Round `round_` of a carryover-balanced round robin (a Williams design).

    Each candidate takes every position once per cycle of rounds, as a plain rotation does,
    and, unlike a rotation, follows every other candidate equally often: n rounds for an
    even n, 2n for an odd one. A kernel runs faster after one that left the data it starts
    on in the L2; under a rotation it always follows the same neighbour, and that neighbour's
    leftovers were a systematic bias of a few percent on memory-bound products.
    """
    n = len(indices)
    if n == 0:
        return []
    first = [0]
    for j in range(1, n):  # 0, 1, n-1, 2, n-2, ...
        first.append((j + 1) // 2 if j % 2 else n - j // 2)
    shift = round_ % n
    row = [indices[(k + shift) % n] for k in first]
    if n % 2 and (round_ // n) % 2:
        row.reverse()  # odd n: the mirrored square balances what the first one cannot
    return row


def planned_samples(policy: SamplingPolicy, cost_per_round_us: float) -> int:
    """Return the samples per candidate that fit the budget, between min and the default."""
    if cost_per_round_us <= 0:
        return policy.samples
    fit = math.floor(policy.budget_us / cost_per_round_us)
    return max(policy.min_samples, min(policy.samples, fit))


def shared_reps(estimates_us: Sequence[float], *, target_us: float, max_reps: int) -> int:
    """Return one launch count per sample for every candidate of a probe.

    A sample replays `reps` launches between two events, and the replay itself adds a
    few µs that each launch carries 1/reps of. Counts chosen per candidate from single
    launch estimates favoured whichever drew the most: on the H200 one cuBLASLt algorithm
    for (1000, 1000, 1000) bf16 measured 7.7 µs in one probe and 9.0 µs in the next
    (6.9 µs in both with 4 ms samples). One count, from the fastest, charges all alike.
    """
    positive = [e for e in estimates_us if e > 0]
    fastest = min(positive) if positive else target_us
    return max(1, min(max_reps, math.ceil(target_us / fastest)))


def collect(timer: Timer, armed: Sequence[Armed], policy: SamplingPolicy) -> SampleSet:
    """Sample every armed kernel round-robin; add rounds for those whose CV stays high."""
    n = len(armed)
    cost = sum(a.reps * a.kernel_us for a in armed if a.kernel_us)
    first = planned_samples(policy, cost)
    everyone = list(range(n))
    out = SampleSet(values=[[] for _ in range(n)])
    _run(timer, armed, out, [interleaved(everyone, r) for r in range(first)])
    spent = 0.0
    while True:
        noisy = [
            i
            for i in everyone
            if len(out.values[i]) < policy.max_samples and out.summary(i).cv > policy.cv_threshold
        ]
        if not noisy:
            break
        batch_cost = sum(armed[i].reps * (armed[i].kernel_us or 0.0) for i in noisy)
        if spent + batch_cost * policy.extra_batch > policy.max_extra_us and spent > 0:
            break
        room = min(policy.max_samples - len(out.values[i]) for i in noisy)
        rounds = max(1, min(policy.extra_batch, room))
        _run(timer, armed, out, [interleaved(noisy, out.rounds + r) for r in range(rounds)])
        spent += batch_cost * rounds
        out.extended = sorted(set(out.extended) | set(noisy))
    return out


def _run(timer: Timer, armed: Sequence[Armed], out: SampleSet, orders: list[list[int]]) -> None:
    for row in timer.sample_rounds(armed, orders):
        for i, us in row.items():
            out.values[i].append(us)
    out.rounds += len(orders)
