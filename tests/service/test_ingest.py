from __future__ import annotations

import gzip
import threading
import uuid

import psycopg

from services.profiler_api.db import libpq_url
from tests.conftest import LiveService
from tests.factories import batch_body, cublaslt, hardware_spec, measurement, probe_run
from tps.candidate import VENDOR_DEFAULT
from tps.schemas import ProbeRun


def _push(service: LiveService, body: bytes, **headers: str) -> dict:
    with service.client() as client:
        response = client.post("/v1/probe-runs", content=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _stored_runs(service: LiveService, run_ids: list[uuid.UUID]) -> int:
    with psycopg.connect(libpq_url(service.database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM probe_runs WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_push_and_read_back(live_service: LiveService) -> None:
    runs = [probe_run(), probe_run()]
    result = _push(live_service, batch_body(runs))
    named = result.pop("runs")
    assert result == {"accepted": 2, "duplicates": 0, "measurements": 6, "duplicate_run_ids": []}
    assert named == [
        {
            "run_id": str(run.run_id),
            "hardware_id": run.hardware.fingerprint(),
            "problem_hash": run.problem.key_hash(),
        }
        for run in runs
    ]
    with live_service.client() as client:
        stored = ProbeRun.model_validate(client.get(f"/v1/probe-runs/{runs[0].run_id}").json())
    assert stored == runs[0]


def test_hosts_of_one_configuration_keep_their_own_measured_bandwidth(
    live_service: LiveService,
) -> None:
    # two hosts' 16-SM green contexts: one configuration, two measurements of its bandwidth
    first = probe_run(hardware=hardware_spec(unit_limit=16, limited_bandwidth_gbs=1500.4))
    second = probe_run(hardware=hardware_spec(unit_limit=16, limited_bandwidth_gbs=1489.9))
    result = _push(live_service, batch_body([first, second]))
    assert {r["hardware_id"] for r in result["runs"]} == {first.hardware.fingerprint()}
    with live_service.client() as client:
        for run in (first, second):
            stored = client.get(f"/v1/probe-runs/{run.run_id}").json()
            assert ProbeRun.model_validate(stored) == run  # nothing of the push lost
        listed = [
            h
            for h in client.get("/v1/hardware").json()
            if h["fingerprint"] == first.hardware.fingerprint()
        ]
    assert len(listed) == 1


def test_resending_a_run_changes_nothing_and_reports_it(live_service: LiveService) -> None:
    first, second = probe_run(), probe_run()
    _push(live_service, batch_body([first]))
    with live_service.client() as client:
        before = client.get("/v1/priors", params=_ids(first)).json()
    result = _push(live_service, batch_body([first, second]))
    assert result["accepted"] == 1
    assert result["duplicates"] == 1
    assert result["duplicate_run_ids"] == [str(first.run_id)]
    with live_service.client() as client:
        after = client.get("/v1/priors", params=_ids(first)).json()
    assert after == before  # the aggregates did not count the run twice


def test_a_run_repeated_inside_one_batch_is_stored_once(live_service: LiveService) -> None:
    run = probe_run()
    result = _push(live_service, batch_body([run, run]))
    assert (result["accepted"], result["duplicates"]) == (1, 1)
    assert _stored_runs(live_service, [run.run_id]) == 1


def test_gzip_body_is_accepted(live_service: LiveService) -> None:
    runs = [probe_run() for _ in range(5)]
    result = _push(live_service, batch_body(runs, compress=True), **{"Content-Encoding": "gzip"})
    assert result["accepted"] == 5
    assert _stored_runs(live_service, [r.run_id for r in runs]) == 5


def test_a_batch_is_all_or_nothing(live_service: LiveService) -> None:
    good = probe_run()
    body = batch_body([good, probe_run()]).replace(b'"median_us":100.0', b'"median_us":-1.0', 1)
    with live_service.client() as client:
        response = client.post("/v1/probe-runs", content=body)
    assert response.status_code == 422
    assert _stored_runs(live_service, [good.run_id]) == 0


def test_concurrent_batches_with_shared_runs_store_each_run_once(live_service: LiveService) -> None:
    shared = [probe_run() for _ in range(20)]
    results: list[dict] = []

    def push(extra: list[ProbeRun]) -> None:
        results.append(_push(live_service, batch_body(shared + extra)))

    threads = [threading.Thread(target=push, args=([probe_run()],)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r["accepted"] for r in results) == 20 + 4
    assert sum(r["duplicates"] for r in results) == 3 * 20
    assert _stored_runs(live_service, [r.run_id for r in shared]) == 20


def test_invalid_measurements_are_stored_but_never_ranked(live_service: LiveService) -> None:
    broken = cublaslt(7)
    run = probe_run(
        measurements=[
            measurement(VENDOR_DEFAULT, 90.0),
            measurement(broken, 10.0, valid=False, error="output mismatch"),
        ]
    )
    _push(live_service, batch_body([run]))
    with live_service.client() as client:
        prior = client.get("/v1/priors", params=_ids(run)).json()
        stored = ProbeRun.model_validate(client.get(f"/v1/probe-runs/{run.run_id}").json())
    assert [c["candidate_id"] for c in prior["candidates"]] == [VENDOR_DEFAULT.id]
    assert stored.measurements[1].error == "output mismatch"


def test_raw_runs_belong_to_the_organisation_that_sent_them(live_service: LiveService) -> None:
    run = probe_run()
    _push(live_service, batch_body([run]))
    path = f"/v1/probe-runs/{run.run_id}"
    with live_service.client(live_service.other_agent_token) as client:
        assert client.get(path).status_code == 404
    with live_service.client(live_service.admin_token) as client:
        assert client.get(path).status_code == 200


def test_stats_and_hardware_count_what_was_pushed(live_service: LiveService) -> None:
    run = probe_run()
    with live_service.client() as client:
        before = client.get("/v1/stats").json()
        _push(live_service, batch_body([run]))
        after = client.get("/v1/stats").json()
        hardware = client.get("/v1/hardware").json()
    assert after["runs"] >= before["runs"] + 1
    assert after["measurements"] >= before["measurements"] + 3
    assert after["org_runs"] >= before["org_runs"] + 1
    assert run.hardware.fingerprint() in {h["fingerprint"] for h in hardware}


def test_metrics_count_ingest(live_service: LiveService) -> None:
    _push(live_service, gzip.compress(batch_body([probe_run()])), **{"Content-Encoding": "gzip"})
    with live_service.client(token="") as client:
        text = client.get("/metrics").text
    assert 'tps_ingest_runs_total{outcome="accepted"}' in text
    assert "tps_http_request_duration_seconds_bucket" in text


def _ids(run: ProbeRun) -> dict[str, str]:
    return {"hardware_id": run.hardware.fingerprint(), "problem": run.problem.key_hash()}
