"""The latency anchor: a candidate's time on the closest known (device, problem), carried over."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from models.bundle import ModelBundle, model_from_dict, model_to_dict, train_bundle
from models.dataset import TuningData
from models.estimator import LatencyModel
from models.priors import rank
from models.reference import Reference, bound_us, dtype_peak_tflops, problem_distance
from models.scoring import GroupResult
from models.selection import choose_latency
from tests.factories import cublaslt, gemm_problem, hardware_spec, measurement, probe_run
from tests.models.conftest import FAST_MODEL
from tps.catalog import resolve
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

CANDIDATES = [cublaslt(i, split_k=1 + i % 3) for i in range(6)]
# Each candidate's latency is its own factor times the problem's roofline bound on the device.
FACTORS = [1.3, 1.1, 1.6, 2.0, 1.2, 1.45]


def _runs(
    devices: list[HardwareSpec], problems: list[ProblemKey], *, slowdown: float = 0.0
) -> TuningData:
    return TuningData.from_runs(_run_list(devices, problems, slowdown=slowdown))


def _run_list(
    devices: list[HardwareSpec], problems: list[ProblemKey], *, slowdown: float = 0.0
) -> list[ProbeRun]:
    """Every candidate at its factor of the bound; with `slowdown`, a device of fewer units
    is that much slower again per halving (what the bound ratio does not carry)."""
    return [
        probe_run(
            hardware=hw,
            problem=p,
            measurements=[
                measurement(
                    c, bound_us(hw, p) * f * (1 + slowdown * math.log2(132 / hw.active_units))
                )
                for c, f in zip(CANDIDATES, FACTORS, strict=True)
            ],
        )
        for hw in devices
        for p in problems
    ]


def test_a_dtype_without_a_datasheet_figure_takes_its_rate_from_fp16() -> None:
    h200 = hardware_spec()
    assert dtype_peak_tflops(h200, "bf16") == pytest.approx(989.4)
    assert dtype_peak_tflops(h200, "tf32") == pytest.approx(989.4 / 2)
    assert dtype_peak_tflops(h200, "fp8_e4m3") == pytest.approx(989.4 * 2)
    # an SM limit takes its share of the chip
    assert dtype_peak_tflops(hardware_spec(unit_limit=66), "bf16") == pytest.approx(989.4 / 2)


def test_the_bound_is_the_larger_of_compute_and_memory() -> None:
    h200 = hardware_spec()
    square = gemm_problem(4096, 4096, 4096)
    assert bound_us(h200, square) == pytest.approx(2 * 4096**3 / 989.4e6)
    gemv = gemm_problem(1, 4096, 4096)
    assert bound_us(h200, gemv) == pytest.approx(2 * (4096 * 4096 + 2 * 4096) / 4800e3)
    # half the SMs: half the peak and half the bandwidth
    assert bound_us(hardware_spec(unit_limit=66), square) == pytest.approx(
        2 * bound_us(h200, square)
    )


def test_a_limited_configuration_is_bound_by_the_bandwidth_it_measured() -> None:
    gemv = gemm_problem(1, 4096, 4096)
    moved = 2 * (4096 * 4096 + 2 * 4096)
    # on the H200, 16 SMs copied at 1500 GB/s, not 16/132 of the chip's 4800
    measured = hardware_spec(unit_limit=16, limited_bandwidth_gbs=1500.0)
    assert bound_us(measured, gemv) == pytest.approx(moved / 1500e3)
    assert bound_us(hardware_spec(unit_limit=16), gemv) == pytest.approx(
        moved / (4800e3 * 16 / 132)
    )
    # the compute side still takes the units' share of the peak
    square = gemm_problem(4096, 4096, 4096)
    assert bound_us(measured, square) == pytest.approx(2 * 4096**3 / (989.4e6 * 16 / 132))


def test_a_catalogued_gpus_bound_takes_the_datasheet_bandwidth_whatever_the_host_reported():
    # The H200 GEMM data: three runs reported NVML's 4814.3 GB/s, one a timed copy, 4250.5.
    gemv = gemm_problem(1, 4096, 4096)
    nvml = hardware_spec().model_copy(update={"mem_bandwidth_gbs": 4814.3})
    timed = hardware_spec().model_copy(update={"mem_bandwidth_gbs": 4250.5})
    assert bound_us(nvml, gemv) == bound_us(timed, gemv)
    assert bound_us(timed, gemv) == pytest.approx(2 * (4096 * 4096 + 2 * 4096) / 4800e3)
    # a limit's measured bandwidth still counts, capped by the datasheet's
    limited = timed.model_copy(update={"unit_limit": 16, "limited_bandwidth_gbs": 1500.0})
    assert bound_us(limited, gemv) == pytest.approx(2 * (4096 * 4096 + 2 * 4096) / 1500e3)
    # a device the catalog does not know keeps the figure its host reported
    unknown = timed.model_copy(update={"name": "Prototype Accelerator X9"})
    assert bound_us(unknown, gemv) == pytest.approx(2 * (4096 * 4096 + 2 * 4096) / 4250.5e3)


def test_a_candidate_measured_nearby_is_carried_by_the_bound_ratio() -> None:
    full = hardware_spec()
    problem = gemm_problem(4096, 4096, 4096)
    data = _runs([full], [problem])
    reference = Reference.from_data(data)
    ids = pd.Index([c.id for c in CANDIDATES] + [cublaslt(99).id])
    half = hardware_spec(unit_limit=66)
    columns = reference.anchor_columns(half, problem, ids)
    measured = np.exp(columns["anc_log_us"][:6])
    assert measured == pytest.approx([bound_us(full, problem) * f for f in FACTORS])
    assert columns["anc_log_scale"][:6] == pytest.approx(math.log(2))
    # never measured anywhere: nothing to carry, only the bound of the device asked about
    assert math.isnan(columns["anc_log_us"][6])
    assert columns["anc_log_bound"][6] == pytest.approx(math.log(bound_us(half, problem)))
    # the device's own measurements are left out when asked to
    excluded = reference.anchor_columns(full, problem, ids, exclude=full.fingerprint())
    assert np.isnan(excluded["anc_log_us"]).all()


def test_a_candidate_no_close_device_ran_starts_from_the_problems_level() -> None:
    full = hardware_spec()
    problem = gemm_problem(4096, 4096, 4096)
    reference = Reference.from_data(_runs([full], [problem]))
    ids = pd.Index([c.id for c in CANDIDATES] + [cublaslt(99).id])
    half = hardware_spec(unit_limit=66)
    columns = reference.anchor_columns(half, problem, ids)
    # the median of what the closest group measured, carried by the bound ratio, for every
    # candidate: the one never measured anywhere too
    level = np.median(np.log([bound_us(full, problem) * f for f in FACTORS])) + math.log(2)
    assert columns["anc_log_group"] == pytest.approx(np.full(7, level))
    assert (columns["anc_cross_dtype"] == 0).all()
    # the same shape in tf32 is carried from the bf16 measurements: across dtypes
    tf32 = gemm_problem(4096, 4096, 4096, dtype="tf32")
    crossed = reference.anchor_columns(half, tf32, ids)
    assert (crossed["anc_cross_dtype"] == 1).all()
    assert crossed["anc_log_scale"][0] == pytest.approx(
        math.log(bound_us(half, tf32) / bound_us(full, problem))
    )


SHAPES = [(1, 4096, 4096), (64, 8192, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]


def _corrections(model: LatencyModel, hardware: HardwareSpec, problem: ProblemKey) -> np.ndarray:
    """Return the anchored booster's log correction over the anchor it starts from."""
    anchors = model.reference_.anchor_columns(
        hardware, problem, [c.id for c in CANDIDATES], exclude=hardware.fingerprint()
    )
    predicted = model.anchored_us(hardware, problem, CANDIDATES)
    assert predicted is not None
    start = np.where(np.isfinite(anchors["anc_log_pred"]), anchors["anc_log_pred"], np.nan)
    return np.log(predicted) - start


def test_a_latency_carried_from_a_dtype_the_booster_never_crossed_is_not_corrected() -> None:
    devices = [hardware_spec(unit_limit=u) for u in (132, 96, 66, 48)]
    bf16 = [gemm_problem(m, n, k) for m, n, k in SHAPES]
    data = _runs(devices, bf16, slowdown=0.2)
    model = LatencyModel(op="gemm", n_estimators=40, n_jobs=1).fit(data)
    assert model.crossed_dtypes_ == frozenset()
    asked = hardware_spec(unit_limit=16)
    # a bf16 problem is carried within its dtype, as every training row was: corrected
    assert np.abs(_corrections(model, asked, bf16[1])).max() > 1e-6
    # the same shape in tf32: carried from bf16 measurements as they are
    tf32 = gemm_problem(*SHAPES[1], dtype="tf32")
    assert _corrections(model, asked, tf32) == pytest.approx(np.zeros(len(CANDIDATES)))

    # a fleet whose training rows carried tf32 from bf16 (one device ran tf32) corrects it
    fleet = TuningData.from_runs(
        _run_list(devices, bf16, slowdown=0.2) + _run_list(devices[-1:], [tf32], slowdown=0.2)
    )
    trained = LatencyModel(op="gemm", n_estimators=40, n_jobs=1).fit(fleet)
    assert trained.crossed_dtypes_ == frozenset({"tf32"})
    assert np.abs(_corrections(trained, asked, tf32)).max() > 1e-6


def test_an_artifact_keeps_its_crossed_dtypes_and_an_older_one_still_predicts() -> None:
    devices = [hardware_spec(unit_limit=u) for u in (132, 66)]
    problems = [gemm_problem(m, n, k) for m, n, k in SHAPES]
    data = _runs(devices, problems, slowdown=0.2)
    asked, problem = hardware_spec(unit_limit=16), gemm_problem(*SHAPES[2], dtype="tf32")
    model = LatencyModel(op="gemm", n_estimators=20, n_jobs=1).fit(data)
    again = model_from_dict(json.loads(json.dumps(model_to_dict(model))))
    assert again.crossed_dtypes_ == model.crossed_dtypes_ == frozenset()
    assert again.anchored_us(asked, problem, CANDIDATES) == pytest.approx(
        model.anchored_us(asked, problem, CANDIDATES)
    )
    # an artifact from before the problem's level anchored a candidate has no crossed
    # dtypes: it still predicts, and corrects every row as it did
    doc = model_to_dict(model)
    del doc["crossed_dtypes"]
    old = model_from_dict(doc)
    assert old.crossed_dtypes_ is None
    predicted = old.anchored_us(asked, problem, CANDIDATES)
    assert predicted is not None and np.isfinite(predicted).all()
    assert np.abs(_corrections(old, asked, problem)).max() > 1e-6


def test_the_anchored_regressor_carries_latency_below_every_device_it_saw() -> None:
    problems = [
        gemm_problem(m, n, k)
        for m, n, k in [(1, 4096, 4096), (64, 8192, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]
        + [(2048, 8192, 1024), (16, 14336, 4096), (512, 512, 8192), (8192, 8192, 512)]
    ]
    training = [hardware_spec(unit_limit=u) for u in (132, 96, 66, 48)]
    held_out = hardware_spec(unit_limit=16)  # a quarter of the smallest device trained on
    data = _runs(training, problems)
    errors = {}
    for anchored in (True, False):
        model = LatencyModel(op="gemm", n_estimators=60, n_jobs=1, anchored=anchored).fit(data)
        ape = []
        for problem in problems:
            _, _, predicted = model.predict(held_out, problem, CANDIDATES)
            truth = np.array([bound_us(held_out, problem) * f for f in FACTORS])
            ape.append(np.median(np.abs(predicted / truth - 1)))
        errors[anchored] = float(np.mean(ape))
    assert errors[True] < 0.10
    # trees alone cannot go below the slowest latency they were shown
    assert errors[False] > 0.5


def _results(*apes: dict[str, float | None]) -> list[GroupResult]:
    return [GroupResult(scores={}, curves={}, n_candidates=4, latency_ape=dict(a)) for a in apes]


def test_the_served_latency_is_the_booster_with_the_lower_error_over_the_folds() -> None:
    better_plain = [
        _results({"anchored": 0.4, "regressor": 0.2}),
        _results({"anchored": 0.3, "regressor": 0.25}, {"anchored": 0.5, "regressor": 0.3}),
    ]
    assert choose_latency(better_plain) == "regressor"
    better_anchored = [_results({"anchored": 0.05, "regressor": 0.2}), *better_plain[1:]]
    assert choose_latency(better_anchored) == "anchored"
    # a fold without the plain figure, or no folds at all: the anchored booster
    assert choose_latency([*better_plain, _results({"anchored": 0.9})]) == "anchored"
    assert choose_latency([]) == "anchored"
    # the anchor alone, uncorrected, where the booster's correction does harm on the folds
    shrunk = [_results({"anchored": 0.8, "regressor": 0.6, "anchored*0.5": 0.3, "carried": 0.4})]
    assert choose_latency(shrunk * 2) == "anchored*0.5"


def test_a_bundle_serves_the_latency_of_its_chosen_booster(convolution_data: TuningData) -> None:
    bundle = train_bundle(convolution_data, model_params=FAST_MODEL)
    problem = next(iter(convolution_data.problems.values()))
    hardware = resolve("MI300X")
    model = bundle.model_for("convolution")
    ranked = rank(bundle, hardware, problem, limit=5)
    frame = model.predict_frame(hardware, problem, [r.candidate for r in ranked]).set_index(
        "candidate_id"
    )
    choice = bundle.policy_for("convolution")
    assert choice is not None
    for latency, column in (
        ("anchored", "predicted_us"),
        ("regressor", "regressor_us"),
        ("carried", "carried_us"),
    ):
        choice.latency = latency
        served = ModelBundle.from_bytes(bundle.to_bytes())
        answer = rank(served, hardware, problem, limit=5)
        expected = [frame.loc[r.candidate.id, column] for r in answer]
        assert [r.predicted_us for r in answer] == pytest.approx(expected)
    assert not np.allclose(frame["predicted_us"], frame["regressor_us"])
    assert not np.allclose(frame["predicted_us"], frame["carried_us"])
    # half the booster's correction: the geometric mean of the anchor and the booster
    choice.latency = "anchored*0.5"
    answer = rank(ModelBundle.from_bytes(bundle.to_bytes()), hardware, problem, limit=5)
    expected = [
        math.sqrt(
            frame.loc[r.candidate.id, "predicted_us"] * frame.loc[r.candidate.id, "carried_us"]
        )
        for r in answer
    ]
    assert [r.predicted_us for r in answer] == pytest.approx(expected)


def test_the_closest_problems_are_those_of_problem_distance() -> None:
    problems = [
        gemm_problem(m, n, k, **extra)
        for m, n, k, extra in [
            (1, 4096, 4096, {}),
            (64, 4096, 4096, {}),
            (64, 4096, 4096, {"dtype": "fp16"}),
            (512, 512, 8192, {"trans_a": True}),
            (4096, 4096, 4096, {}),
            (8, 8, 8, {"variant": "padded"}),
        ]
    ]
    reference = Reference.from_data(_runs([hardware_spec()], problems))
    asked = [*problems, gemm_problem(100, 3000, 700), gemm_problem(64, 64, 64, dtype="tf32")]
    for problem in asked:
        expected = sorted((problem_distance(problem, p), p.key_hash()) for p in problems)
        closest = reference._closest_problems(problem)
        assert [h for _, h in closest] == [h for _, h in expected]
        assert [d for d, _ in closest] == pytest.approx([d for d, _ in expected])
    assert reference.closest_problem(asked[-2]) == expected_first(asked[-2], problems)


def expected_first(problem: ProblemKey, problems: list[ProblemKey]) -> str:
    return min((problem_distance(problem, p), p.key_hash()) for p in problems)[1]


def test_distances_to_every_known_device_are_those_of_spec_distance() -> None:
    from models.reference import spec_distance

    names = ["A100", "RTX A4000", "W7800", "MI300X", "H100"]
    devices = [resolve(n) for n in names] + [hardware_spec(unit_limit=u) for u in (16, 66)]
    problem = gemm_problem(4096, 4096, 4096)
    reference = Reference.from_data(_runs(devices, [problem]))
    for asked in [*devices, resolve("RTX 3090"), hardware_spec(unit_limit=32)]:
        by_key = {k: spec_distance(asked, h) for k, h in reference.hardware.items()}
        table = reference._hardware_table
        assert table.distances(asked) == pytest.approx([by_key[k] for k in table.keys])
        nearest = reference.nearest_hardware(asked, problem.key_hash())
        assert nearest is not None
        assert nearest[0] == min(by_key, key=lambda k: (by_key[k], k))
        assert nearest[1] == pytest.approx(min(by_key.values()))
