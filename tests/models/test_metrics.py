import math

import numpy as np
import pytest

from models.metrics import ranking_scores, scores_at_ks, spearman

# Candidate latencies (µs): 2 is the best, 4 failed on this hardware.
TRUE_US = np.array([10.0, 12.0, 5.0, 5.1, math.inf, 20.0])


def test_scores_of_a_known_ranking() -> None:
    order = np.array([4, 1, 0, 3, 5, 2])  # a failed pick first, then mediocre ones
    s = ranking_scores(TRUE_US, order, predicted_us=np.array([10, 10, 5, 10, 1, 30.0]))
    assert s.score_at_1 == 0.0
    assert s.score_at_5 == pytest.approx(5.0 / 5.1)
    assert s.regret_at_1 == pytest.approx(12.0 / 5.0 - 1)  # first candidate that runs
    assert s.probes_to_3pct == 4  # 5.1 is within 3% of 5.0
    assert s.median_ape == pytest.approx(np.median([0, 1 / 6, 0, 4.9 / 5.1, 0.5]))
    assert scores_at_ks(TRUE_US, order, range(1, 7)) == pytest.approx(
        [0, 5 / 12, 5 / 10, 5 / 5.1, 5 / 5.1, 1.0]
    )
    assert scores_at_ks(TRUE_US, order, range(1, 21))[6:] == [1.0] * 14  # k past the end


def test_perfect_and_reversed_orders() -> None:
    perfect = np.argsort(TRUE_US)
    s = ranking_scores(TRUE_US, perfect)
    assert (s.score_at_1, s.probes_to_3pct, s.regret_at_1) == (1.0, 1, 0.0)
    assert spearman(TRUE_US, perfect) == pytest.approx(1.0)
    assert spearman(TRUE_US, perfect[::-1]) == pytest.approx(-1.0)
