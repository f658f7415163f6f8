"""Candidate ids: memoised per instance, invisible to comparison and serialisation."""

from __future__ import annotations

import json
import threading

import pytest
from pydantic import ValidationError

from tps.candidate import Candidate, candidate_id


def test_id_is_the_hash_of_backend_and_params() -> None:
    candidate = Candidate(backend="cublaslt", params={"algo_id": 3, "tile": "128x128"})
    assert candidate.id == candidate_id("cublaslt", {"tile": "128x128", "algo_id": 3})
    assert len(candidate.id) == 16


def test_params_of_other_json_types_give_other_ids() -> None:
    ids = {Candidate(backend="triton", params={"num_warps": v}).id for v in (1, 1.0, True, "1")}
    assert len(ids) == 4


def test_a_read_id_changes_neither_equality_nor_the_wire_form() -> None:
    read = Candidate(backend="triton", params={"BLOCK_M": 64})
    unread = Candidate(backend="triton", params={"BLOCK_M": 64})
    assert read.id
    assert "id" in read.__dict__ and "id" not in unread.__dict__
    assert read == unread and unread == read
    assert (
        read.model_dump() == unread.model_dump() == {"backend": "triton", "params": {"BLOCK_M": 64}}
    )
    assert json.loads(read.model_dump_json()) == read.model_dump()
    assert Candidate.model_validate_json(read.model_dump_json()).id == read.id


def test_threads_reading_one_id_at_once_all_get_it() -> None:
    candidate = Candidate(backend="rocblas", params={"solution": 4711})
    start = threading.Barrier(8)
    seen: list[str] = []

    def read() -> None:
        start.wait()
        seen.append(candidate.id)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [candidate_id("rocblas", {"solution": 4711})] * 8


def test_a_param_past_a_bigint_is_refused_however_it_is_written() -> None:
    for text in ("-9223372036854776001", "9223372036854775808", "-9.3e18", "1e19"):
        with pytest.raises(ValidationError):
            Candidate.model_validate_json(f'{{"backend": "b", "params": {{"x": {text}}}}}')
    edge = Candidate.model_validate_json('{"backend": "b", "params": {"x": -9223372036854775808}}')
    assert edge.params["x"] == -(2**63) and isinstance(edge.params["x"], int)
