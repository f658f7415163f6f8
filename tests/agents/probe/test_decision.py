"""The decision rules, on numbers chosen to make each rule bite."""

from agents.ops.base import Check
from agents.probe.decision import (
    choose_winner,
    decide,
    pick_shortlist,
    required_margin,
    validation_error,
)
from agents.probe.settings import ProbeSettings
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.schemas import Measurement, Telemetry


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


def _measured(candidate, median_us):
    return Measurement(
        candidate=candidate,
        median_us=median_us,
        p10_us=median_us,
        p90_us=median_us,
        std_us=0.0,
        samples=10,
    )


def test_a_decision_names_every_rule_that_raised_the_margin():
    tuned = Candidate(backend="tuned")
    measurements = [
        _measured(VENDOR_DEFAULT, 1000.0),
        _measured(tuned, 970.0),
        Measurement(candidate=Candidate(backend="broken"), valid=False, error="boom"),
    ]
    hot = Telemetry(thermal_safe=True, delayed_ms=1000.0)
    decision = decide(measurements, failed=1, settings=ProbeSettings(), telemetry=hot)
    assert decision.winner_id == VENDOR_DEFAULT.id
    assert decision.rationale.startswith("kept vendor-default 1000.00 us")
    assert "2 measured, 1 failed or invalid" in decision.rationale
    assert decision.rationale.endswith(
        "; default above 500 us: a tuned kernel had to win by 5%"
        "; device above 85 C: a tuned kernel had to win by 5%"
        "; waited 1000 ms for a busy device"
    )
    cool = decide(
        measurements,
        failed=1,
        settings=ProbeSettings(long_kernel_us=5000.0),
        telemetry=Telemetry(),
        confirm=lambda _: 0.03,
    )
    assert cool.winner_id == tuned.id and cool.rationale.endswith("head to head +3.0%")
