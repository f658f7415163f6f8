"""The `compiled` source: a compiled product new to a GPU model, as the most similar
hardware of its vendor measured it."""

from __future__ import annotations

import secrets

from tests.conftest import LiveService
from tests.factories import batch_body, hardware_spec, probe_run, unique_problem
from tps.candidate import INDUCTOR_BACKEND, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior, ProbeRun


def _push(service: LiveService, runs: list[ProbeRun]) -> None:
    with service.client() as client:
        assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200


def _compiled_problem() -> ProblemKey:
    fields = unique_problem().model_dump()
    return ProblemKey(**{**fields, "variant": f"{INDUCTOR_BACKEND}:mm:{secrets.token_hex(8)}"})


def _config(block: int) -> Candidate:
    return Candidate(
        backend=INDUCTOR_BACKEND, params={"template_id": "triton::mm", "BLOCK_M": block}
    )


def _ask(service: LiveService, hardware: HardwareSpec, problem: ProblemKey) -> Prior:
    body = {
        "hardware": hardware.model_dump(mode="json"),
        "problem": problem.model_dump(mode="json"),
    }
    with service.client() as client:
        response = client.post("/v1/priors", json=body)
    assert response.status_code == 200, response.text
    return Prior.model_validate(response.json())


def test_a_new_gpu_model_gets_the_most_similar_hardwares_measured_ranking(
    live_service: LiveService,
) -> None:
    problem = _compiled_problem()
    h200 = hardware_spec()
    far = hardware_spec(name="NVIDIA A100", arch="sm_80", compute_units=108, clock_mhz=1410.0)
    amd = hardware_spec(vendor="amd", arch="gfx942", name="AMD MI300X", compute_units=304)
    _push(
        live_service,
        [
            probe_run(
                hardware=h200,
                problem=problem,
                latencies=[(_config(64), 9.0), (_config(32), 11.0), (_config(128), 15.0)],
            ),  # fmt: skip
            probe_run(
                hardware=far, problem=problem, latencies=[(_config(128), 20.0), (_config(64), 30.0)]
            ),  # fmt: skip
            probe_run(hardware=amd, problem=problem, latencies=[(_config(16), 5.0)]),
        ],
    )
    # Half an H200 (a green context's SMs): the H200 is its most similar hardware.
    half = h200.model_copy(update={"unit_limit": 66})
    prior = _ask(live_service, half, problem)
    assert prior.source == "nearest", prior.reason
    assert [c.candidate.params["BLOCK_M"] for c in prior.candidates] == [64, 32, 128]
    assert [c.median_us for c in prior.candidates] == [9.0, 11.0, 15.0]  # the H200's
    assert all(c.predicted_us is None and c.source == "nearest" for c in prior.candidates)
    assert prior.rationale is not None and "NVIDIA H200 (132 units)" in prior.rationale
    # The measured hardware itself: its own observations.
    assert _ask(live_service, h200, problem).source == "observed"
    # Another vendor's measurements are not offered: MI300X answers for an MI250 only.
    mi250 = amd.model_copy(update={"name": "AMD MI250", "arch": "gfx90a", "compute_units": 208})
    other = _ask(live_service, mi250, problem)
    assert [c.candidate.params["BLOCK_M"] for c in other.candidates] == [16]
    intel = hardware_spec(vendor="intel", arch="xe", name="Intel Max 1550")
    nobody = _ask(live_service, intel, problem)
    assert nobody.candidates == [] and nobody.source is None
    assert nobody.reason is not None and "no other intel hardware compiled" in nobody.reason


def test_a_product_outside_the_compilers_is_left_to_the_other_sources() -> None:
    from services.profiler_api.priors.compiled import CompiledPriors, is_compiled
    from services.profiler_api.priors.query import PriorQuery

    problem = unique_problem()  # an agent's GEMM: the model's to answer, not this source's
    assert not is_compiled(problem) and is_compiled(_compiled_problem())
    query = PriorQuery.of(hardware_spec(), problem)
    prior = CompiledPriors().rank(None, query)  # type: ignore[arg-type]  # no database read
    assert prior.candidates == [] and prior.reason == "not a compiled product"


def test_the_model_sources_leave_a_compiled_product_alone() -> None:
    from services.profiler_api.priors.model import FamilyPriors, ModelPriors
    from services.profiler_api.priors.query import PriorQuery

    query = PriorQuery.of(hardware_spec(), _compiled_problem())
    for source in (ModelPriors, FamilyPriors):
        prior = source(active=None).rank(None, query)  # type: ignore[arg-type]
        assert prior.candidates == [] and "a compiled product: not modelled" in (prior.reason or "")


def test_the_hardware_read_is_of_the_asking_architecture_first(live_service: LiveService) -> None:
    """Past the bound of hardware read, the same architecture's are the ones read."""
    from sqlalchemy.orm import Session

    from services.profiler_api.db import make_engine
    from services.profiler_api.priors import repository
    from services.profiler_api.settings import Settings

    problem = _compiled_problem()
    hopper = hardware_spec()
    ampere = hardware_spec(name="NVIDIA A100", arch="sm_80", compute_units=108)
    runs = [
        probe_run(hardware=hw, problem=problem, latencies=[(_config(64), 9.0)])
        for hw in (hopper, ampere)
    ]
    _push(live_service, runs)
    engine = make_engine(live_service.database_url, Settings(db_pool_size=1))
    try:
        with Session(engine) as session:
            for arch, expected in (("sm_90", hopper), ("sm_80", ampere)):
                (read,) = repository.observers(
                    session, problem_id=problem.key_hash(), vendor="nvidia", arch=arch,
                    exclude="0" * 16, limit=1,
                )  # fmt: skip
                assert read[0] == expected.fingerprint()
            everyone = repository.observers(
                session, problem_id=problem.key_hash(), vendor="nvidia", arch="sm_90",
                exclude=hopper.fingerprint(), limit=8,
            )  # fmt: skip
            assert [fingerprint for fingerprint, _ in everyone] == [ampere.fingerprint()]
    finally:
        engine.dispose()
