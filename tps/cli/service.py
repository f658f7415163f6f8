"""Commands of the service: serve, demo, worker, db, token, bench.

The service's modules are imported inside the commands, so `tps --help` works with only
the core installed.
"""

from __future__ import annotations

import json
import logging
import os
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

console = Console()

# Other domains add their benchmarks here: `service.bench_app.command("priors")(...)`.
bench_app = typer.Typer(no_args_is_help=True, help="Measure the service (and other parts).")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Postgres URL; default TPS_DATABASE_URL, else the embedded server",
        show_default=False,
    ),
]


class RoleName(StrEnum):
    agent = "agent"
    admin = "admin"
    operator = "operator"


def _database_url(url: str | None) -> str:
    from services.profiler_api.db import resolve_database_url
    from services.profiler_api.settings import Settings

    settings = Settings()
    if url:
        settings = settings.model_copy(update={"database_url": url})
    return resolve_database_url(settings)


def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes")] = 1,
    migrate: Annotated[
        bool | None,
        typer.Option(help="upgrade the schema first (default: only on the embedded server)"),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Run the TPS service (FastAPI on uvicorn); OpenAPI docs at /docs."""
    import uvicorn

    from services.profiler_api import migrate as migrations
    from services.profiler_api.metrics import multiprocess_env
    from services.profiler_api.server import PROTOCOL

    embedded = not (database_url or os.environ.get("TPS_DATABASE_URL"))
    url = _database_url(database_url)
    if migrate if migrate is not None else embedded:
        migrations.upgrade(url)
    os.environ["TPS_DATABASE_URL"] = url  # the workers read it through Settings
    os.environ.update(multiprocess_env(workers))
    console.print(f"TPS service on http://{host}:{port} (docs at /docs)")
    uvicorn.run(
        "services.profiler_api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        http=PROTOCOL,
    )


def demo() -> None:
    """Start a service on the embedded Postgres, push probe runs, and read priors back."""
    from services.profiler_api.demo import DEMO_STEPS, run_demo
    from services.profiler_api.training.demo import ModelDemo
    from tps.cli.demo_agent import AGENT_STEPS

    titles = [title for title, _ in DEMO_STEPS]
    at = titles.index("read priors") + 1
    model = ModelDemo()
    run_demo(console, steps=DEMO_STEPS[:at] + AGENT_STEPS + DEMO_STEPS[at:] + model.steps())
    if model.plot_written:
        console.print(f"score@k plot: [bold]{model.plot_written}")


def db_upgrade(
    revision: Annotated[str, typer.Argument(help="target revision")] = "head",
    database_url: DatabaseUrl = None,
) -> None:
    """Upgrade the database schema (Alembic)."""
    from services.profiler_api import migrate

    url = _database_url(database_url)
    migrate.upgrade(url, revision)
    console.print(f"schema at {migrate.current(url) or 'base'}")


def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision, e.g. -1 or base")] = "-1",
    database_url: DatabaseUrl = None,
) -> None:
    """Downgrade the database schema (Alembic)."""
    from services.profiler_api import migrate

    url = _database_url(database_url)
    migrate.downgrade(url, revision)
    console.print(f"schema at {migrate.current(url) or 'base'}")


def db_current(database_url: DatabaseUrl = None) -> None:
    """Print the schema revision of the database."""
    from services.profiler_api import migrate

    console.print(migrate.current(_database_url(database_url)) or "base (no schema)")


def token_create(
    org: Annotated[str, typer.Option(help="organisation; created when new")],
    role: Annotated[
        RoleName,
        typer.Option(
            help="agent: ingest and read; admin: its organisation's tokens, runs and jobs; "
            "operator: every organisation and model activation (only created here)"
        ),
    ],
    name: Annotated[str | None, typer.Option(help="a label for the token")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a bearer token and print it once; only its hash is stored."""
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.service import Role, create_token
    from services.profiler_api.db import make_engine
    from services.profiler_api.settings import Settings

    engine = make_engine(_database_url(database_url), Settings())
    try:
        with Session(engine) as session, session.begin():
            token = create_token(session, org=org, role=Role(role.value), name=name)
    finally:
        engine.dispose()
    console.print(f"[dim]{role.value} token for {org} (shown once):[/dim]", highlight=False)
    typer.echo(token)


def token_list(
    org: Annotated[str | None, typer.Option(help="only this organisation's tokens")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """List tokens (id, organisation, role, name, created, revoked); never the tokens."""
    from rich.table import Table
    from sqlalchemy.orm import Session

    from services.profiler_api.auth import repository
    from services.profiler_api.db import make_engine
    from services.profiler_api.settings import Settings

    engine = make_engine(_database_url(database_url), Settings())
    try:
        with Session(engine) as session:
            rows = repository.list_tokens(session, org=org, limit=100_000)
    finally:
        engine.dispose()
    table = Table("id", "org", "role", "name", "created", "revoked")
    for row in rows:
        table.add_row(
            str(row.id), row.org, row.role, row.name or "", f"{row.created_at:%Y-%m-%d %H:%M}",
            f"{row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "",
        )  # fmt: skip
    console.print(table)


def token_revoke(
    token_id: Annotated[int, typer.Argument(min=1, help="the id `tps token list` shows")],
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke a token; every running replica refuses it as the revocation commits."""
    from sqlalchemy.orm import Session

    from services.profiler_api.auth import repository
    from services.profiler_api.db import make_engine
    from services.profiler_api.settings import Settings

    engine = make_engine(_database_url(database_url), Settings())
    try:
        with Session(engine) as session, session.begin():
            row = repository.revoke_token(session, token_id, org=None)
    finally:
        engine.dispose()
    if row is None:
        console.print(f"[red]no token {token_id}")
        raise typer.Exit(1)
    console.print(f"token {row.id} ({row.role} of {row.org}) revoked at {row.revoked_at}")


def bench_ingest(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    database_url: DatabaseUrl = None,
    runs: Annotated[int, typer.Option(min=1, help="probe runs to push")] = 6000,
    clients: Annotated[int, typer.Option(min=1, help="concurrent HTTP clients")] = 4,
    batch_runs: Annotated[int, typer.Option(min=1, max=1000, help="runs per request")] = 200,
    workers: Annotated[int, typer.Option(min=1, help="service worker processes")] = 2,
    gzip: Annotated[bool, typer.Option(help="gzip the request bodies")] = False,
    seed: Annotated[int, typer.Option(help="seed of the generated fleet")] = 0,
) -> None:
    """Time ingest over HTTP against a raw COPY of the same rows into the same tables."""
    if as_json:  # stdout carries the JSON object only
        logging.getLogger().setLevel(logging.WARNING)
    from services.profiler_api.bench import IngestBenchConfig, run_ingest_bench

    config = IngestBenchConfig(
        runs=runs, clients=clients, batch_runs=batch_runs, workers=workers, gzip=gzip, seed=seed
    )
    result = run_ingest_bench(_database_url(database_url), config, log=None if as_json else console)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        console.print_json(data=result)


def bench_priors(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    database_url: DatabaseUrl = None,
    requests: Annotated[int, typer.Option(min=1, help="repeated queries to time")] = 400,
    first_requests: Annotated[
        int, typer.Option(min=1, help="queries for a new fingerprint each (model from scratch)")
    ] = 40,
    holdout: Annotated[str, typer.Option(help="GPU kept out of training")] = "W7800",
    max_candidates: Annotated[int, typer.Option(min=10, help="candidates per op")] = 1000,
    n_estimators: Annotated[int, typer.Option(min=1, help="trees per booster")] = 100,
) -> None:
    """Time POST /v1/priors answered from the model, for a GPU the model never saw."""
    if as_json:
        logging.getLogger().setLevel(logging.WARNING)
    from services.profiler_api.bench_priors import PriorsBenchConfig, run_priors_bench

    config = PriorsBenchConfig(
        requests=requests,
        first_requests=first_requests,
        holdout=holdout,
        max_candidates=max_candidates,
        n_estimators=n_estimators,
    )
    result = run_priors_bench(_database_url(database_url), config, log=None if as_json else console)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        console.print_json(data=result)


def bench_sustained(
    database_url: DatabaseUrl = None,
    duration_s: Annotated[float, typer.Option(min=1, help="seconds at the held rate")] = 600,
    fraction: Annotated[float, typer.Option(min=0.01, max=1, help="of the maximum")] = 0.5,
    workers: Annotated[int, typer.Option(min=1, help="service worker processes")] = 2,
    clients: Annotated[int, typer.Option(min=1, help="concurrent HTTP clients")] = 4,
) -> None:
    """Measure the maximum ingest rate, hold half of it for ten minutes; print JSON."""
    logging.getLogger().setLevel(logging.WARNING)
    from services.profiler_api.bench_sustained import SustainedConfig, run_sustained_bench

    config = SustainedConfig(
        duration_s=duration_s, fraction=fraction, workers=workers, clients=clients
    )
    typer.echo(json.dumps(run_sustained_bench(_database_url(database_url), config)))


def bench_fuzz(
    database_url: DatabaseUrl = None,
    max_examples: Annotated[int, typer.Option(min=1, help="cases per operation and phase")] = 300,
    seed: Annotated[int, typer.Option(help="Schemathesis seed")] = 1,
    workers: Annotated[int, typer.Option(min=1, help="concurrent fuzzing workers")] = 2,
    max_time_s: Annotated[
        int | None, typer.Option(min=1, help="time budget per role, seconds")
    ] = None,
) -> None:
    """Fuzz the API with Schemathesis (every check) as an agent and an admin; print JSON."""
    logging.getLogger().setLevel(logging.WARNING)
    from services.profiler_api.fuzz import FuzzConfig, run_api_fuzz, unexplained

    config = FuzzConfig(
        max_examples=max_examples, seed=seed, workers=workers, max_time_s=max_time_s
    )
    result = run_api_fuzz(_database_url(database_url), config)
    for role in ("agent", "admin"):
        result[role]["unexplained"] = unexplained(result[role])
    typer.echo(json.dumps(result))


def worker(
    database_url: DatabaseUrl = None,
    once: Annotated[bool, typer.Option(help="run at most one job, then exit")] = False,
) -> None:
    """Run training jobs from the queue (as the service's worker thread does)."""
    import threading

    from services.profiler_api.db import make_engine, make_session_factory
    from services.profiler_api.settings import Settings
    from services.profiler_api.training.worker import TrainingWorker

    settings = Settings()
    engine = make_engine(_database_url(database_url), settings)
    training = TrainingWorker(make_session_factory(engine), settings=settings)
    try:
        if once:
            job = training.run_once()
            console.print(f"ran job {job}" if job else "no queued job")
            return
        console.print("training worker: waiting for jobs (Ctrl-C stops)")
        training.run(threading.Event())
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()


def register(app: typer.Typer) -> None:
    """Add this domain's commands to `app`."""
    app.command()(serve)
    app.command()(demo)
    app.command()(worker)
    db_app = typer.Typer(no_args_is_help=True, help="Manage the database schema.")
    db_app.command("upgrade")(db_upgrade)
    db_app.command("downgrade")(db_downgrade)
    db_app.command("current")(db_current)
    app.add_typer(db_app, name="db")
    token_app = typer.Typer(no_args_is_help=True, help="Manage bearer tokens.")
    token_app.command("create")(token_create)
    token_app.command("list")(token_list)
    token_app.command("revoke")(token_revoke)
    app.add_typer(token_app, name="token")
    bench_app.command("ingest")(bench_ingest)
    bench_app.command("priors")(bench_priors)
    bench_app.command("fuzz")(bench_fuzz)
    bench_app.command("sustained")(bench_sustained)
    app.add_typer(bench_app, name="bench")
