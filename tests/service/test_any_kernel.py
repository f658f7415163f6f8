"""A kernel no code names, on a GPU no catalog lists: import, push, retrain, priors.

The Kernel Tuner files are written here in the formats Kernel Tuner writes (a legacy cache,
a versioned cache, a T4 results file), with latencies that are a deterministic function of
each configuration and the GPU's spec. Everything goes through the command line and a real
service on its own database, so that the story of the other service tests is left alone.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tps.catalog import UnknownHardwareError, resolve, spec_for
from tps.cli import app
from tps.hardware import HardwareSpec
from tps.schemas import Prior

KERNEL = "heat_stencil_2d_kernel"
OP = "heat_stencil_2d"
SIZE = (4096, 4096)
PARAMS = {
    "block_size_x": [16, 32, 64, 128, 256],
    "block_size_y": [1, 2, 4, 8],
    "tile_size_x": [1, 2, 4],
    "loop_unroll": [0, 1],
}
# A GPU missing from the catalog: part of its spec is given, the rest is guessed.
ABSENT = {"name": "Contoso Tensor X7", "vendor": "nvidia", "compute_units": 100}
UNSEEN = {"name": "Fabrikam Z1", "vendor": "nvidia", "compute_units": 60, "l2_bytes": 8 << 20}


def stencil_time_ms(config: dict[str, int], gpu: HardwareSpec) -> float | str:
    """Return the kernel's time on `gpu`: memory-bound work, slowed by idle lanes and tails."""
    threads = config["block_size_x"] * config["block_size_y"]
    if threads > 1024:
        return "CompilationFailedConfig"
    warp = gpu.warp_size or 32
    warps = math.ceil(threads / warp)
    lane_use = threads / (warps * warp)
    blocks = math.ceil(SIZE[0] / (config["block_size_x"] * config["tile_size_x"])) * math.ceil(
        SIZE[1] / config["block_size_y"]
    )
    waves = blocks / gpu.compute_units
    tail = waves / math.ceil(waves)
    seconds = SIZE[0] * SIZE[1] * 8 / (gpu.mem_bandwidth_gbs * 1e9)
    tile = 1.0 + 0.12 * abs(math.log2(config["tile_size_x"]) - 1)
    unroll = 0.92 if config["loop_unroll"] and config["tile_size_x"] > 1 else 1.0
    shape = 1.0 + 0.04 * abs(math.log2(threads) - 8)
    return seconds * 1e3 * tile * unroll * shape / (lane_use * tail)


def configurations() -> list[dict[str, int]]:
    return [dict(zip(PARAMS, values, strict=True)) for values in product(*PARAMS.values())]


def cache_record(config: dict[str, int], gpu: HardwareSpec) -> dict[str, Any]:
    time_ms = stencil_time_ms(config, gpu)
    times = [] if isinstance(time_ms, str) else [time_ms * f for f in (0.99, 1.0, 1.01)]
    return {
        **config, "time": time_ms, "times": times, "compile_time": 410.0,
        "verification_time": 0, "benchmark_time": 12.0, "strategy_time": 0,
        "framework_time": 0.4, "timestamp": "2026-11-30 10:00:00+00:00",
    }  # fmt: skip


def cache_file(gpu: HardwareSpec, device_name: str, *, version: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "device_name": device_name,
        "kernel_name": KERNEL,
        "problem_size": list(SIZE),
        "tune_params_keys": list(PARAMS),
        "tune_params": PARAMS,
        "objective": "time",
        "cache": {
            ",".join(str(v) for v in c.values()): cache_record(c, gpu) for c in configurations()
        },
    }
    return {"schema_version": version, **doc} if version else doc


def t4_file(gpu: HardwareSpec) -> dict[str, Any]:
    results = []
    for config in configurations():
        record = cache_record(config, gpu)
        failed = isinstance(record["time"], str)
        results.append({
            "timestamp": record["timestamp"],
            "configuration": config,
            "times": {"compilation": 410.0, "runtimes": record["times"]},
            "invalidity": "compile" if failed else "correct",
            "correctness": 0 if failed else 1,
            "measurements": [{"name": "time", "value": record["time"], "unit": "ms"}],
            "objectives": ["time"],
        })  # fmt: skip
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"}, "results": results}


@pytest.fixture(scope="module")
def service(postgres_server_url: str) -> Iterator[tuple[str, str, str]]:
    """Run a service on a database of its own; yield (base URL, agent token, admin token)."""
    from sqlalchemy.orm import Session

    from services.profiler_api import migrate
    from services.profiler_api.auth.service import Role, create_token
    from services.profiler_api.db import make_engine, scratch_database
    from services.profiler_api.runner import running_service
    from services.profiler_api.settings import Settings

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
    (tmp_path / "A4000.json").write_text(json.dumps(cache_file(a4000, "", version=None)))
    (tmp_path / "w7800.json").write_text(
        json.dumps(cache_file(w7800, "AMD Radeon PRO W7800", version="1.1.0"))
    )
    (tmp_path / "x7.json").write_text(json.dumps(t4_file(absent)))
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
    times = [stencil_time_ms(c, imported) for c in configurations()]
    best = min(t for t in times if isinstance(t, float))
    first = observed.candidates[0].candidate.params
    assert stencil_time_ms({k: int(v) for k, v in first.items()}, imported) == best  # type: ignore[arg-type]
