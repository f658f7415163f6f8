"""POST /v1/probe-runs."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from services.profiler_api.deps import AgentDep, MetricsDep, ParsePoolDep, SessionDep, SettingsDep
from services.profiler_api.errors import APIError
from services.profiler_api.examples import INGEST_RESPONSE, PROBE_RUNS_REQUEST, json_examples
from services.profiler_api.ingest import service
from services.profiler_api.ingest.body import check_encoding, read_raw
from services.profiler_api.ingest.readback import load_run
from tps.schemas import MAX_BATCH_RUNS, IngestResult, ProbeRun

router = APIRouter(prefix="/v1", tags=["ingest"])

# The body is read and validated by hand (size limits, gzip), so FastAPI does not see the
# model; describe it for /docs, pointing at the ProbeRun schema the GET route publishes.
_BATCH_SCHEMA = {
    "title": "ProbeRunBatch",
    "type": "object",
    "additionalProperties": False,
    "required": ["runs"],
    "properties": {
        "runs": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_BATCH_RUNS,
            "items": {"$ref": "#/components/schemas/ProbeRun"},
        }
    },
}


@router.post(
    "/probe-runs",
    response_model=IngestResult,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _BATCH_SCHEMA, "examples": PROBE_RUNS_REQUEST}
            },
        }
    },
    responses={200: {"content": json_examples(INGEST_RESPONSE)}},
    summary="Store a batch of probe runs (idempotent by run id, all or nothing)",
)
async def post_probe_runs(
    request: Request,
    session: SessionDep,
    principal: AgentDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    parse_pool: ParsePoolDep,
) -> IngestResult:
    """Store up to 1000 probe runs; JSON, optionally gzip-encoded (`Content-Encoding: gzip`;
    concatenated members are one body; 32 MiB once inflated).

    The answer names each run's hardware id (fingerprint) and problem hash: the ids that
    GET /v1/priors and GET /v1/probe-runs/{id} take.
    """
    limit = settings.max_body_bytes
    try:
        encoding = check_encoding(request.headers.get("content-encoding"))
        chunks = await read_raw(
            request.stream(), limit=limit, content_length=request.headers.get("content-length")
        )
        metrics.ingest_bytes.labels("received").inc(sum(map(len, chunks)))
        # Inflating and validating are CPU work: in the parse processes, off this process's
        # interpreter; writing is database work, on a worker thread.
        parsed = await parse_pool.plan(
            chunks, encoding=encoding, limit=limit, org_id=principal.org_id
        )
        metrics.ingest_bytes.labels("inflated").inc(parsed.inflated_bytes)
        result = await run_in_threadpool(service.store_parsed, session, parsed, metrics=metrics)
    except APIError as exc:
        metrics.ingest_rejected.labels(str(exc.status_code)).inc()
        raise
    metrics.ingest_runs.labels("accepted").inc(result.accepted)
    metrics.ingest_runs.labels("duplicate").inc(result.duplicates)
    metrics.ingest_measurements.inc(result.measurements)
    return result


@router.get("/probe-runs/{run_id}", response_model=ProbeRun, summary="Read a stored probe run back")
def get_probe_run(run_id: uuid.UUID, session: SessionDep, principal: AgentDep) -> ProbeRun:
    """Return a probe run sent by the caller's organisation (any run for an admin)."""
    return load_run(session, run_id, principal=principal)
