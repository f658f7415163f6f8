"""Values a careless or hostile client sends: each is a 4xx naming the field, never a 500.

What was stored always reads back, and one organisation's values cannot make another's
answers fail or swell.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import LiveService
from tests.factories import batch_dict, hardware_spec, probe_run, unique_problem
from tps.problem import OP_NAME

Batch = dict[str, Any]
MIB = 1024 * 1024


def _set(path: str, value: Any) -> Callable[[Batch], None]:
    def mutate(batch: Batch) -> None:
        *parents, leaf = path.split(".")
        node: Any = batch
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[leaf] = value

    return mutate


def _raw(batch: Batch) -> bytes:
    # allow_nan: the client sends the NaN and Infinity tokens Python's json writes.
    return json.dumps(batch, allow_nan=True).encode()


NAN, INF = float("nan"), float("inf")
M0 = "runs.0.measurements.0"
# (case, mutation, the field the 422 must name)
BAD_VALUES: list[tuple[str, Callable[[Batch], None], str]] = [
    ("NaN peak", _set("runs.0.hardware.peak_tflops", {"bf16": NAN}), "runs.0.hardware.peak_tflops"),
    ("inf bandwidth", _set("runs.0.hardware.mem_bandwidth_gbs", INF), "mem_bandwidth_gbs"),
    ("NaN clock", _set("runs.0.hardware.clock_mhz", NAN), "runs.0.hardware.clock_mhz"),
    ("NaN telemetry", _set("runs.0.telemetry", {"temperature_c": NAN}), "temperature_c"),
    ("NaN param", _set(f"{M0}.candidate.params", {"x": NAN}), f"{M0}.candidate.params.x"),
    ("2^70 param", _set(f"{M0}.candidate.params", {"x": 2**70}), f"{M0}.candidate.params.x"),
    ("string latency", _set(f"{M0}.median_us", "5"), f"{M0}.median_us"),
    ("naive created_at", _set("runs.0.created_at", "2026-11-30T10:00:00"), "runs.0.created_at"),
    ("year 1", _set("runs.0.created_at", "0001-01-01T00:00:00Z"), "runs.0.created_at"),
    ("2^63 units", _set("runs.0.hardware.compute_units", 2**63), "compute_units"),
    ("2^63 dim", _set("runs.0.problem.dims", {"m": 2**63, "n": 8, "k": 8}), "problem.dims.m"),
    ("NUL name", _set("runs.0.hardware.name", "H\x00200"), "runs.0.hardware.name"),
    ("NUL rationale", _set("runs.0.rationale", "a\x00b"), "runs.0.rationale"),
    ("NUL error", _set(f"{M0}.error", "boom\x00"), f"{M0}.error"),
    ("10 MiB param", _set(f"{M0}.candidate.params", {"x": "v" * 10 * MIB}), "params.x"),
    ("1 MiB key", _set(f"{M0}.candidate.params", {"k" * MIB: 1}), "params.kkkk"),
    ("10 MiB source", _set("runs.0.telemetry", {"source": "s" * 10 * MIB}), "telemetry.source"),
    ("100k throttles", _set("runs.0.telemetry", {"throttle_reasons": ["x"] * 100_000}), "throttle"),
    ("10 MiB priors", _set("runs.0.priors", {"source": "p" * 10 * MIB}), "priors.source"),
    ("many prior ids", _set("runs.0.priors", {"candidate_ids": ["a"] * 10_000}), "candidate_ids"),
    (
        "long dim name",
        _set("runs.0.problem", {"op": "convolution", "dims": {"d" * 2800: 4}}),
        "dims",
    ),
    ("unknown op", _set("runs.0.problem.op", "FFT v2!"), "runs.0.problem.op"),
]


@pytest.mark.parametrize("case, mutate, field", BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_bad_value_is_a_422_naming_the_field_with_a_short_body(
    live_service: LiveService, case: str, mutate: Callable[[Batch], None], field: str
) -> None:
    batch = batch_dict([probe_run()])
    mutate(batch)
    with live_service.client() as client:
        response = client.post("/v1/probe-runs", content=_raw(batch))
    assert response.status_code == 422, response.text[:500]
    assert field in response.text
    assert len(response.content) < 8192  # errors quote a short prefix, never the value
    body = response.json()
    assert set(body) <= {"detail", "errors"} and isinstance(body["detail"], str)


def test_a_long_winner_id_is_quoted_by_a_short_prefix(live_service: LiveService) -> None:
    batch = batch_dict([probe_run()])
    batch["runs"][0]["winner_id"] = "w" * 10 * MIB
    with live_service.client() as client:
        response = client.post("/v1/probe-runs", content=_raw(batch))
    assert response.status_code == 422 and "winner_id" in response.text
    assert len(response.content) < 8192


def test_what_is_stored_reads_back_for_everyone(live_service: LiveService) -> None:
    run = probe_run(hardware=hardware_spec(peak_tflops={"bf16": 989.0}, clock_mhz=1980.0))
    with live_service.client() as client:
        assert client.post("/v1/probe-runs", content=_raw(batch_dict([run]))).status_code == 200
        assert client.get(f"/v1/probe-runs/{run.run_id}").status_code == 200
    with live_service.client(live_service.other_agent_token) as other:
        assert other.get("/v1/hardware", params={"limit": 1000}).status_code == 200
        prior = other.get(
            "/v1/priors",
            params={"hardware_id": run.hardware.fingerprint(), "problem": run.problem.key_hash()},
        )
        assert prior.status_code == 200


@pytest.mark.parametrize(
    "method, path, params, field",
    [
        ("GET", "/v1/hardware", {"offset": str(2**63)}, "offset"),
        ("GET", "/v1/priors", {"hardware_id": "a\x00b", "problem": "x"}, "hardware_id"),
        ("GET", "/v1/priors", {"hardware_id": "ab", "problem": "x\x00"}, "problem"),
    ],
)
def test_query_values_are_422s_naming_the_parameter(
    live_service: LiveService, method: str, path: str, params: dict[str, str], field: str
) -> None:
    with live_service.client() as client:
        response = client.request(method, path, params=params)
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]


def test_admin_values_are_422s_naming_the_field(live_service: LiveService) -> None:
    with live_service.client(live_service.admin_token) as admin:
        offset = admin.get("/v1/models", params={"offset": str(2**63)})
        assert offset.status_code == 422 and "offset" in offset.json()["detail"]
        for body, field in (
            ({"org": "a\x00", "role": "agent"}, "org"),
            ({"name": "\x00", "role": "agent"}, "name"),
        ):
            response = admin.post("/v1/tokens", json=body)
            assert response.status_code == 422 and field in response.json()["detail"]
        holdout = admin.post("/v1/admin/retrain", json={"holdout": "H\x00"})
        assert holdout.status_code == 422 and "holdout" in holdout.json()["detail"]


def test_another_orgs_huge_params_do_not_swell_priors(live_service: LiveService) -> None:
    problem = unique_problem()
    big = probe_run(problem=problem)
    batch = batch_dict([big])
    batch["runs"][0]["measurements"][0]["candidate"]["params"] = {"x": "v" * MIB}
    with live_service.client() as client:
        assert client.post("/v1/probe-runs", content=_raw(batch)).status_code == 422
    with live_service.client(live_service.other_agent_token) as other:
        prior = other.post(
            "/v1/priors",
            json={
                "hardware": big.hardware.model_dump(mode="json"),
                "problem": problem.model_dump(mode="json"),
            },
        )
    assert prior.status_code == 200 and len(prior.content) < 64 * 1024


def test_error_bodies_follow_the_documented_model(live_service: LiveService) -> None:
    with live_service.client() as client:
        document = client.get("/openapi.json").json()
        bad = client.post("/v1/probe-runs", content=b'{"runs": []}')
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    for path in document["paths"].values():
        for operation in path.values():
            for status in ("400", "401", "403", "404", "409", "413", "415", "422", "429", "503"):
                ref = operation["responses"][status]["content"]["application/json"]["schema"]
                assert ref == {"$ref": "#/components/schemas/ErrorBody"}
    assert bad.status_code == 422
    assert set(bad.json()) == {"detail", "errors"}
    assert {"loc", "msg", "type"} == set(bad.json()["errors"][0])


def test_trace_is_a_405_with_allow(live_service: LiveService) -> None:
    with live_service.client() as client:
        response = client.request("TRACE", "/v1/hardware")
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]


def test_the_schema_publishes_known_ops_and_their_dims(live_service: LiveService) -> None:
    with live_service.client() as client:
        problem = client.get("/openapi.json").json()["components"]["schemas"]["ProblemKey"]
    # Built-in ops and user-defined ones (imported kernels) share one name rule.
    assert problem["properties"]["op"]["pattern"] == OP_NAME.pattern
    gemm = next(c for c in problem["allOf"] if c["if"]["properties"]["op"].get("const") == "gemm")
    assert gemm["then"]["properties"]["dims"]["required"] == ["m", "n", "k"]
    user = next(c for c in problem["allOf"] if "not" in c["if"]["properties"]["op"])
    assert "gemm" in user["if"]["properties"]["op"]["not"]["enum"]


def test_concatenated_gzip_members_are_one_body(live_service: LiveService) -> None:
    run = probe_run()
    text = _raw(batch_dict([run]))
    body = gzip.compress(text[:100]) + gzip.compress(text[100:])
    with live_service.client() as client:
        response = client.post("/v1/probe-runs", content=body, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 1


def test_the_run_id_of_another_org_is_not_revealed(live_service: LiveService) -> None:
    run = probe_run()
    body = _raw(batch_dict([run]))
    with live_service.client() as first:
        assert first.post("/v1/probe-runs", content=body).json()["accepted"] == 1
    with live_service.client(live_service.other_agent_token) as other:
        # The same answers as for an id never used: accepted, then a duplicate of its own.
        assert other.post("/v1/probe-runs", content=body).json()["accepted"] == 1
        again = other.post("/v1/probe-runs", content=body).json()
        assert again["accepted"] == 0 and again["duplicates"] == 1
        mine = other.get(f"/v1/probe-runs/{run.run_id}")
    assert mine.status_code == 200 and mine.json()["run_id"] == str(run.run_id)
    with live_service.client() as first:
        assert first.get(f"/v1/probe-runs/{run.run_id}").status_code == 200
