"""`tps bench priors`: latency of POST /v1/priors answered from the model, over HTTP.

On a scratch database: push the Kernel Tuner data without one GPU, retrain through
the admin endpoint, then ask for that GPU's priors. Two figures, because the service keeps
each model version's answers per (hardware, problem) in the process: `repeat` asks the same
questions again (what a fleet of identical GPUs does), `first` changes the hardware
fingerprint on every request so that each one runs the model from scratch. `observed` times
the same endpoint for GPUs that measured the problem: what a request costs without any model.
"""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.runner import quiet_client_logs, running_service
from services.profiler_api.settings import Settings
from services.profiler_api.training.kernel_tuner import find_dataset, load_split, push_runs, retrain
from tps.errors import TPSError
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey


@dataclass(frozen=True)
class PriorsBenchConfig:
    requests: int = 400
    first_requests: int = 40
    holdout: str = "W7800"
    max_candidates: int = 1000
    n_estimators: int = 100
    limit: int = 8


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.array(samples_s) * 1000.0
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def _time_priors(
    client: httpx.Client, queries: list[tuple[HardwareSpec, ProblemKey]], limit: int
) -> tuple[list[float], Counter[str]]:
    latencies: list[float] = []
    sources: Counter[str] = Counter()
    for hardware, problem in queries:
        body = {
            "hardware": hardware.model_dump(mode="json"),
            "problem": problem.model_dump(mode="json"),
            "limit": limit,
        }
        started = time.perf_counter()
        response = client.post("/v1/priors", json=body)
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
        sources[str(response.json()["source"])] += 1
    return latencies, sources


def run_priors_bench(
    database_url: str, config: PriorsBenchConfig, *, log: Console | None = None
) -> dict[str, Any]:
    """Run the benchmark on a scratch database next to `database_url`; return the figures."""

    def say(message: str) -> None:
        if log is not None:
            log.print(message)

    quiet_client_logs()
    path = find_dataset(Settings().kernel_tuner_data)
    say(f"reading {path} (holding out {config.holdout})")
    split = load_split(path, holdout=config.holdout)
    with scratch_database(database_url, prefix="tps_bench") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings())
        with Session(engine) as session, session.begin():
            tokens = {role: create_token(session, org="bench", role=role) for role in Role}
        engine.dispose()
        with running_service(url) as service:
            agent = httpx.Client(
                base_url=service.base_url,
                headers={"Authorization": f"Bearer {tokens[Role.AGENT]}"},
                timeout=120.0,
            )
            admin = httpx.Client(
                base_url=service.base_url,
                headers={"Authorization": f"Bearer {tokens[Role.ADMIN]}"},
                timeout=120.0,
            )
            with agent, admin:
                say(f"pushing {len(split.train)} runs through POST /v1/probe-runs")
                pushed = push_runs(agent, split.train)
                say("retraining through POST /v1/admin/retrain")
                started = time.perf_counter()
                params = {
                    "max_candidates": config.max_candidates,
                    "n_estimators": config.n_estimators,
                }
                job = retrain(admin, params)
                train_s = time.perf_counter() - started
                if job["state"] != "succeeded":
                    raise TPSError(f"training job {job['state']}: {job['error']}")
                hardware = split.heldout[0].hardware
                problems = [run.problem for run in split.heldout]
                # One untimed round loads the model into the process and fills its memo.
                _time_priors(agent, [(hardware, p) for p in problems], config.limit)
                say(f"timing {config.requests} repeated and {config.first_requests} first queries")
                repeat = [(hardware, problems[i % len(problems)]) for i in range(config.requests)]
                repeat_s, repeat_sources = _time_priors(agent, repeat, config.limit)
                assert hardware.clock_mhz is not None
                first = [
                    (
                        hardware.model_copy(
                            update={"clock_mhz": hardware.clock_mhz + (i + 1) * 1e-3}
                        ),
                        problems[i % len(problems)],
                    )
                    for i in range(config.first_requests)
                ]  # a new fingerprint each time: nothing is remembered
                first_s, first_sources = _time_priors(agent, first, config.limit)
                # The same endpoint answered from the observed aggregates: the request's own cost.
                known = [(run.hardware, run.problem) for run in split.train]
                observed = [known[i % len(known)] for i in range(config.requests)]
                observed_s, observed_sources = _time_priors(agent, observed, config.limit)
    reports = job["metrics"]["reports"]
    return {
        "repeat": {**_percentiles(repeat_s), "sources": dict(repeat_sources)},
        "first": {**_percentiles(first_s), "sources": dict(first_sources)},
        "observed": {**_percentiles(observed_s), "sources": dict(observed_sources)},
        "holdout": split.holdout_name,
        "ops": [p.op for p in problems],
        "model_version": job["model_version"],
        "train_s": round(train_s, 1),
        "pushed": pushed,
        "gate_holdouts": {r["op"]: r["holdout"] for r in reports},
        "gate_policy_score_at_1": {r["op"]: round(r["policy"]["score_at_1"], 3) for r in reports},
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
