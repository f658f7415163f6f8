"""Sustained ingest: measure the service's maximum, then push at half of it for minutes.

What it shows: errors (any answer but 200), the rate held, answer latency, and the
service's memory (all its processes) sampled over the run, so that growth shows.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import psutil
import psycopg
from rich.console import Console

from client import ClientError, ServiceClient
from services.profiler_api.auth.service import Role
from services.profiler_api.db import libpq_url
from tools.bench.ingest import time_http_ingest
from tools.local_service import (
    issue_tokens,
    migrated_scratch_database,
    quiet_client_logs,
    running_service,
)
from tools.synthetic import FleetSimulator
from tps.schemas import ProbeRunBatch


@dataclass(frozen=True)
class SustainedConfig:
    duration_s: float = 600.0
    fraction: float = 0.5  # of the measured maximum
    batch_runs: int = 100
    clients: int = 4
    workers: int = 2
    max_runs: int = 4000  # pushed as fast as possible to find the maximum
    sample_s: float = 10.0
    seed: int = 0


def _rss_mib(pid: int) -> float:
    process = psutil.Process(pid)
    members = [process, *process.children(recursive=True)]
    return float(sum(member.memory_info().rss for member in members)) / 2**20


class _Batches:
    """Fresh batches of new runs, made ahead by a generator, one at a time under a lock."""

    def __init__(self, *, seed: int, batch_runs: int) -> None:
        self._runs = FleetSimulator(seed=seed).runs(10**9)
        self._batch_runs = batch_runs
        self._lock = threading.Lock()

    def next(self) -> tuple[bytes, int]:
        with self._lock:
            runs = [next(self._runs) for _ in range(self._batch_runs)]
        body = ProbeRunBatch.model_construct(runs=runs).model_dump_json().encode()
        return body, sum(len(run.measurements) for run in runs)


def _sustain(
    base_url: str, token: str, config: SustainedConfig, *, per_s: float, pid: int
) -> dict[str, Any]:
    batches = _Batches(seed=config.seed + 7, batch_runs=config.batch_runs)
    sample_body, sample_measurements = batches.next()
    interval = sample_measurements / per_s  # seconds between batches, all clients together
    started = time.monotonic()
    deadline = started + config.duration_s
    slots = iter(range(10**9))
    slot_lock = threading.Lock()
    errors: list[str] = []
    latencies: list[float] = []
    pushed = [0, 0]  # batches, measurements

    def client() -> None:
        with ServiceClient.connect(base_url, token=token, timeout_s=60.0) as tps:
            while True:
                with slot_lock:
                    at = started + next(slots) * interval
                if at >= deadline:
                    return
                body, count = batches.next()
                time.sleep(max(0.0, at - time.monotonic()))  # open loop: keep the schedule
                sent = time.monotonic()
                try:
                    tps.push_body(body)
                    ok, detail = True, ""
                except ClientError as exc:
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                latencies.append(time.monotonic() - sent)
                with slot_lock:
                    if ok:
                        pushed[0] += 1
                        pushed[1] += count
                    else:
                        errors.append(detail)

    rss: list[tuple[float, float]] = [(0.0, round(_rss_mib(pid), 1))]
    threads = [threading.Thread(target=client) for _ in range(config.clients)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=config.sample_s / len(threads))
        rss.append((round(time.monotonic() - started, 1), round(_rss_mib(pid), 1)))
    elapsed = time.monotonic() - started
    del sample_body
    ordered = sorted(latencies)
    return {
        "target_per_s": round(per_s),
        "achieved_per_s": round(pushed[1] / elapsed),
        "duration_s": round(elapsed, 1),
        "batches": pushed[0],
        "measurements": pushed[1],
        "errors": len(errors),
        "first_errors": errors[:5],
        "latency_ms_p50": round(1000 * statistics.median(ordered), 1) if ordered else None,
        "latency_ms_p99": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1)
        if ordered
        else None,
        "rss_mib": rss,
    }


def run_sustained_bench(
    database_url: str, config: SustainedConfig, *, log: Console | None = None
) -> dict[str, Any]:
    """Find the maximum ingest rate, then hold `fraction` of it for `duration_s`."""

    def say(message: str) -> None:
        if log is not None:
            log.print(message)

    quiet_client_logs()
    runs = list(FleetSimulator(seed=config.seed).runs(config.max_runs))
    measurements = sum(len(run.measurements) for run in runs)
    bodies = [
        ProbeRunBatch.model_construct(runs=runs[i : i + config.batch_runs])
        .model_dump_json()
        .encode()
        for i in range(0, len(runs), config.batch_runs)
    ]
    with migrated_scratch_database(database_url, prefix="tps_sustained") as url:
        token = issue_tokens(url, org="bench").tokens[Role.AGENT]
        with running_service(url, workers=config.workers) as service:
            say(f"maximum: {len(bodies)} batches as fast as {config.clients} clients go")
            max_s = time_http_ingest(
                service.base_url, token, bodies, clients=config.clients, gzip=False
            )
            max_per_s = measurements / max_s
            say(f"maximum {max_per_s:.0f} measurements/s; holding {config.fraction:.0%} of it")
            sustained = _sustain(
                service.base_url,
                token,
                config,
                per_s=config.fraction * max_per_s,
                pid=service.pid,
            )
        with psycopg.connect(libpq_url(url)) as conn:
            row = conn.execute("SELECT count(*) FROM measurements").fetchone()
            stored = row[0] if row else 0
    rss = [mib for _, mib in sustained["rss_mib"]]
    settled = rss[len(rss) // 4 :] or rss  # after warm-up
    return {
        "max_per_s": round(max_per_s),
        **sustained,
        "stored_measurements": stored,
        "expected_measurements": measurements + sustained["measurements"],
        "rss_mib_settled_min_max": [min(settled), max(settled)] if settled else None,
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
