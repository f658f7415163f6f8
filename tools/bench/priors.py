"""`tps bench priors`: priors under fleet load, over HTTP, at a chosen database size.

On a scratch database: a generated fleet of about `--measurements` measurements
(`bench_fleet`, written by SQL and labelled as generated), then the shared Kernel Tuner data
pushed through `POST /v1/probe-runs` without one GPU and a model retrained through the admin
endpoint, so that the model answers for that GPU. Then, against `--workers` uvicorn workers:

- closed loop: `--clients` concurrent clients on `GET /v1/priors` (observed pairs of the
  fleet, in turn) and on `/healthz`, the same way, one after the other: requests per second;
- open loop at `--rate` requests per second, each latency from its scheduled send time:
  `observed` (GET, the fleet's pairs) and `model` (POST with the held-out GPU's full spec:
  a new GPU model arrives as a job of `--hosts-per-job` hosts that all ask about it, so a
  new fingerprint appears every `hosts-per-job` requests and runs the model from scratch);
- with `--ingest-rate` > 0, both open loops again while a pusher sends that many
  measurements per second through `POST /v1/probe-runs` beside them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import multiprocessing
import os
import platform
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import platformdirs
import psycopg
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from sqlalchemy.orm import Session

from client import ClientError, ServiceClient
from services.profiler_api.auth.service import Role
from services.profiler_api.db import libpq_url, make_engine
from services.profiler_api.model_registry import repository as registry
from services.profiler_api.orm import ModelVersion
from services.profiler_api.settings import Settings
from tools.bench import loadgen
from tools.bench.fleet import generate_fleet, sample_pairs
from tools.bench.loadgen import Call, LoadResult
from tools.kernel_tuner import find_dataset, load_split, push_runs, retrain
from tools.local_service import (
    issue_tokens,
    migrated_scratch_database,
    quiet_client_logs,
    running_service,
)
from tools.settings import LocalSettings
from tools.synthetic import FleetSimulator
from tps import __version__
from tps.errors import TPSError
from tps.schemas import ProbeRun, ProbeRunBatch

# Training is set-up here, not what is timed; on a box shared with other work it may crawl.
RETRAIN_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class PriorsBenchConfig:
    measurements: int = 1_000_000
    workers: int = 2
    clients: int = 50
    closed_s: float = 10.0
    rate: float = 500.0
    open_s: float = 10.0
    hosts_per_job: int = 50
    pairs: int = 2000
    ingest_rate: int = 0
    # Push the ingest through a service process of its own (an ingest deployment) against the
    # same Postgres, instead of through the workers that answer priors.
    ingest_replica: bool = False
    # The ingest process's niceness (TPS_CPU_NICE), as an ingest deployment would be given.
    ingest_nice: int = 0
    holdout: str = "W7800"
    max_candidates: int = 1000
    n_estimators: int = 100
    limit: int = 8
    reuse_model: bool = True


def _model_file(config: PriorsBenchConfig) -> Path:
    """Where the model retrained for this set-up is kept between runs of the benchmark."""
    recipe = json.dumps(
        [__version__, config.holdout, config.max_candidates, config.n_estimators]
    ).encode()
    name = f"priors-model-{hashlib.sha256(recipe).hexdigest()[:16]}.json"
    return platformdirs.user_cache_path("tps") / "bench" / name


def _save_model(url: str, path: Path) -> None:
    engine = make_engine(url, Settings(db_pool_size=1))
    with Session(engine) as session:
        row = session.query(ModelVersion).filter(ModelVersion.active).one()
        doc = {
            "ops": row.ops,
            "data_counts": row.data_counts,
            "params": row.params,
            "metrics": row.metrics,
            "artifact": base64.b64encode(row.artifact).decode(),
            "sha256": row.artifact_sha256,
        }
    engine.dispose()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _restore_model(url: str, path: Path) -> int:
    """Register and activate the model kept from an earlier run; return its version."""
    doc = json.loads(path.read_text())
    engine = make_engine(url, Settings(db_pool_size=1))
    with Session(engine) as session, session.begin():
        version = registry.add_version(
            session,
            ops=doc["ops"],
            data_counts=doc["data_counts"],
            params=doc["params"],
            metrics=doc["metrics"],
            artifact=base64.b64decode(doc["artifact"]),
            sha256=doc["sha256"],
            job_id=None,
        )
        registry.activate(session, version)
    engine.dispose()
    return version


def _observed_calls(pairs: list[tuple[str, str]], limit: int) -> list[Call]:
    return [
        Call("/v1/priors?" + urlencode({"hardware_id": h, "problem": p, "limit": limit}))
        for h, p in pairs
    ]


def _model_calls(split: Any, config: PriorsBenchConfig, *, first_job: int = 0) -> list[Call]:
    """A new GPU (fingerprint) every `hosts_per_job` requests, all asking its problems.

    GPUs are numbered from `first_job`: a second loop asks about GPUs the first never did.
    """
    hardware = split.heldout[0].hardware
    problems = [run.problem for run in split.heldout]
    count = int(config.rate * config.open_s)
    calls = []
    for i in range(count):
        job = first_job + i // config.hosts_per_job
        spec = hardware.model_copy(update={"clock_mhz": hardware.clock_mhz + (job + 1) * 1e-3})
        if config.hosts_per_job >= count:  # one job: the GPU exactly as the catalog has it
            spec = hardware
        body = {
            "hardware": spec.model_dump(mode="json"),
            "problem": problems[i % len(problems)].model_dump(mode="json"),
            "limit": config.limit,
        }
        calls.append(Call("/v1/priors", json.dumps(body).encode()))
    return calls


class IngestPacer:
    """Push generated probe runs at a fixed number of measurements per second.

    A fleet's agents push on their own schedules, not one after another's answer: each batch
    leaves at its due time on one of `senders` threads, so a slow answer delays only its own
    sender, and the rate offered is the rate asked unless every sender is waiting.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        per_s: int,
        duration_s: float,
        batch_runs: int = 50,
        senders: int = 8,
    ) -> None:
        self.base_url, self.token = base_url, token
        self.per_s, self.duration_s, self.batch_runs = per_s, duration_s, batch_runs
        self.senders = senders
        self.sent_measurements = 0  # stored: answered 200
        self.elapsed_s = 0.0
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._next = 0
        self._started = 0.0
        # Runs until the window's measurements are in, and one batch more: a run holds 8 or
        # more, and how many depends on the simulated fleet.
        wanted = per_s * duration_s
        runs: list[ProbeRun] = []
        held = 0
        for run in FleetSimulator(seed=7).runs(int(wanted / 8) + batch_runs):
            runs.append(run)
            held += len(run.measurements)
            if held >= wanted and len(runs) % batch_runs == 0:
                break
        self._bodies = [
            (
                ProbeRunBatch(runs=runs[i : i + batch_runs]).model_dump_json().encode(),
                sum(len(r.measurements) for r in runs[i : i + batch_runs]),
            )
            for i in range(0, len(runs), batch_runs)
        ]
        # When each batch is due: the measurements offered before it at the asked rate.
        offered = [0, *itertools.accumulate(m for _, m in self._bodies)]
        self._due_s = [o / per_s for o in offered[:-1]]

    def start(self) -> None:
        """Start the senders; the schedule's clock starts once each has its client open."""
        connected = threading.Barrier(
            self.senders + 1, action=lambda: setattr(self, "_started", time.perf_counter())
        )
        self._threads = [
            threading.Thread(target=self._send, args=(connected,), daemon=True)
            for _ in range(self.senders)
        ]
        for thread in self._threads:
            thread.start()
        try:
            connected.wait(timeout=60.0)
        except threading.BrokenBarrierError:
            raise TPSError(f"the ingest senders could not reach {self.base_url}") from None

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
        self.elapsed_s = time.perf_counter() - self._started

    def achieved_per_s(self) -> float:
        return self.sent_measurements / self.elapsed_s if self.elapsed_s else 0.0

    def _take(self) -> tuple[bytes, int, float] | None:
        """Return the next batch and when it is due, or None once the window is over."""
        with self._lock:
            if self._next >= len(self._bodies) or self._due_s[self._next] >= self.duration_s:
                return None
            body, measurements = self._bodies[self._next]
            due = self._started + self._due_s[self._next]
            self._next += 1
        return body, measurements, due

    def _send(self, connected: threading.Barrier) -> None:
        try:
            tps = ServiceClient.connect(self.base_url, token=self.token, timeout_s=60.0)
        except BaseException:
            connected.abort()
            raise
        with tps:
            connected.wait()
            while (batch := self._take()) is not None:
                body, measurements, due = batch
                if time.perf_counter() - self._started >= self.duration_s:
                    return  # pushes that stall past the window end it too
                time.sleep(max(0.0, due - time.perf_counter()))
                try:
                    tps.push_body(body)
                except ClientError as exc:  # counted, and the pace goes on
                    with self._lock:
                        self.errors.append(str(exc))
                    continue
                with self._lock:
                    self.sent_measurements += measurements


class IngestProcess:
    """An `IngestPacer` in a process of its own, as a fleet's agents push from their own hosts.

    Beside the open loops, a pacer's threads shared the load generator's interpreter: each
    push waited for the interpreter behind the loop's clients, and the rate reached was the
    generator's, not the service's (about 14,000/s beside the loops with the box 40% idle,
    against 40,000/s alone). The batches are built before `start`, in the child.
    """

    def __init__(self, base_url: str, token: str, *, per_s: int, duration_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready, self._go = context.Event(), context.Event()
        self._outcome, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_pace,
            args=(base_url, token, per_s, duration_s, self._ready, self._go, sender),
            daemon=True,
        )
        self._process.start()
        sender.close()
        self.duration_s = duration_s
        self.sent_measurements = 0
        self.elapsed_s = 0.0
        self.errors: list[str] = []
        if not self._ready.wait(timeout=300.0):
            self._process.kill()
            raise TPSError("the ingest process did not build its batches within 300 s")

    def start(self) -> None:
        self._go.set()

    def join(self) -> None:
        wait_s = self.duration_s + 120.0
        if not self._outcome.poll(wait_s):
            self._process.kill()
            raise TPSError(f"the ingest process did not finish within {wait_s:.0f} s")
        try:
            outcome = self._outcome.recv()
        except EOFError:
            self._process.join()
            raise TPSError(
                f"the ingest process ended without a result (exit code {self._process.exitcode})"
            ) from None
        self._process.join()
        self.sent_measurements = outcome["sent"]
        self.elapsed_s = outcome["elapsed_s"]
        self.errors = outcome["errors"]

    def achieved_per_s(self) -> float:
        return self.sent_measurements / self.elapsed_s if self.elapsed_s else 0.0


def _pace(
    base_url: str,
    token: str,
    per_s: int,
    duration_s: float,
    ready: Any,
    go: Any,
    outcome: Any,
) -> None:
    """The ingest process: build the batches, say so, push them when told, send the count."""
    pacer = IngestPacer(base_url, token, per_s=per_s, duration_s=duration_s)
    ready.set()
    go.wait()
    pacer.start()
    pacer.join()
    outcome.send(
        {"sent": pacer.sent_measurements, "elapsed_s": pacer.elapsed_s, "errors": pacer.errors}
    )


def _count_measurements(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM measurements").fetchone()
    return int(row[0]) if row else 0


def _answer_buckets(base_url: str) -> dict[str, dict[float, float]]:
    """Return the service's computed answers so far: by source, the count at or under each
    bucket bound in seconds (`tps_priors_answer_seconds`, summed over its workers)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30.0).text
    buckets: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "tps_priors_answer_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                source = sample.labels["source"]
                bound = float(sample.labels["le"])
                buckets.setdefault(source, {})[bound] = sample.value
    return buckets


def _model_answers_where(base_url: str) -> dict[str, int]:
    """Return the model answers computed so far, by where (`tps_model_answers`)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30.0).text
    return {
        sample.labels["where"]: int(sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == "tps_model_answers"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _computed_between(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, dict[str, Any]]:
    """Per source, the answers computed between two snapshots and the share within each
    bound (ms): how long the computing request took, beside what the waiting ones saw."""
    out: dict[str, dict[str, Any]] = {}
    for source, counts in after.items():
        done = {b: n - before.get(source, {}).get(b, 0.0) for b, n in counts.items()}
        total = done.get(float("inf"), 0.0)
        if total:
            out[source] = {
                "count": int(total),
                "share_within_ms": {
                    f"{1000 * b:g}": round(n / total, 3)
                    for b, n in sorted(done.items())
                    if b != float("inf")
                },
            }
    return out


def _open_loops(
    base_url: str, headers: dict[str, str], config: PriorsBenchConfig, calls: dict[str, list[Call]]
) -> dict[str, LoadResult]:
    return {
        name: loadgen.open_loop(
            base_url, these, headers=headers, rate=config.rate, duration_s=config.open_s
        )
        for name, these in calls.items()
    }


def run_priors_bench(
    database_url: str, config: PriorsBenchConfig, *, log: Console | None = None
) -> dict[str, Any]:
    """Run the benchmark on a scratch database next to `database_url`; return the figures."""

    def say(message: str) -> None:
        if log is not None:
            log.print(message)

    quiet_client_logs()
    path = find_dataset(LocalSettings().kernel_tuner_data)
    say(f"reading {path} (holding out {config.holdout})")
    split = load_split(path, holdout=config.holdout)
    load_before = os.getloadavg()[0]
    with migrated_scratch_database(database_url, prefix="tps_bench") as url:
        org = issue_tokens(url, org="bench", roles=list(Role))
        tokens, org_id = org.tokens, org.org_id
        say(f"generating a fleet of about {config.measurements:,} measurements in SQL")
        with psycopg.connect(libpq_url(url)) as conn:
            fleet = generate_fleet(conn, measurements=config.measurements, org_id=org_id)
            conn.commit()
            # Vacuumed now, not by autovacuum in the middle of a timed loop: a fleet's
            # database is measured in its steady state, not just after a bulk load.
            conn.autocommit = True
            conn.execute("VACUUM (ANALYZE)")
            pairs = sample_pairs(conn, count=config.pairs)
        say(f"generated {fleet}")
        # One LightGBM thread for the set-up's retrain: two spin against each other (and
        # against the load) on a small box; the retrain is not what this benchmark times.
        # The per-token rate limit still runs, set above the offered load: the 50 clients
        # stand for 50 hosts, and one token's limit is not what is measured.
        env = {"TPS_TRAINING_THREADS": "1", "TPS_RATE_LIMIT_PER_S": "1000000"}
        with running_service(url, workers=config.workers, env=env) as service:
            headers = {"Authorization": f"Bearer {tokens[Role.AGENT]}"}
            agent = ServiceClient.connect(
                service.base_url, token=tokens[Role.AGENT], timeout_s=120.0
            )
            admin = ServiceClient.connect(
                service.base_url, token=tokens[Role.ADMIN], timeout_s=600.0
            )
            with agent, admin:
                say(f"pushing {len(split.train)} Kernel Tuner runs")
                push_runs(agent, split.train)
                model_file = _model_file(config)
                if config.reuse_model and model_file.exists():
                    say(f"activating the model kept in {model_file}")
                    model_version = _restore_model(url, model_file)
                    reports = json.loads(model_file.read_text())["metrics"]["reports"]
                else:
                    say("retraining through POST /v1/admin/retrain")
                    # The model answers first questions about the held-out GPU's problems, so
                    # it learns their ops; the generated fleet is what the observed priors read.
                    job = retrain(
                        admin,
                        {
                            "ops": sorted({run.problem.op for run in split.train}),
                            "max_candidates": config.max_candidates,
                            "n_estimators": config.n_estimators,
                        },
                        timeout_s=RETRAIN_TIMEOUT_S,
                    )
                    if job.state != "succeeded" or job.model_version is None:
                        raise TPSError(f"training job {job.state}: {job.error}")
                    model_version = job.model_version
                    reports = (job.metrics or {})["reports"]
                    _save_model(url, model_file)
                stats_s = []
                for _ in range(21):
                    started = time.perf_counter()
                    agent.request("GET", "/v1/stats")
                    stats_s.append(time.perf_counter() - started)
            observed = _observed_calls(pairs, config.limit)
            model = _model_calls(split, config)
            calls = {"observed": observed, "model": model}
            # Every worker loads the model and opens its pool before anything is timed (the
            # held-out GPU's own fingerprint: the timed model loop never asks about it).
            warm = _model_calls(split, replace(config, rate=1.0, open_s=2.0, hosts_per_job=10**6))
            loadgen.closed_loop(
                service.base_url,
                observed[:200] + warm,
                headers=headers,
                clients=8,
                duration_s=3.0,
            )
            say(f"closed loop: {config.clients} clients, {config.closed_s:.0f} s per endpoint")
            closed_priors = loadgen.closed_loop(
                service.base_url,
                observed,
                headers=headers,
                clients=config.clients,
                duration_s=config.closed_s,
            )
            closed_health = loadgen.closed_loop(
                service.base_url,
                [Call("/healthz")],
                clients=config.clients,
                duration_s=config.closed_s,
            )
            hey = {}
            if loadgen.hey_available():
                hey_priors = loadgen.hey_closed_loop(
                    service.base_url + observed[0].path,
                    headers=headers,
                    clients=config.clients,
                    duration_s=config.closed_s,
                )
                hey_health = loadgen.hey_closed_loop(
                    service.base_url + "/healthz",
                    clients=config.clients,
                    duration_s=config.closed_s,
                )
                hey = {"priors": hey_priors.summary(), "healthz": hey_health.summary()}
            say(f"open loop at {config.rate:.0f}/s: observed, then model")
            answers_before = _answer_buckets(service.base_url)
            where_before = _model_answers_where(service.base_url)
            quiet = _open_loops(service.base_url, headers, config, calls)
            computed = _computed_between(answers_before, _answer_buckets(service.base_url))
            where = {
                k: n - where_before.get(k, 0)
                for k, n in _model_answers_where(service.base_url).items()
            }
            ingest: dict[str, Any] = {}
            if config.ingest_rate:
                say(f"open loops again beside {config.ingest_rate:,} measurements/s of ingest")
                jobs = len(model) // config.hosts_per_job + 1
                busy_calls = {
                    "observed": observed,
                    "model": _model_calls(split, config, first_job=jobs),  # GPUs not yet asked
                }
                with ExitStack() as stack:
                    push_to = service.base_url
                    if config.ingest_replica:
                        replica_env = {**env, "TPS_CPU_NICE": str(config.ingest_nice)}
                        push_to = stack.enter_context(
                            running_service(url, workers=1, env=replica_env)
                        ).base_url
                    pacer = IngestProcess(
                        push_to,
                        tokens[Role.AGENT],
                        per_s=config.ingest_rate,
                        duration_s=2 * config.open_s + 1.0,
                    )
                    pacer.start()
                    busy = _open_loops(service.base_url, headers, config, busy_calls)
                    pacer.join()
                ingest = {
                    "ingest_replica": config.ingest_replica,
                    "ingest_nice": config.ingest_nice if config.ingest_replica else 0,
                    "ingest_observed_p99_ms": busy["observed"].percentile_ms(99),
                    "ingest_model_p99_ms": busy["model"].percentile_ms(99),
                    "ingest_errors": busy["observed"].errors + busy["model"].errors,
                    "ingest_achieved_per_s": round(pacer.achieved_per_s()),
                    "ingest_push_errors": len(pacer.errors),
                    "ingest_open_loop": {k: v.summary() for k, v in busy.items()},
                }
        measurements = _count_measurements(url)
    priors_rps = closed_priors.rps()
    healthz_rps = closed_health.rps()
    errors = closed_priors.errors + closed_health.errors + sum(r.errors for r in quiet.values())
    return {
        "priors_rps": round(priors_rps, 1),
        "healthz_rps": round(healthz_rps, 1),
        "rps_ratio": round(priors_rps / healthz_rps, 3) if healthz_rps else None,
        "open_loop_rate": config.rate,
        "observed_p50_ms": quiet["observed"].percentile_ms(50),
        "observed_p99_ms": quiet["observed"].percentile_ms(99),
        "model_p50_ms": quiet["model"].percentile_ms(50),
        "model_p99_ms": quiet["model"].percentile_ms(99),
        "errors": errors,
        "measurements": measurements,
        # GET /v1/stats, one client, 20 calls after one untimed: constant in the data size?
        "stats_p50_ms": round(1000 * sorted(stats_s[1:])[len(stats_s[1:]) // 2], 2),
        # the quiet open loops' answers computed, not cached, by source
        "computed_answers": computed,
        # where the quiet model loop's answers were computed (TPS_MODEL_ANSWER_PROCESSES)
        "model_answers_where": where,
        "model_answer_processes": Settings().answer_processes(),
        **ingest,
        "closed_loop": {"priors": closed_priors.summary(), "healthz": closed_health.summary()},
        "closed_loop_hey": hey or None,
        "open_loop": {k: v.summary() for k, v in quiet.items()},
        "fleet": fleet,
        "model_version": model_version,
        "model_ops": sorted({r["op"] for r in reports}),
        "holdout": split.holdout_name,
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
