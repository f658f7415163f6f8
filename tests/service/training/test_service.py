"""The quality gate's rules, and how a job picks its data (no database needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.dataset import TuningData
from models.reports import HoldoutReport
from services.profiler_api.training.service import (
    TrainingError,
    floor,
    gate,
    holdout_for,
    subsample_candidates,
    versus_nearest,
)
from tests.factories import holdout_report, source_summary, tuning_runs


def _report(s1: float, s5: float, random_s5: float = 0.5) -> HoldoutReport:
    report: HoldoutReport = holdout_report(policy=(s1, s5), random_s5=random_s5)
    return report


def test_gate_passes_within_tolerance_and_names_what_got_worse() -> None:
    champion = _report(0.90, 0.95)
    assert gate(_report(0.89, 0.95), champion, version=3, tolerance=0.02) == []
    reasons = gate(_report(0.80, 0.95), champion, version=3, tolerance=0.02)
    assert len(reasons) == 1 and "score_at_1 0.8000" in reasons[0] and "v3" in reasons[0]
    assert len(gate(_report(0.80, 0.90), champion, version=3, tolerance=0.0)) == 2


def test_floor_rejects_a_ranking_worse_than_random_order() -> None:
    assert floor(_report(0.5, 0.6, random_s5=0.5)) == []
    assert "below random order" in floor(_report(0.3, 0.4, random_s5=0.5))[0]


def test_the_served_ranking_must_match_copying_the_nearest_device() -> None:
    report = replace(_report(0.80, 0.95), baseline_nearest=source_summary(0.80, 0.9))
    assert versus_nearest(report) == []
    report = replace(report, baseline_nearest=source_summary(0.80, 0.96))
    (reason,) = versus_nearest(report)
    assert "score_at_5 0.9500" in reason and "nearest device" in reason and "0.9600" in reason
    # No nearest device (nothing else measured the problem): nothing to compare with.
    assert versus_nearest(replace(_report(0.1, 0.2), baseline_nearest=None)) == []


def test_subsample_keeps_the_same_candidates_on_every_hardware() -> None:
    data = TuningData.from_runs(tuning_runs(["RTX A4000", "W6600"]))
    small = subsample_candidates(data, max_candidates=10, seed=0)
    per_hw = small.frame.groupby("hw_key")["candidate_id"].apply(frozenset)
    assert len(set(per_hw)) == 1 and len(per_hw.iloc[0]) == 10
    assert subsample_candidates(data, max_candidates=None, seed=0) is data


def test_holdout_needs_two_hardware() -> None:
    data = TuningData.from_runs(tuning_runs(["RTX A4000", "W6600", "A100"]))
    assert holdout_for(data, "convolution", None) == holdout_for(data, "convolution", None)
    assert holdout_for(data, "convolution", "W6600") == "W6600"
    one = TuningData.from_runs(tuning_runs(["RTX A4000"]))
    with pytest.raises(TrainingError, match="at least two"):
        holdout_for(one, "convolution", None)
