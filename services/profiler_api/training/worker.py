"""The training worker: claims queued jobs, trains, gates, registers; never inside a request.

Runs as a thread of each service process (TPS_TRAINING_WORKER, on by default) or on its own
(`tps worker`). Claims go through SELECT ... FOR UPDATE SKIP LOCKED, so any number of
replicas and workers share one queue without running a job twice.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from models.bundle import ModelBundle, checksum
from services.profiler_api.model_registry import repository as model_registry
from services.profiler_api.settings import Settings
from services.profiler_api.training import repository
from services.profiler_api.training.schemas import RetrainParams
from services.profiler_api.training.service import TrainingOutcome, train_and_gate

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"[:128]


class TrainingWorker:
    """Run training jobs from the queue in Postgres."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        *,
        settings: Settings,
        name: str | None = None,
    ) -> None:
        self.session_factory = session_factory
        self.settings = settings
        self.name = name
        self.wake = threading.Event()

    def run_once(self) -> uuid.UUID | None:
        """Claim and run one job; return its id, or None when the queue is empty."""
        with self.session_factory.begin() as session:
            job = repository.claim_next_job(
                session, worker=self.name or worker_name(), stale_s=self.settings.training_stale_s
            )
            if job is None:
                return None
            job_id, raw_params = job.id, dict(job.params)
        log.info("training job %s started", job_id)
        try:
            outcome, champion = self._train(raw_params)
            self._record(job_id, outcome, champion)
        except Exception as exc:  # a failed job is recorded; serving never notices
            log.warning("training job %s failed: %s", job_id, exc, exc_info=True)
            with self.session_factory.begin() as session:
                repository.finish_job(
                    session, job_id, state="failed", error=f"{type(exc).__name__}: {exc}"
                )
        return job_id

    def _train(self, raw_params: dict[str, Any]) -> tuple[TrainingOutcome, int | None]:
        params = RetrainParams.model_validate(raw_params)
        with self.session_factory() as session:
            data = repository.tuning_data(session, ops=params.ops)
            version = model_registry.active_version(session)
            champion = None
            if version is not None:
                stored = model_registry.artifact_of(session, version)
                if stored is not None:
                    artifact, digest = stored
                    champion = (version, ModelBundle.from_bytes(artifact, expected_checksum=digest))
        outcome = train_and_gate(
            data, params, champion=champion, n_jobs=self.settings.training_threads
        )
        return outcome, version

    def _record(self, job_id: uuid.UUID, outcome: TrainingOutcome, champion: int | None) -> None:
        with self.session_factory.begin() as session:
            if not outcome.accepted or outcome.bundle is None:
                repository.finish_job(
                    session,
                    job_id,
                    state="rejected",
                    metrics=outcome.metrics(),
                    error="quality gate: " + "; ".join(outcome.reasons),
                )
                log.info("training job %s rejected: %s", job_id, outcome.reasons)
                return
            bundle = outcome.bundle
            version = model_registry.add_version(
                session,
                ops=bundle.ops,
                data_counts=bundle.data_counts,
                params={"models": {op: m.get_params() for op, m in bundle.models.items()}},
                metrics=outcome.metrics() | {"replaced": champion},
                artifact=outcome.artifact,
                sha256=checksum(outcome.artifact),
                job_id=job_id,
            )
            model_registry.activate(session, version)
            repository.finish_job(
                session,
                job_id,
                state="succeeded",
                metrics=outcome.metrics(),
                model_version=version,
            )
        log.info("training job %s: model v%d active", job_id, version)

    def run(self, stop: threading.Event) -> None:
        """Run jobs until `stop` is set; sleep between polls when the queue is empty."""
        while not stop.is_set():
            try:
                ran = self.run_once()
            except Exception:  # the database went away: keep polling
                log.warning("training worker: claiming a job failed", exc_info=True)
                ran = None
            if ran is None:
                self.wake.wait(self.settings.training_poll_s)
                self.wake.clear()

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run the worker in a daemon thread (a job in progress does not hold up exit)."""
        thread = threading.Thread(target=self.run, args=(stop,), name="tps-training", daemon=True)
        thread.start()
        return thread
