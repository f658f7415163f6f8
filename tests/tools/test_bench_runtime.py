"""The runtime bench's side-by-side rounds and the interval of its ratios."""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.runtime import Clock, ratio_interval


def test_the_interval_holds_the_true_ratio_and_widens_with_noise():
    rng = np.random.default_rng(1)
    base = rng.uniform(10.0, 20.0, size=60)  # each round's own level: drift between rounds
    quiet = ratio_interval(list(base * 1.1 * rng.normal(1, 0.005, 60)), list(base))
    noisy = ratio_interval(list(base * 1.1 * rng.normal(1, 0.1, 60)), list(base))
    assert quiet[0] <= 1.1 <= quiet[1] and quiet[1] - quiet[0] < 0.01
    # rounds are paired: the drift between rounds (10 to 20 ms) leaves no trace
    assert noisy[1] - noisy[0] > 5 * (quiet[1] - quiet[0])
    with pytest.raises(ValueError, match="no rounds"):
        ratio_interval([], [])


def test_side_by_side_keeps_each_rounds_median_per_variant():
    clock = Clock("cpu")
    calls = {"a": 0, "b": 0}

    def call(name: str):
        def run() -> None:
            calls[name] += 1

        return run

    times = clock.side_by_side({"a": call("a"), "b": call("b")}, rounds=8, per_round=3)
    assert set(times) == {"a", "b"}
    assert [len(clock.rounds[n]) for n in ("a", "b")] == [8, 8]
    assert calls == {"a": 3 + 8 * 3, "b": 3 + 8 * 3}  # warm-up, then every round
    low, high = clock.interval("a", "b")
    assert 0 < low <= high
    clock.rounds = {"a": [2.0, 4.0, 9.0], "b": [1.0, 1.0, 10.0]}  # ratios 2, 4, 0.9
    assert clock.paired("a", "b") == 2.0  # round by round, not 4.0 / 1.0


def test_every_compiled_ratio_with_an_interval_is_a_field_of_the_case():
    from dataclasses import fields

    from tools.bench.runtime import COMPILED_RATIOS, CaseResult

    names = {f.name for f in fields(CaseResult)}
    assert {name for name, _, _ in COMPILED_RATIOS} <= names
    assert "intervals" in names


def test_tunableop_counts_only_the_products_a_case_added():
    from tools.bench.runtime import tunableop_counts

    first = [("GemmTunableOp_BFloat16_TN", "tn_1024_1_1024", "Default", 0.01)]
    after = [
        *first,
        ("GemmTunableOp_BFloat16_TN", "tn_4096_1_1024", "Default", 0.02),
        ("GemmTunableOp_BFloat16_TN", "tn_1024_1_4096", "Gemm_Cublaslt_17", 0.01),
    ]
    # the earlier case's product is neither tuned nor changed by this one
    assert tunableop_counts(after, earlier=first) == (2, 1)
    assert tunableop_counts(after, earlier=[]) == (3, 1)
    assert tunableop_counts(first, earlier=first) == (0, 0)


def test_each_hosts_routes_are_reported_with_what_ran_and_why():
    from agents.runtime.dispatch import Route
    from tools.bench.runtime import _decisions
    from tps.candidate import Candidate
    from tps.problem import ProblemKey

    problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": 8, "n": 16, "k": 32})
    winner = Candidate(backend="triton", params={"BLOCK_M": 16})
    routes = [
        Route(problem=problem, runner=lambda a, b: a @ b, candidate=winner, gain=0.2, reason="hit"),
        Route(problem=problem, candidate=winner, gain=0.001, reason="near tie: +0.1%"),
        Route(problem=None),
    ]
    got = _decisions(routes)
    assert [d["routed"] for d in got] == [True, False, False]
    assert got[0]["problem"] == problem.canonical() and got[2]["problem"] is None
    assert got[1]["candidate"] == winner.label() and got[1]["reason"] == "near tie: +0.1%"
    assert got[2]["candidate"] is None and got[2]["reason"] == "miss"
