import json

import pytest

from models.dataset import TuningData
from models.evaluation import EvaluationError, evaluate_holdout, match_hardware
from models.policy import BlendPolicy
from tests.models.conftest import FAST_MODEL, subsample
from tps.schemas import ProbeRun

SOURCES = ("model", "baseline_nearest", "baseline_random", "policy")
METRICS = ("score_at_1", "score_at_5", "regret_at_1", "probes_to_3pct", "spearman", "median_ape")


def test_holdout_report_has_the_promised_shape(convolution_data: TuningData) -> None:
    report = evaluate_holdout(
        convolution_data, "NVIDIA RTX A6000", op="convolution", model_params=FAST_MODEL
    )
    assert report.holdout == "NVIDIA RTX A6000"
    assert report.op == "convolution" and report.n_candidates == 400
    assert report.n_train_rows == 3 * 400  # the held-out GPU's rows never reach training
    nearest, random = report.baseline_nearest, report.baseline_random
    assert nearest is not None
    for summary in (report.model, nearest, random, report.policy):
        assert 0.0 <= (summary.score_at_1 or 0.0) <= (summary.score_at_5 or 0.0) <= 1.0
        assert len(summary.score_at_k) == 20
    assert random.median_ape is None
    # A6000's nearest by spec is the A4000, whose ranking is close: it must beat random.
    assert (nearest.score_at_5 or 0.0) > (random.score_at_5 or 0.0)
    assert report.policy.lead_sources == ["nearest"]
    # The served policy was chosen on the three training GPUs, never on the A6000.
    folds = report.policy_choice.folds
    assert [f.holdout for f in folds] == [
        "AMD Radeon PRO W7800",
        "NVIDIA A100 PCIe 40GB",
        "NVIDIA RTX A4000",
    ]
    chosen = report.policy.name
    for fold in folds:  # never below copying the nearest device on a training fold
        policy, baseline = fold.policies[chosen], fold.baseline_nearest
        assert (policy.score_at_1 or 0.0) >= (baseline.score_at_1 or 0.0) - 1e-9
        assert (policy.score_at_5 or 0.0) >= (baseline.score_at_5 or 0.0) - 1e-9


def test_holdout_report_writes_the_documented_json(convolution_data: TuningData) -> None:
    report = evaluate_holdout(
        convolution_data, "NVIDIA RTX A6000", op="convolution", model_params=FAST_MODEL
    )
    doc = report.as_dict()
    assert list(doc) == [
        "holdout",
        "op",
        "n_candidates",
        "n_problems",
        "n_train_rows",
        "model",
        "baseline_nearest",
        "baseline_random",
        "policy",
        "candidate_policies",
        "policy_choice",
        "calibration",
    ]
    for source in SOURCES:
        assert list(doc[source])[: len(METRICS)] == list(METRICS), source
        assert doc[source]["score_at_1"] == getattr(report, source).score_at_1
    assert list(doc["policy"])[-3:] == ["name", "near_distance", "lead_sources"]
    assert list(doc["policy_choice"]) == ["name", "rule", "folds", "calibrated", "latency"]
    assert doc["policy_choice"]["latency"] in ("anchored", "regressor", "carried")
    fold = doc["policy_choice"]["folds"][0]
    assert list(fold)[:2] == ["holdout", "baseline_nearest"]
    assert list(fold[report.policy.name]) == ["score_at_1", "score_at_5", "probes_share"]
    assert doc["calibration"]["positions"] == report.calibration.positions
    assert json.loads(json.dumps(doc)) == doc


def test_a_nearest_device_that_ran_few_of_the_candidates_does_not_lead(
    convolution_runs: list[ProbeRun],
) -> None:
    # The A4000, the A6000's nearest, keeps 80% of the candidates: its copied ranking would
    # put the other 20% last, so the model leads the A6000's priors.
    ids = sorted({m.candidate.id for m in convolution_runs[0].measurements})
    keep = set(ids[: int(0.8 * len(ids))])
    runs = [
        subsample(run, keep) if "A4000" in run.hardware.name else run for run in convolution_runs
    ]
    report = evaluate_holdout(
        TuningData.from_runs(runs),
        "NVIDIA RTX A6000",
        op="convolution",
        model_params=FAST_MODEL,
        policy=BlendPolicy(),
    )
    assert report.policy.lead_sources == ["model"]


def test_policy_leads_with_nearest_only_when_close_and_covering() -> None:
    policy = BlendPolicy(near_distance=2.0, min_coverage=0.9)
    assert policy.source_order(1.5, 1.0)[0] == "nearest"
    assert policy.source_order(1.5, 0.85)[0] == "model"
    assert policy.source_order(2.5, 1.0)[0] == "model"
    assert policy.source_order(None)[0] == "model"


def test_auto_consensus_leads_with_the_known_devices_consensus_when_none_is_close() -> None:
    policy = BlendPolicy(lead="auto-consensus", near_distance=2.0, min_coverage=0.9)
    assert policy.name == "auto-consensus"
    assert policy.source_order(1.5, 1.0) == ("nearest", "model", "consensus")
    assert policy.source_order(2.5, 1.0) == ("consensus", "nearest", "model")
    assert policy.source_order(None) == ("consensus", "nearest", "model")
    # the plain `auto` is unchanged: the model leads where no device is close
    assert BlendPolicy(lead="auto").source_order(2.5, 1.0)[0] == "model"
    # a chosen policy is stored by its fields and read back the same
    assert BlendPolicy(**policy.to_dict()) == policy


def test_holdout_names_resolve_through_the_catalog(convolution_data: TuningData) -> None:
    assert match_hardware(convolution_data, "A100") == match_hardware(
        convolution_data, "NVIDIA A100-PCIE-40GB"
    )
    with pytest.raises(EvaluationError, match="no hardware matches 'T4'"):
        match_hardware(convolution_data, "T4")


def test_evaluation_ranks_as_serving_does_the_shortlist_first(
    convolution_data: TuningData,
) -> None:
    from models.bundle import ModelBundle
    from models.priors import served_candidates
    from models.ranking import source_rankings
    from models.scoring import _Shortlisted
    from models.selection import FoldModels

    data = convolution_data.for_op("convolution")
    model = FoldModels(data, op="convolution", model_params=FAST_MODEL).without(
        ("NVIDIA RTX A6000",)
    )
    a6000 = next(h for h in data.hardware.values() if h.name == "NVIDIA RTX A6000")
    group = data.frame[data.frame["hw_key"] == a6000.fingerprint()]
    problem = data.problems[group["problem_hash"].iloc[0]]
    candidates = [data.candidates[c] for c in group["candidate_id"]]
    shortlist = model.reference_.shortlist(problem.key_hash())
    assert shortlist is not None
    frame = model.predict_frame(a6000, problem, candidates)
    rankings = source_rankings(model, a6000, problem, frame)
    split = _Shortlisted.of(model, a6000, problem, candidates, rankings, shortlist)
    order = split.rank(BlendPolicy()).order
    assert sorted(order) == list(range(len(candidates)))  # every candidate, once
    head = [candidates[i].id for i in order[: len(split.head)]]
    assert set(head) == shortlist and len(head) < len(candidates)
    # The head is what serving ranks for a device that never measured the problem, in
    # serving's order.
    bundle = ModelBundle(models={"convolution": model}, families={})
    served = served_candidates(bundle, a6000, problem)
    served_frame = model.predict_frame(a6000, problem, served)
    served_order = BlendPolicy().rank(source_rankings(model, a6000, problem, served_frame)).order
    assert head == [served[i].id for i in served_order]


def test_the_shipped_gemm_runs_of_two_gpus_hold_out_one_configuration_at_a_time() -> None:
    from models.data_files import load_runs
    from models.selection import configurations, holdout_mask
    from tests.models.conftest import REPO_ROOT

    data_dir = REPO_ROOT / "benchmarks" / "data"
    files = [data_dir / "gemm_h200_probe_runs.jsonl.gz", data_dir / "gemm_h100_probe_runs.jsonl.gz"]
    data = TuningData.from_runs(load_runs(files)).for_op("gemm")
    names = configurations(data)
    assert len(names) == 12
    assert "NVIDIA H200/tf32" in names and "NVIDIA H100 80GB HBM3/tf32" in names
    dtype = data.frame["problem_hash"].map({k: p.dtype for k, p in data.problems.items()})
    labels = data.frame["hw_key"].map(data.hardware_labels())
    mask, held = holdout_mask(data, "NVIDIA H200/tf32")
    # only the H200's whole chip in tf32 is held out; the H100's tf32 stays to learn from
    assert set(labels[mask]) == {"NVIDIA H200"} and set(dtype[mask]) == {"tf32"}
    assert ((labels == "NVIDIA H100 80GB HBM3") & (dtype == "tf32") & ~mask).sum() > 900
    assert {data.hardware_labels()[k] for k in held} == {"NVIDIA H200"}
