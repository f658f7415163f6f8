"""The TPS service: FastAPI on Postgres.

Layout (a package per domain, SQL in repositories, commit at the request boundary):

- `app.create_app(settings)`: the factory; `ROUTERS` lists the domains' routers.
- `settings.Settings`: TPS_* environment; `db`: engines, sessions, scratch databases.
- `deps`: `SessionDep` (commits when the handler returns), `AgentDep`, `AdminDep`.
- `errors`: `APIError` and its HTTP-status subclasses, rendered by one handler.
- `orm`: the typed tables; `migrations/` (Alembic) mirrors them, checked by a test.
- `ingest/`: POST /v1/probe-runs (body limits, validation, COPY, aggregates), readback.
- `priors/`: POST/GET /v1/priors; each source of priors (`observed`, `compiled`, the active
  model's `model` and `family`) is a `query.PriorBackend`, listed by name in `table.PRIOR_SOURCES`;
  TPS_PRIOR_SOURCES chooses which answer and in what order.
- `fleet/`: GET /v1/hardware, /v1/stats; `auth/`: tokens; `ops/`: health, metrics.
- `training/`: POST /v1/admin/retrain, GET /v1/admin/jobs[/{id}], POST .../{id}/cancel; the
  worker (a thread of each replica, or `tps worker`) claims jobs with SKIP LOCKED, trains on
  the stored measurements, and activates the model only if it passes the quality gate
  (`training.service`).
- `model_registry/`: GET /v1/models, POST /v1/models/{version}/activate; the active model,
  loaded once per replica and reloaded on activation (`model_registry.cache`).

The demo, the benchmarks, the synthetic fleet and the embedded Postgres live in `tools/`.
"""
