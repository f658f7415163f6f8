"""Every bad input gets a 4xx naming the field or limit, and writes nothing of the batch."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from services.profiler_api.db import libpq_url
from tests.conftest import LiveService
from tests.factories import batch_body, batch_dict, probe_run

Batch = dict[str, Any]


def _set(path: str, value: Any) -> Callable[[Batch], None]:
    def mutate(batch: Batch) -> None:
        *parents, leaf = path.split(".")
        node: Any = batch
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[leaf] = value

    return mutate


def _delete(path: str) -> Callable[[Batch], None]:
    def mutate(batch: Batch) -> None:
        *parents, leaf = path.split(".")
        node: Any = batch
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[leaf]

    return mutate


FIELD_ERRORS = [
    ("missing field", _delete("runs.1.host_id"), "runs.1.host_id"),
    ("unknown field", _set("runs.0.gpu_serial", "x"), "runs.0.gpu_serial"),
    ("wrong type", _set("runs.0.measurements.0.samples", "many"), "runs.0.measurements.0.samples"),
    ("zero latency", _set("runs.0.measurements.1.median_us", 0), "runs.0.measurements.1.median_us"),
    (
        "negative latency",
        _set("runs.1.measurements.0.p10_us", -3.5),
        "runs.1.measurements.0.p10_us",
    ),
    ("dims do not fit op", _set("runs.0.problem.dims", {"m": 8, "n": 8}), "runs.0.problem"),
    ("bad op name", _set("runs.0.problem.op", "FFT 2D!"), "runs.0.problem"),
    (
        "too many dims of a user-defined op",
        _set("runs.0.problem", {"op": "fft", "dims": {f"d{i}": 2 for i in range(9)}}),
        "runs.0.problem",
    ),
    ("no measurements", _set("runs.0.measurements", []), "runs.0.measurements"),
    ("bad run id", _set("runs.0.run_id", "not-a-uuid"), "runs.0.run_id"),
]


def _post(service: LiveService, body: bytes, **headers: str) -> Any:
    with service.client() as client:
        return client.post("/v1/probe-runs", content=body, headers=headers)


def _nothing_stored(service: LiveService, batch: Batch) -> bool:
    run_ids = [run["run_id"] for run in batch["runs"] if isinstance(run.get("run_id"), str)]
    with psycopg.connect(libpq_url(service.database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM probe_runs WHERE run_id::text = ANY(%s)", (run_ids,)
        ).fetchone()
    return row is not None and row[0] == 0


@pytest.mark.parametrize("case, mutate, field", FIELD_ERRORS, ids=[c[0] for c in FIELD_ERRORS])
def test_bad_field_is_named_and_nothing_is_written(
    live_service: LiveService, case: str, mutate: Callable[[Batch], None], field: str
) -> None:
    batch = batch_dict([probe_run(), probe_run()])
    mutate(batch)
    response = _post(live_service, json.dumps(batch).encode())
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    assert _nothing_stored(live_service, batch)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_latency_is_rejected(live_service: LiveService, literal: str) -> None:
    batch = batch_dict([probe_run()])
    body = json.dumps(batch).replace('"median_us": 100.0', f'"median_us": {literal}', 1)
    assert literal in body
    response = _post(live_service, body.encode())
    assert response.status_code == 422, response.text
    assert "runs.0.measurements.1.median_us" in response.json()["detail"]
    assert _nothing_stored(live_service, batch)


@pytest.mark.parametrize("body", [b'{"runs": [', b"not json", b""])
def test_malformed_json_is_rejected(live_service: LiveService, body: bytes) -> None:
    response = _post(live_service, body)
    assert response.status_code == 422
    assert "JSON" in response.json()["detail"]


def test_more_than_1000_runs_names_the_limit(live_service: LiveService) -> None:
    run = batch_dict([probe_run()])["runs"][0]
    body = json.dumps({"runs": [run] * 1001}).encode()
    response = _post(live_service, body)
    assert response.status_code == 413
    assert "1000" in response.json()["detail"]


def test_body_over_32_mib_is_rejected(live_service: LiveService) -> None:
    body = b'{"runs": [' + b" " * (32 * 2**20) + b"]}"
    response = _post(live_service, body)
    assert response.status_code == 413
    assert "33554432" in response.json()["detail"]


def test_gzip_bomb_is_stopped_early(live_service: LiveService) -> None:
    # One 64 MiB member of zeros, repeated: 4 GiB once inflated, 4 MiB on the wire.
    member = gzip.compress(b"\0" * 2**26, 9)
    bomb = member * 64
    assert len(bomb) < 8 * 2**20
    started = time.monotonic()
    response = _post(live_service, bomb, **{"Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert time.monotonic() - started < 10  # inflating 4 GiB would take far longer here


@pytest.mark.parametrize(
    "body, message",
    [
        (b"this is not gzip", "not valid gzip"),
        (gzip.compress(b'{"runs": []}')[:-12], "truncated"),
    ],
    ids=["garbage", "truncated"],
)
def test_bad_gzip_is_a_400(live_service: LiveService, body: bytes, message: str) -> None:
    response = _post(live_service, body, **{"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert message in response.json()["detail"]


def test_unknown_content_encoding_is_a_415(live_service: LiveService) -> None:
    response = _post(live_service, batch_body([probe_run()]), **{"Content-Encoding": "br"})
    assert response.status_code == 415
    assert "gzip" in response.json()["detail"]


def test_bad_query_parameter_is_named(live_service: LiveService) -> None:
    with live_service.client() as client:
        response = client.get("/v1/priors", params={"hardware_id": "x", "problem": "y", "limit": 0})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("limit")


def test_a_count_too_large_for_its_column_is_a_422(live_service: LiveService) -> None:
    batch = batch_dict([probe_run()])
    batch["runs"][0]["measurements"][2]["outliers_rejected"] = 2**40
    response = _post(live_service, json.dumps(batch).encode())
    assert response.status_code == 422, response.text
    assert "runs.0.measurements.2.outliers_rejected" in response.json()["detail"]
    assert _nothing_stored(live_service, batch)


@pytest.mark.parametrize(
    "field, value",
    [("rationale", "fast\u0000er"), ("telemetry", {"source": "nvml\u0000"})],
    ids=["text", "json"],
)
def test_a_nul_character_is_a_422(live_service: LiveService, field: str, value: Any) -> None:
    batch = batch_dict([probe_run(), probe_run()])
    batch["runs"][1][field] = value
    response = _post(live_service, json.dumps(batch).encode())
    assert response.status_code == 422, response.text
    assert _nothing_stored(live_service, batch)


def test_streamed_body_over_32_mib_is_stopped_while_reading(live_service: LiveService) -> None:
    def chunks() -> Iterator[bytes]:  # chunked encoding: no Content-Length to refuse up front
        yield b'{"runs": ['
        for _ in range(33):
            yield b" " * 2**20
        yield b"]}"

    with live_service.client() as client:
        response = client.post("/v1/probe-runs", content=chunks())
    assert response.status_code == 413
    assert "33554432" in response.json()["detail"]
