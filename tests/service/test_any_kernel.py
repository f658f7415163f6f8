"""A kernel no code names, on a GPU no catalog lists: import, push, retrain, priors.

The Kernel Tuner files are written here in the formats Kernel Tuner writes (a legacy cache,
a versioned cache, a T4 results file), with latencies that are a deterministic function of
each configuration and the GPU's spec. Everything goes through the command line and a real
service on its own database, so that the story of the other service tests is left alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cli import app
from tests.factories import (
    KERNEL,
    OP,
    PARAMS,
    SIZE,
    stencil_cache_file,
    stencil_configurations,
    stencil_t4_file,
    stencil_time_ms,
)
from tps.catalog import UnknownHardwareError, resolve, spec_for
from tps.hardware import HardwareSpec
from tps.schemas import Prior

# A GPU missing from the catalog: part of its spec is given, the rest is guessed.
ABSENT = {"name": "Contoso Tensor X7", "vendor": "nvidia", "compute_units": 100}
UNSEEN = {"name": "Fabrikam Z1", "vendor": "nvidia", "compute_units": 60, "l2_bytes": 8 << 20}


@pytest.fixture(scope="module")
def service(postgres_server_url: str) -> Iterator[tuple[str, str, str]]:
    """Run a service on a database of its own; yield (base URL, agent token, admin token)."""
    from sqlalchemy.orm import Session

    from services.profiler_api import migrate
    from services.profiler_api.auth.service import Role, create_token
    from services.profiler_api.db import make_engine, scratch_database
    from services.profiler_api.settings import Settings
    from tools.local_service import running_service

    with scratch_database(postgres_server_url, prefix="tps_any_kernel") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings(db_pool_size=1))
        with Session(engine) as session, session.begin():
            agent = create_token(session, org="acme", role=Role.AGENT)
            admin = create_token(session, org="acme", role=Role.ADMIN)
        engine.dispose()
        with running_service(url) as running:
            yield running.base_url, agent, admin


def _import(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["import", "kernel-tuner", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _retrain(base_url: str, admin: str) -> dict[str, Any]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin}"}) as client:
        accepted = client.post("/v1/admin/retrain", json={"n_estimators": 20})
        assert accepted.status_code == 202, accepted.text
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline:
            job = client.get(accepted.json()["status_url"]).json()
            if job["state"] not in ("queued", "running"):
                return job
            time.sleep(0.2)
    raise AssertionError(f"training job still {job['state']} after 120 s")


def _prior(base_url: str, token: str, hardware: HardwareSpec, problem: dict) -> Prior:
    body = {"hardware": hardware.model_dump(mode="json"), "problem": problem, "limit": 6}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as client:
        response = client.post("/v1/priors", json=body)
    assert response.status_code == 200, response.text
    return Prior.model_validate(response.json())


def test_a_new_kernel_on_a_gpu_missing_from_the_catalog_reaches_priors(
    service: tuple[str, str, str], tmp_path: Path
) -> None:
    base_url, agent, admin = service
    for name in (ABSENT["name"], UNSEEN["name"]):
        with pytest.raises(UnknownHardwareError):
            resolve(name)
    a4000, w7800 = resolve("RTX A4000"), resolve("W7800")
    absent = spec_for(ABSENT["name"], ABSENT).spec
    (tmp_path / "A4000.json").write_text(json.dumps(stencil_cache_file(a4000, "", version=None)))
    (tmp_path / "w7800.json").write_text(
        json.dumps(stencil_cache_file(w7800, "AMD Radeon PRO W7800", version="1.1.0"))
    )
    (tmp_path / "x7.json").write_text(json.dumps(stencil_t4_file(absent)))
    (tmp_path / "x7-spec.json").write_text(json.dumps({"vendor": "nvidia"}))

    push = ["--push", base_url, "--token", agent]
    out = _import([str(tmp_path / "A4000.json"), str(tmp_path / "w7800.json"), *push])
    assert "'accepted': 2" in out
    out = _import([
        str(tmp_path / "x7.json"), "--device", ABSENT["name"], "--kernel", KERNEL,
        "--problem-size", "4096x4096", "--hardware-spec", str(tmp_path / "x7-spec.json"),
        "--hardware", "compute_units=100", *push,
    ])  # fmt: skip
    # The import names the fields it had to guess for the GPU the catalog lacks.
    (said,) = [line for line in out.splitlines() if line.startswith("x7.json: ")]
    assert "not in the catalog; guessed" in said and "l2_bytes" in said
    assert "compute_units" not in said and "vendor" not in said

    job = _retrain(base_url, admin)
    assert job["state"] == "succeeded", job["error"]
    (report,) = job["metrics"]["reports"]
    assert report["op"] == OP
    for metric in ("score_at_1", "score_at_5"):
        assert report["policy"][metric] >= report["baseline_nearest"][metric]

    problem = {"op": OP, "dtype": "fp32", "dims": {"x": SIZE[0], "y": SIZE[1]}, "variant": KERNEL}
    unseen = spec_for(UNSEEN["name"], UNSEEN).spec
    prior = _prior(base_url, agent, unseen, problem)
    assert prior.source in ("model", "nearest"), prior.reason
    assert len(prior.candidates) == 6
    assert all(set(c.candidate.params) == set(PARAMS) for c in prior.candidates)
    assert all(0.0 < c.confidence < 1.0 for c in prior.candidates)
    assert prior.candidates[0].confidence >= prior.candidates[-1].confidence
    predicted = [c.predicted_us for c in prior.candidates]
    assert (prior.rationale is None) == (predicted == sorted(predicted))
    # The imported GPU's own measurements answer for it.
    imported = spec_for(ABSENT["name"], {"vendor": "nvidia", "compute_units": 100}).spec
    observed = _prior(base_url, agent, imported, problem)
    assert observed.source == "observed"
    times = [stencil_time_ms(c, imported) for c in stencil_configurations()]
    best = min(t for t in times if isinstance(t, float))
    first = observed.candidates[0].candidate.params
    assert stencil_time_ms({k: int(v) for k, v in first.items()}, imported) == best  # type: ignore[arg-type]
