"""Batches validated in processes of their own: the same plan and the same errors as in
place, and a process that dies costs its batch one retry, never the service."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from collections.abc import Iterator

import pytest

from services.profiler_api.errors import (
    BadRequest,
    PayloadTooLarge,
    ServiceUnavailable,
    Unprocessable,
)
from services.profiler_api.ingest.parsing import ParsedBatch, ParsePool, plan_body
from tests.factories import batch_body, probe_run
from tps.schemas import MAX_BATCH_RUNS

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def pool() -> Iterator[ParsePool]:
    pool = ParsePool(1)
    pool.warm()
    yield pool
    pool.close()


def _plan(pool: ParsePool, body: bytes, *, encoding: str = "identity") -> ParsedBatch:
    return asyncio.run(pool.plan([body], encoding=encoding, limit=LIMIT, org_id=7))


def _same(one: ParsedBatch, other: ParsedBatch) -> None:
    for plan in (one.plan, other.plan):
        assert plan.runs, "an empty plan proves nothing"
    assert one.plan.run_rows() == other.plan.run_rows()
    assert list(one.plan.measurement_rows()) == list(other.plan.measurement_rows())
    assert one.plan.hardware == other.plan.hardware
    assert one.plan.problems == other.plan.problems
    assert one.plan.candidates == other.plan.candidates
    assert one.plan.repeated == other.plan.repeated
    assert one.inflated_bytes == other.inflated_bytes


@pytest.mark.parametrize("processes", [1, 0])
def test_a_batch_planned_by_the_pool_is_the_plan_made_in_place(processes: int) -> None:
    first = probe_run()
    body = batch_body([first, probe_run(), first], compress=True)
    local = plan_body([body], encoding="gzip", limit=LIMIT, org_id=7)
    pool = ParsePool(processes)
    try:
        parsed = _plan(pool, body, encoding="gzip")
    finally:
        pool.close()
    _same(parsed, local)
    assert parsed.inflated_bytes == len(gzip.decompress(body))
    assert parsed.plan.repeated == [first.run_id]
    assert parsed.parse_s > 0


def test_a_bad_batch_gets_the_error_that_names_its_field(pool: ParsePool) -> None:
    run = probe_run().model_dump(mode="json")
    run["measurements"][1]["median_us"] = -3.0
    body = json.dumps({"runs": [run]}).encode()
    with pytest.raises(Unprocessable) as caught:
        _plan(pool, body)
    assert any("runs.0.measurements.1.median_us" in str(e["loc"]) for e in caught.value.errors)


def test_a_batch_over_the_limits_is_refused_as_in_place(pool: ParsePool) -> None:
    run = probe_run().model_dump_json()
    body = ('{"runs": [' + ",".join([run] * (MAX_BATCH_RUNS + 1)) + "]}").encode()
    with pytest.raises(PayloadTooLarge, match=f"at most {MAX_BATCH_RUNS} runs, got 1001"):
        asyncio.run(pool.plan([body], encoding="identity", limit=1 << 26, org_id=7))
    bomb = gzip.compress(b" " * (LIMIT + 1))
    with pytest.raises(PayloadTooLarge):
        _plan(pool, bomb, encoding="gzip")
    with pytest.raises(BadRequest, match="not valid gzip"):
        _plan(pool, b"not gzip at all", encoding="gzip")


def test_a_process_that_dies_costs_its_batch_a_503_and_the_next_batch_goes_through() -> None:
    body = batch_body([probe_run(), probe_run()])
    pool = ParsePool(1)
    try:
        before = _plan(pool, body)
        executor = pool._started()
        processes = list(executor._processes.values())
        assert processes, "the pool's process did not start"
        for process in processes:
            process.kill()
            process.join(10)
        with pytest.raises(ServiceUnavailable, match="send the batch again"):
            _plan(pool, body)
        _same(_plan(pool, body), before)
    finally:
        pool.close()


def test_the_processes_run_at_the_niceness_asked_and_the_api_process_keeps_its_own() -> None:
    ours = os.nice(0)
    pool = ParsePool(1, nice=min(19, ours + 5))
    try:
        assert pool._started().submit(os.nice, 0).result(30) == min(19, ours + 5)
        assert pool._started().submit(os.getpid).result(30) != os.getpid()
    finally:
        pool.close()
    assert os.nice(0) == ours
