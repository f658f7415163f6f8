"""The ingest benchmark: HTTP ingest against a raw COPY of the same rows into the same tables.

Both phases run on a fresh scratch database of the given server. The raw COPY is the
floor of what storing the rows costs (one COPY per table, one transaction, no parsing, no
aggregates); the HTTP phase is what an agent fleet gets: JSON over HTTP, validation,
idempotency, aggregates, all or nothing per batch.
"""

from __future__ import annotations

import gzip as gzip_module
import os
import platform
import queue
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from rich.console import Console

from client import ClientError, ServiceClient
from services.profiler_api.auth.service import Role
from services.profiler_api.db import libpq_url
from services.profiler_api.ingest import repository
from services.profiler_api.ingest.plan import IngestPlan
from tools.local_service import (
    issue_tokens,
    migrated_scratch_database,
    quiet_client_logs,
    running_service,
)
from tools.synthetic import FleetSimulator
from tps.schemas import ProbeRun, ProbeRunBatch


@dataclass(frozen=True)
class IngestBenchConfig:
    runs: int = 6000
    clients: int = 4
    batch_runs: int = 200
    workers: int = 2
    gzip: bool = False
    seed: int = 0


def _bodies(runs: list[ProbeRun], config: IngestBenchConfig) -> list[bytes]:
    bodies = []
    for start in range(0, len(runs), config.batch_runs):
        body = ProbeRunBatch(runs=runs[start : start + config.batch_runs]).model_dump_json()
        data = body.encode()
        bodies.append(gzip_module.compress(data, 1) if config.gzip else data)
    return bodies


def time_raw_copy(url: str, plan: IngestPlan) -> tuple[float, float | None]:
    """Return the seconds one transaction takes to COPY the plan's rows into the tables, and
    the CPU seconds this machine's Postgres spent meanwhile (None when it cannot be read)."""
    measurement_rows = list(plan.measurement_rows())
    with psycopg.connect(libpq_url(url)) as conn:
        pg_before = _postgres_cpu_seconds()  # read while the connection's backend lives
        started = time.perf_counter()
        repository.copy_rows(conn, "hardware", repository.HARDWARE_COLUMNS, plan.hardware.values())
        repository.copy_rows(conn, "problems", repository.PROBLEM_COLUMNS, plan.problems.values())
        repository.copy_rows(
            conn, "candidates", repository.CANDIDATE_COLUMNS, plan.candidates.values()
        )
        repository.copy_rows(conn, "probe_runs", repository.RUN_COLUMNS, plan.run_rows())
        repository.copy_measurements(conn, measurement_rows)
        conn.commit()
        elapsed = time.perf_counter() - started
        pg_cpu = _postgres_cpu_since(pg_before)
        repository.truncate_ingested(conn)
        conn.commit()
    return elapsed, pg_cpu


def time_http_ingest(
    base_url: str, token: str, bodies: list[bytes], *, clients: int, gzip: bool
) -> float:
    """Return the seconds `clients` concurrent clients take to push every body."""
    work: queue.Queue[bytes] = queue.Queue()
    for body in bodies:
        work.put(body)
    failures: list[str] = []

    def client() -> None:
        with ServiceClient.connect(base_url, token=token, timeout_s=120.0) as tps:
            while True:
                try:
                    body = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    tps.push_body(body, gzipped=gzip)
                except ClientError as exc:
                    failures.append(str(exc))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} batches failed, first: {failures[0]}")
    return elapsed


def _cpu_seconds(pid: int) -> float:
    """Return the CPU seconds used so far by process `pid` and its children (the workers)."""
    import psutil  # a dependency of pgserver

    process = psutil.Process(pid)
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        times = member.cpu_times()
        total += times.user + times.system
    return total


def _postgres_cpu_seconds() -> float | None:
    """Return the CPU seconds used so far by this machine's Postgres processes (every
    database of every server here), or None when none can be read (a remote server)."""
    import psutil

    total, seen = 0.0, False
    for process in psutil.process_iter(["name"]):
        if process.info["name"] not in ("postgres", "postmaster"):
            continue
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
        seen = True
    return total if seen else None


def _postgres_cpu_since(before: float | None) -> float | None:
    """Return the Postgres CPU seconds spent since the reading `before` (None if unreadable)."""
    after = _postgres_cpu_seconds()
    return None if before is None or after is None else after - before


def _us_per(seconds: float | None, count: int) -> float | None:
    return None if seconds is None else round(seconds / count * 1e6, 1)


def run_ingest_bench(
    database_url: str, config: IngestBenchConfig, *, log: Console | None = None
) -> dict[str, Any]:
    """Run both phases on a scratch database next to `database_url`; return the figures."""

    def say(message: str) -> None:
        if log is not None:
            log.print(message)

    quiet_client_logs()
    say(f"generating {config.runs} probe runs")
    runs = list(FleetSimulator(seed=config.seed).runs(config.runs))
    measurements = sum(len(run.measurements) for run in runs)
    bodies = _bodies(runs, config)
    # A few small batches first, untimed, so every worker has its schemas and pool warm.
    warmup_runs = list(FleetSimulator(seed=config.seed + 1).runs(10 * 2 * config.workers))
    warmup = _bodies(warmup_runs, replace(config, batch_runs=10))
    warmup_measurements = sum(len(run.measurements) for run in warmup_runs)
    with migrated_scratch_database(database_url, prefix="tps_bench") as url:
        org = issue_tokens(url, org="bench")
        token = org.tokens[Role.AGENT]
        plan = IngestPlan.from_batch(ProbeRunBatch.model_construct(runs=runs), org_id=org.org_id)
        say(f"raw COPY of {measurements} measurements")
        copy_s, copy_pg_s = time_raw_copy(url, plan)
        say(f"HTTP ingest with {config.clients} clients, {len(bodies)} batches")
        load_before = os.getloadavg()[0]
        with running_service(url, workers=config.workers) as service:
            time_http_ingest(
                service.base_url, token, warmup, clients=config.clients, gzip=config.gzip
            )
            cpu_before = _cpu_seconds(service.pid)
            pg_before = _postgres_cpu_seconds()
            http_s = time_http_ingest(
                service.base_url, token, bodies, clients=config.clients, gzip=config.gzip
            )
            service_cpu_s = _cpu_seconds(service.pid) - cpu_before
            ingest_pg_s = _postgres_cpu_since(pg_before)
        with psycopg.connect(libpq_url(url)) as conn:
            stored = conn.execute("SELECT count(*) FROM measurements").fetchone()
            server_version = conn.info.server_version
        if stored is None or stored[0] != measurements + warmup_measurements:
            raise RuntimeError(f"stored {stored} measurements, expected {measurements}")
    ingest_per_s = measurements / http_s
    copy_per_s = measurements / copy_s
    return {
        "ingest_per_s": round(ingest_per_s),
        "copy_per_s": round(copy_per_s),
        "ratio": round(ingest_per_s / copy_per_s, 3),
        "runs": config.runs,
        "measurements": measurements,
        "batches": len(bodies),
        "body_mib": round(sum(map(len, bodies)) / 2**20, 1),
        "http_s": round(http_s, 3),
        # Where the time goes: the service's CPU per measurement, and how busy the box was.
        "service_cpu_us_per_measurement": _us_per(service_cpu_s, measurements),
        # Postgres's own CPU per measurement (every local Postgres process; None if remote),
        # during the HTTP phase and during the raw COPY; and what the ratio goal allows in all
        # (both phases' CPU on every core of the box, at half the COPY's rate).
        "postgres_cpu_us_per_measurement": _us_per(ingest_pg_s, measurements),
        "copy_postgres_cpu_us_per_measurement": _us_per(copy_pg_s, measurements),
        "cpu_us_per_measurement_at_half_copy_rate": round(
            (os.cpu_count() or 1) * 1e6 / (0.5 * measurements / copy_s), 1
        ),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "copy_s": round(copy_s, 3),
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "postgres": server_version,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
