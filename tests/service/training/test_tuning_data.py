"""The training table read from the stored runs: what a model's candidate universe may hold."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from services.profiler_api.db import make_engine
from services.profiler_api.settings import Settings
from services.profiler_api.training import repository
from tests.factories import batch_body, cublaslt, hardware_spec, probe_run, unique_problem
from tps.candidate import INDUCTOR_BACKEND, VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey


def test_compiler_configurations_stay_out_of_the_training_table(live_service: Any) -> None:
    """Inductor's recorded searches are stored and served as observed, never trained on."""
    hardware = hardware_spec()
    eager = unique_problem()
    compiled = ProblemKey(
        op="gemm", dtype="bf16", dims={"m": 7, "n": 48, "k": 64}, variant="inductor:mm:test"
    )
    config = Candidate(
        backend=INDUCTOR_BACKEND, params={"template_id": "triton::mm", "BLOCK_M": 16}
    )
    runs = [
        probe_run(
            hardware=hardware, problem=eager, latencies=[(VENDOR_DEFAULT, 9.0), (cublaslt(1), 7.0)]
        ),
        probe_run(hardware=hardware, problem=compiled, latencies=[(config, 5.0)]),
    ]
    with live_service.client() as client:
        pushed = client.post(
            "/v1/probe-runs", content=batch_body(runs), headers={"Content-Type": "application/json"}
        )
        assert pushed.status_code in (200, 201), pushed.text
        observed = client.get(
            "/v1/priors",
            params={"hardware_id": hardware.fingerprint(), "problem": compiled.key_hash()},
        ).json()
    assert observed["source"] == "observed"
    assert observed["candidates"][0]["candidate"]["backend"] == INDUCTOR_BACKEND

    engine = make_engine(live_service.database_url, Settings())
    try:
        with Session(engine) as session:
            data = repository.tuning_data(session, ops=["gemm"])
    finally:
        engine.dispose()
    backends = {c.backend for c in data.candidates.values()}
    assert "cublaslt" in backends and INDUCTOR_BACKEND not in backends
    assert eager.key_hash() in data.problems and compiled.key_hash() not in data.problems
