"""Retraining through the live service: jobs, the quality gate, failures, model priors.

The tests of this module share one story on the session's database, in order: a first model
is trained and activated; priors for hardware it never saw come from it; a worse recipe is
rejected; a training that fails leaves serving alone; an admin rolls back.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import LiveService
from tests.factories import batch_body, tuning_runs
from tps.catalog import resolve
from tps.schemas import Prior

TRAINED_ON = ["RTX A4000", "RTX A6000", "W6600", "W7800"]
UNSEEN = "H100"  # far from every trained GPU by spec
SERVED = ("model", "nearest")  # what the policy chosen at training may lead with
FAST = {"ops": ["convolution"], "holdout": "W6600", "n_estimators": 20, "max_candidates": None}


def _wait(client: httpx.Client, job_id: str, deadline_s: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/admin/jobs/{job_id}").json()
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {job['state']} after {deadline_s} s")


def _retrain(service: LiveService, **params: Any) -> dict[str, Any]:
    with service.client(service.admin_token) as admin:
        response = admin.post("/v1/admin/retrain", json=params)
        assert response.status_code == 202, response.text
        accepted = response.json()
        assert accepted["state"] == "queued"
        assert response.headers["Location"] == accepted["status_url"]
        return _wait(admin, accepted["job_id"])


def _prior(service: LiveService, hardware: str, runs_problem: Any) -> Prior:
    with service.client() as client:
        response = client.post(
            "/v1/priors",
            json={
                "hardware": resolve(hardware).model_dump(mode="json"),
                "problem": runs_problem.model_dump(mode="json"),
                "limit": 5,
            },
        )
    assert response.status_code == 200, response.text
    return Prior.model_validate(response.json())


def _active(service: LiveService) -> int | None:
    with service.client(service.admin_token) as admin:
        models = admin.get("/v1/models").json()
    active = [m["version"] for m in models if m["active"]]
    assert len(active) <= 1
    return active[0] if active else None


@pytest.fixture(scope="module")
def trained(live_service: LiveService) -> dict[str, Any]:
    """Push the training GPUs' runs and train the first model."""
    runs = tuning_runs(TRAINED_ON)
    with live_service.client() as client:
        assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200
    job = _retrain(live_service, **FAST)
    return {"job": job, "problem": runs[0].problem}


def test_admin_endpoints_refuse_agent_tokens(live_service: LiveService) -> None:
    with live_service.client() as agent:
        assert agent.post("/v1/admin/retrain", json={}).status_code == 403
        assert agent.get("/v1/models").status_code == 403
        assert agent.post("/v1/models/1/activate").status_code == 403
        job = "00000000-0000-0000-0000-000000000000"
        assert agent.get(f"/v1/admin/jobs/{job}").status_code == 403
    with live_service.client(token="") as anonymous:
        assert anonymous.post("/v1/admin/retrain", json={}).status_code == 401


def test_bad_admin_input_is_a_clear_4xx(live_service: LiveService) -> None:
    with live_service.client(live_service.admin_token) as admin:
        bad = admin.post("/v1/admin/retrain", json={"ops": ["No such op!"]})
        assert bad.status_code == 422 and "user-defined op name" in bad.json()["detail"]
        bad = admin.post("/v1/admin/retrain", json={"n_estimators": 0})
        assert bad.status_code == 422 and "n_estimators" in bad.json()["detail"]
        assert admin.post("/v1/admin/retrain", json={"colour": "red"}).status_code == 422
        assert admin.get("/v1/admin/jobs/not-a-uuid").status_code == 422
        missing = admin.get("/v1/admin/jobs/00000000-0000-0000-0000-000000000000")
        assert missing.status_code == 404 and "no training job" in missing.json()["detail"]
        # Activation serves a model to the whole fleet: an operator's work, not an admin's.
        assert admin.post("/v1/models/999999/activate").status_code == 403
    with live_service.client(live_service.operator_token) as operator:
        assert operator.post("/v1/models/999999/activate").status_code == 404
        assert operator.post("/v1/models/0/activate").status_code == 422


def test_retrain_job_succeeds_and_activates_a_model(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    job = trained["job"]
    assert job["state"] == "succeeded", job["error"]
    assert job["started_at"] and job["finished_at"] and job["worker"]
    (report,) = job["metrics"]["reports"]
    assert report["op"] == "convolution" and report["holdout"] == "AMD Radeon PRO W6600"
    for ranking in ("model", "policy", "baseline_nearest", "baseline_random"):
        assert 0.0 < report[ranking]["score_at_1"] <= 1.0
    assert job["metrics"]["gate"] == {"passed": True, "reasons": []}
    assert _active(live_service) == job["model_version"]
    with live_service.client(live_service.admin_token) as admin:
        model = admin.get(f"/v1/models/{job['model_version']}").json()
    assert model["status"] == "active" and model["ops"] == ["convolution"]
    assert model["data_counts"]["hardware"] == len(TRAINED_ON)
    assert len(model["artifact_sha256"]) == 64 and model["artifact_bytes"] > 0


def test_priors_for_unseen_hardware_come_from_the_model(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    # A replica sees a newly activated model within its check interval (about a second).
    prior = _eventually(live_service, trained["problem"], lambda p: p.source in SERVED)
    assert len(prior.candidates) == 5
    assert [c.rank for c in prior.candidates] == list(range(5))
    assert all(c.predicted_us and c.predicted_us > 0 for c in prior.candidates)
    assert all(0 < c.confidence < 1 for c in prior.candidates)
    predicted = [c.predicted_us for c in prior.candidates]
    # An order other than that of predicted_us comes with its reason.
    assert (prior.rationale is None) == (predicted == sorted(predicted))
    # Observed data still wins on hardware that measured the problem.
    assert _prior(live_service, TRAINED_ON[0], trained["problem"]).source == "observed"


def test_priors_for_a_never_seen_problem_come_from_its_family(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    unseen = trained["problem"].model_copy(update={"dims": {"x": 2000, "y": 3000}})
    prior = _eventually(live_service, unseen, lambda p: p.source == "family")
    assert prior.candidates and all(c.source == "family" for c in prior.candidates)
    assert all(c.confidence <= 0.5 for c in prior.candidates)


def test_quality_gate_rejects_a_worse_model_and_keeps_the_active_one(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    before = _active(live_service)
    job = _retrain(live_service, **{**FAST, "n_estimators": 1, "tolerance": 0.0})
    assert job["state"] == "rejected", job
    assert "quality gate" in job["error"] and job["model_version"] is None
    assert job["metrics"]["gate"]["passed"] is False
    assert _active(live_service) == before
    assert _prior(live_service, UNSEEN, trained["problem"]).source in SERVED


def test_failed_training_leaves_serving_alone(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    before = _active(live_service)
    expected = _prior(live_service, UNSEEN, trained["problem"])
    # No dedispersion measurements were ever stored: the trainer raises, the job fails.
    job = _retrain(live_service, ops=["dedispersion"])
    assert job["state"] == "failed"
    assert "no measurements of ops ['dedispersion']" in job["error"]
    # A holdout that names no hardware fails the same way, inside training.
    job = _retrain(live_service, **{**FAST, "holdout": "Voodoo 5"})
    assert job["state"] == "failed" and "Voodoo 5" in job["error"]
    assert _active(live_service) == before
    assert _prior(live_service, UNSEEN, trained["problem"]) == expected


@pytest.mark.slow
def test_activate_rolls_back_and_priors_follow(
    live_service: LiveService, trained: dict[str, Any]
) -> None:
    first = trained["job"]["model_version"]
    served_first = _prior(live_service, UNSEEN, trained["problem"])
    job = _retrain(live_service, **{**FAST, "seed": 1})
    assert job["state"] == "succeeded", job["error"]
    second = job["model_version"]
    assert _active(live_service) == second
    served_second = _eventually(live_service, trained["problem"], lambda p: p != served_first)
    with live_service.client(live_service.operator_token) as operator:
        rolled = operator.post(f"/v1/models/{first}/activate")
        assert rolled.status_code == 200 and rolled.json()["active"]
        statuses = {m["version"]: m["status"] for m in operator.get("/v1/models").json()}
    assert _active(live_service) == first
    assert statuses[second] == "retired"
    # Each replica checks the active version about once a second, then serves the old model.
    assert _eventually(live_service, trained["problem"], lambda p: p == served_first)
    assert served_second != served_first


def _eventually(service: LiveService, problem: Any, wanted: Any, deadline_s: float = 15.0) -> Prior:
    deadline = time.monotonic() + deadline_s
    while True:
        prior = _prior(service, UNSEEN, problem)
        if wanted(prior) or time.monotonic() > deadline:
            assert wanted(prior), prior
            return prior
        time.sleep(0.1)
