"""The typed client of the service's API v1, on one httpx client."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from client.errors import BadAnswer, ClientError, JobTimeout, error_for, transport_error
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import (
    MAX_BATCH_RUNS,
    MAX_PRIOR_IDS,
    FleetStats,
    HardwareEntry,
    IngestResult,
    IssuedToken,
    Job,
    ModelVersion,
    Prior,
    PriorBatch,
    PriorBatchRequest,
    PriorRequest,
    ProbeRun,
    RetrainAccepted,
    TokenInfo,
)

Model = TypeVar("Model", bound=BaseModel)

# The service refuses bodies over 32 MiB once inflated; stay well under it.
PUSH_BATCH_BYTES = 16 * 1024 * 1024
TERMINAL_JOB_STATES = frozenset({"succeeded", "rejected", "failed", "cancelled"})
JSON = {"Content-Type": "application/json"}


def ingest_body(runs: Sequence[bytes]) -> bytes:
    """Return the ProbeRunBatch JSON body of runs already encoded as JSON."""
    return b'{"runs":[' + b",".join(runs) + b"]}"


def batches(
    runs: Sequence[bytes], *, max_bytes: int = PUSH_BATCH_BYTES, max_runs: int = MAX_BATCH_RUNS
) -> Iterator[Sequence[bytes]]:
    """Split encoded runs into batches of at most `max_runs` runs and about `max_bytes` bytes."""
    start = size = 0
    for end, run in enumerate(runs):
        if end > start and (size + len(run) > max_bytes or end - start >= max_runs):
            yield runs[start:end]
            start, size = end, 0
        size += len(run)
    if start < len(runs):
        yield runs[start:]


def summed(results: Sequence[IngestResult]) -> IngestResult:
    """Return the IngestResult of several batches as if they had been one."""
    return IngestResult(
        accepted=sum(r.accepted for r in results),
        duplicates=sum(r.duplicates for r in results),
        measurements=sum(r.measurements for r in results),
        duplicate_run_ids=[i for r in results for i in r.duplicate_run_ids],
        runs=[run for r in results for run in r.runs],
    )


class ServiceClient:
    """Call the service's API: push runs, read priors, train, manage models and tokens.

    `http` carries the base URL, the default timeout and the transport (tests pass
    `httpx.MockTransport`); every failure is raised as a `client.errors.ClientError`.
    """

    def __init__(
        self,
        http: httpx.Client,
        *,
        token: str | None = None,
        compresslevel: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http = http
        self.token = token
        self.compresslevel = compresslevel
        self.clock = clock
        self._owns_http = False

    @classmethod
    def connect(
        cls,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> Self:
        """Return a client with an HTTP connection pool of its own, closed with the client."""
        http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport)
        client = cls(http, token=token)
        client._owns_http = True
        return client

    def close(self) -> None:
        """Close the connection pool if this client opened it."""
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Operations

    def ready(self) -> None:
        """Return when the service can serve (its database answers); else raise ClientError."""
        self.request("GET", "/readyz")

    # Ingest

    def push_encoded(self, runs: Sequence[bytes]) -> IngestResult:
        """Push runs already encoded as JSON in one gzipped, all-or-nothing batch."""
        body = gzip.compress(ingest_body(runs), self.compresslevel)
        return self._parse(IngestResult, self.push_body(body, gzipped=True))

    def push_body(self, body: bytes, *, gzipped: bool = False) -> httpx.Response:
        """Send a ready ProbeRunBatch body as it is; return the 2xx answer unparsed.

        The ingest benchmarks encode their batches before the clock starts, so that what they
        time is the service.
        """
        headers = {**JSON, "Content-Encoding": "gzip"} if gzipped else JSON
        return self.request("POST", "/v1/probe-runs", content=body, headers=headers)

    def push(
        self,
        runs: Sequence[ProbeRun],
        *,
        max_bytes: int = PUSH_BATCH_BYTES,
        max_runs: int = MAX_BATCH_RUNS,
    ) -> IngestResult:
        """Push runs in as many batches as the service's limits need; return the summed result.

        Each batch is all or nothing; batches sent before a failure stay stored (ingest is
        idempotent by run id, so pushing the same runs again is safe).
        """
        encoded = [run.model_dump_json().encode() for run in runs]
        parts = batches(encoded, max_bytes=max_bytes, max_runs=max_runs)
        return summed([self.push_encoded(batch) for batch in parts])

    def probe_run(self, run_id: UUID) -> ProbeRun:
        """Read a stored probe run back."""
        return self._parse(ProbeRun, self.request("GET", f"/v1/probe-runs/{run_id}"))

    # Priors

    def prior(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        *,
        limit: int = 8,
        timeout: float | None = None,
        offered: Sequence[Candidate] | None = None,
    ) -> Prior:
        """Return the ranked candidates for `problem` on `hardware`; with `offered`, among
        those only (the candidates this host can run for it)."""
        request = PriorRequest(
            hardware=hardware,
            problem=problem,
            limit=limit,
            offered=list(offered) if offered is not None else None,
        )
        # without an offer, the body an older service takes too
        body = request.model_dump_json(exclude={"offered"} if offered is None else None)
        response = self.request("POST", "/v1/priors", content=body, headers=JSON, timeout=timeout)
        return self._parse(Prior, response)

    def prior_by_ids(self, hardware_id: str, problem_hash: str, *, limit: int = 8) -> Prior:
        """Return the prior of a stored (hardware, problem), named by the ids ingest returned."""
        params = {"hardware_id": hardware_id, "problem": problem_hash, "limit": limit}
        return self._parse(Prior, self.request("GET", "/v1/priors", params=params))

    def priors(
        self,
        hardware: HardwareSpec,
        problems: Sequence[ProblemKey],
        *,
        limit: int = 8,
        timeout: float | None = None,
    ) -> list[Prior]:
        """Return one prior per problem, in their order, in as few requests as the limits allow."""
        found: list[Prior] = []
        for start in range(0, len(problems), MAX_PRIOR_IDS):
            chunk = list(problems[start : start + MAX_PRIOR_IDS])
            body = PriorBatchRequest(hardware=hardware, problems=chunk, limit=limit)
            response = self.request(
                "POST",
                "/v1/priors/batch",
                content=body.model_dump_json(),
                headers=JSON,
                timeout=timeout,
            )
            found.extend(self._parse(PriorBatch, response).priors)
        return found

    # Fleet

    def hardware(self) -> list[HardwareEntry]:
        """Return the hardware the fleet has pushed runs from."""
        return self._parse_list(HardwareEntry, self.request("GET", "/v1/hardware"))

    def stats(self) -> FleetStats:
        """Return what the service stores, in all and for the caller's organisation."""
        return self._parse(FleetStats, self.request("GET", "/v1/stats"))

    # Training

    def retrain(self, params: Mapping[str, Any] | None = None) -> RetrainAccepted:
        """Queue a training job (admin) with `params` (the service's RetrainParams)."""
        response = self.request("POST", "/v1/admin/retrain", json=dict(params or {}))
        return self._parse(RetrainAccepted, response)

    def job(self, job_id: UUID) -> Job:
        """Return a training job's state and metrics."""
        return self._parse(Job, self.request("GET", f"/v1/admin/jobs/{job_id}"))

    def jobs(self) -> list[Job]:
        """Return the training jobs, newest first."""
        return self._parse_list(Job, self.request("GET", "/v1/admin/jobs"))

    def cancel_job(self, job_id: UUID) -> Job:
        """Cancel a queued job."""
        return self._parse(Job, self.request("POST", f"/v1/admin/jobs/{job_id}/cancel"))

    def wait_for_job(
        self,
        job_id: UUID,
        *,
        timeout_s: float = 600.0,
        poll_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Job:
        """Poll a job until it ends (succeeded, rejected, failed, cancelled); return it."""
        deadline = clock() + timeout_s
        while True:
            job = self.job(job_id)
            if job.state in TERMINAL_JOB_STATES:
                return job
            if clock() >= deadline:
                raise JobTimeout(f"training job {job_id} not done after {timeout_s:.0f} s")
            sleep(poll_s)

    # Models

    def models(self) -> list[ModelVersion]:
        """Return the registered model versions with their metrics."""
        return self._parse_list(ModelVersion, self.request("GET", "/v1/models"))

    def model(self, version: int) -> ModelVersion:
        """Return one model version."""
        return self._parse(ModelVersion, self.request("GET", f"/v1/models/{version}"))

    def activate(self, version: int) -> ModelVersion:
        """Serve model `version` from now on (operator)."""
        response = self.request("POST", f"/v1/models/{version}/activate")
        return self._parse(ModelVersion, response)

    # Tokens

    def create_token(
        self, *, role: str, org: str | None = None, name: str | None = None
    ) -> IssuedToken:
        """Issue a token of `role` ("agent" or "admin"); its secret is shown only here."""
        body = {"role": role, "org": org, "name": name}
        response = self.request(
            "POST", "/v1/tokens", json={k: v for k, v in body.items() if v is not None}
        )
        return self._parse(IssuedToken, response)

    def tokens(self) -> list[TokenInfo]:
        """Return the tokens the caller may see, oldest first."""
        return self._parse_list(TokenInfo, self.request("GET", "/v1/tokens"))

    def revoke_token(self, token_id: int) -> TokenInfo:
        """Revoke a token at once."""
        return self._parse(TokenInfo, self.request("POST", f"/v1/tokens/{token_id}/revoke"))

    # Transport

    def request(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one request with the token; return a 2xx answer or raise its ClientError."""
        sent = dict(headers or {})
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        extra: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        try:
            response = self.http.request(method, path, headers=sent, **extra, **kwargs)
        except httpx.TransportError as exc:
            raise transport_error(exc, timeout=timeout) from exc
        if not response.is_success:
            raise error_for(response, now=self.clock())
        return response

    def _parse(self, model: type[Model], response: httpx.Response) -> Model:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise self._bad_answer(model.__name__, response) from exc

    def _parse_list(self, model: type[Model], response: httpx.Response) -> list[Model]:
        try:
            return TypeAdapter(list[model]).validate_json(response.content)  # type: ignore[valid-type]
        except ValidationError as exc:
            raise self._bad_answer(f"a list of {model.__name__}", response) from exc

    @staticmethod
    def _bad_answer(expected: str, response: httpx.Response) -> ClientError:
        return BadAnswer(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code} with a body that is not {expected}",
            status=response.status_code,
        )
