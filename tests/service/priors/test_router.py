from __future__ import annotations

import math

from tests.conftest import LiveService
from tests.factories import batch_body, cublaslt, hardware_spec, probe_run, unique_problem
from tps.candidate import VENDOR_DEFAULT
from tps.schemas import Prior, ProbeRun


def _push(service: LiveService, runs: list[ProbeRun]) -> None:
    with service.client() as client:
        assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200


def test_priors_rank_candidates_by_observed_median(live_service: LiveService) -> None:
    hardware, problem = hardware_spec(), unique_problem()
    fast, mid, slow = cublaslt(1), VENDOR_DEFAULT, cublaslt(2)
    # `mid` is fastest in one run, but slower across runs: the ranking uses all of them.
    runs = [
        probe_run(
            hardware=hardware, problem=problem, latencies=[(fast, 50.0), (mid, 80.0), (slow, 200.0)]
        ),
        probe_run(
            hardware=hardware, problem=problem, latencies=[(fast, 52.0), (mid, 81.0), (slow, 190.0)]
        ),
        probe_run(hardware=hardware, problem=problem, latencies=[(fast, 90.0), (mid, 40.0)]),
    ]
    _push(live_service, runs)
    with live_service.client() as client:
        response = client.post(
            "/v1/priors",
            json={
                "hardware": hardware.model_dump(mode="json"),
                "problem": problem.model_dump(mode="json"),
            },
        )
    prior = Prior.model_validate(response.json())
    assert prior.source == "observed"
    assert [c.candidate_id for c in prior.candidates] == [fast.id, mid.id, slow.id]
    assert [c.rank for c in prior.candidates] == [0, 1, 2]
    top = prior.candidates[0]
    assert top.median_us is not None
    assert math.isclose(top.median_us, (50.0 * 52.0 * 90.0) ** (1 / 3), rel_tol=1e-6)
    assert (top.runs, top.samples, top.source) == (3, 60, "observed")
    assert prior.candidates[2].runs == 2
    assert all(0 < c.confidence <= 1 for c in prior.candidates)
    assert top.candidate == fast


def test_get_priors_by_fingerprint_and_hash_or_canonical(live_service: LiveService) -> None:
    run = probe_run()
    _push(live_service, [run])
    fingerprint = run.hardware.fingerprint()
    with live_service.client() as client:
        by_hash = client.get(
            "/v1/priors", params={"hardware_id": fingerprint, "problem": run.problem.key_hash()}
        ).json()
        by_canonical = client.get(
            "/v1/priors",
            params={"hardware_id": fingerprint, "problem": run.problem.canonical(), "limit": 2},
        ).json()
    assert [c["candidate_id"] for c in by_hash["candidates"]] == [
        cublaslt(1).id,
        VENDOR_DEFAULT.id,
        cublaslt(2).id,
    ]
    assert by_canonical["candidates"] == by_hash["candidates"][:2]
    assert by_hash["canonical"] == run.problem.canonical()


def test_unknown_problem_gets_an_empty_prior_with_a_reason(live_service: LiveService) -> None:
    run = probe_run()
    _push(live_service, [run])
    with live_service.client() as client:
        posted = client.post(
            "/v1/priors",
            json={
                "hardware": run.hardware.model_dump(mode="json"),
                "problem": unique_problem().model_dump(mode="json"),
            },
        )
        got = client.get(
            "/v1/priors",
            params={"hardware_id": run.hardware.fingerprint(), "problem": "0123456789abcdef"},
        )
    for response in (posted, got):
        assert response.status_code == 200
        assert response.json()["candidates"] == []
        assert response.json()["reason"]


def test_new_hardware_gets_an_empty_prior_by_spec_and_404_by_id(live_service: LiveService) -> None:
    unseen = hardware_spec(name="NVIDIA B300", arch="sm_103", compute_units=160)
    with live_service.client() as client:
        posted = client.post(
            "/v1/priors",
            json={
                "hardware": unseen.model_dump(mode="json"),
                "problem": unique_problem().model_dump(mode="json"),
            },
        )
        got = client.get(
            "/v1/priors",
            params={"hardware_id": unseen.fingerprint(), "problem": "0123456789abcdef"},
        )
    assert posted.status_code == 200 and posted.json()["candidates"] == []
    assert got.status_code == 404
    assert "hardware_id" in got.json()["detail"]


def test_an_offer_keeps_the_answer_to_what_the_host_can_run(live_service: LiveService) -> None:
    hardware, problem = hardware_spec(), unique_problem()
    fast, mid, slow = cublaslt(1), VENDOR_DEFAULT, cublaslt(2)
    latencies = [(fast, 50.0), (mid, 80.0), (slow, 200.0)]
    _push(live_service, [probe_run(hardware=hardware, problem=problem, latencies=latencies)])
    body = {
        "hardware": hardware.model_dump(mode="json"),
        "problem": problem.model_dump(mode="json"),
    }
    offer = [c.model_dump(mode="json") for c in (slow, mid)]
    with live_service.client() as client:
        whole = Prior.model_validate(client.post("/v1/priors", json=body).json())
        offered = client.post("/v1/priors", json={**body, "offered": offer})
        twice = client.post("/v1/priors", json={**body, "offered": [offer[0], offer[0]]})
        empty = client.post("/v1/priors", json={**body, "offered": []})
        many = client.post("/v1/priors", json={**body, "offered": [offer[0]] * 1025})
    assert [c.candidate_id for c in whole.candidates] == [fast.id, mid.id, slow.id]
    prior = Prior.model_validate(offered.json())  # not the cached answer to the whole question
    assert [c.candidate_id for c in prior.candidates] == [mid.id, slow.id]
    assert [c.rank for c in prior.candidates] == [0, 1] and prior.source == "observed"
    assert twice.status_code == 422 and "is listed twice" in twice.text
    assert empty.status_code == 422 and "offered" in empty.text
    assert many.status_code == 422 and "offered" in many.text
