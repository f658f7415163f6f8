"""Commands of the service: serve, demo, worker, db, token, bench.

The service's modules are imported inside the commands, so `tps --help` works with only
the core installed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
# Words about the output go to stderr where stdout carries a value a script reads.
notes = Console(stderr=True)

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
    from services.profiler_api.db import sqlalchemy_url
    from services.profiler_api.settings import Settings
    from tps.errors import TPSError

    settings = Settings()
    if url or settings.database_url:
        return sqlalchemy_url(url or settings.database_url or "")
    try:
        from tools.embedded_postgres import start_embedded
        from tools.settings import LocalSettings
    except ModuleNotFoundError as exc:  # an image carries the service, never the tools
        raise TPSError(
            "TPS_DATABASE_URL is unset and the embedded Postgres is not installed: "
            "set TPS_DATABASE_URL, or run from a checkout with pip install -e '.[local]'"
        ) from exc
    return start_embedded(LocalSettings().data_dir)


def check_port_free(host: str, port: int) -> None:
    """Exit with a clear message when `host:port` cannot be bound (in use, or not ours)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc}"
            console.print(
                f"[red]error:[/red] port {port} on {host} {why}; "
                "stop what holds it or choose another with --port"
            )
            raise typer.Exit(1) from None


def _exit_on_signal(signum: int, _frame: object) -> None:
    # uvicorn shuts down gracefully on SIGTERM or SIGINT, then raises the signal again: exiting
    # (rather than dying of it) runs the exit handlers, which stop the embedded Postgres.
    raise SystemExit(0)


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
    """Run the TPS service (FastAPI on uvicorn); OpenAPI docs at /docs.

    With no TPS_DATABASE_URL it starts the embedded Postgres, and stops it on Ctrl-C or SIGTERM.

    Examples:
      tps serve
      TPS_DATABASE_URL=postgresql://tps@db/tps tps serve --host 0.0.0.0 --workers 4
    """
    import uvicorn

    from services.profiler_api import migrate as migrations
    from services.profiler_api.metrics import MULTIPROC_ENV, multiprocess_env
    from services.profiler_api.server import PROTOCOL

    check_port_free(host, port)
    for stop in (signal.SIGTERM, signal.SIGINT):  # from here on, a stop runs the exit handlers
        signal.signal(stop, _exit_on_signal)
    embedded = not (database_url or os.environ.get("TPS_DATABASE_URL"))
    url = _database_url(database_url)
    if embedded:
        from tools.settings import LocalSettings

        console.print(f"Postgres: embedded, data in {LocalSettings().data_dir}", highlight=False)
    if migrate if migrate is not None else embedded:
        migrations.upgrade(url)
        console.print(f"schema at {migrations.current(url)}", highlight=False)
    os.environ["TPS_DATABASE_URL"] = url  # the workers read it through Settings
    metrics_env = multiprocess_env(workers)
    own_metrics_dir = metrics_env.get(MULTIPROC_ENV) if MULTIPROC_ENV not in os.environ else None
    os.environ.update(metrics_env)
    console.print(
        f"TPS service on http://{host}:{port} (docs at /docs); Ctrl-C or SIGTERM stops it",
        highlight=False,
    )
    verbose = logging.getLogger().isEnabledFor(logging.DEBUG)
    try:
        uvicorn.run(
            "services.profiler_api.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            access_log=False,
            log_level="info" if verbose else "warning",
            http=PROTOCOL,
        )
    finally:
        if own_metrics_dir:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
        console.print("TPS service stopped", highlight=False)


def demo(
    out: Annotated[
        Path,
        typer.Option(help="folder for what the demo writes (the score@k plot, the agents' caches)"),
    ] = Path("tps-demo"),
    database: Annotated[
        str, typer.Option(help="the demo's own database, dropped and made afresh on each run")
    ] = "tps_demo",
) -> None:
    """Run the whole job end to end: service, agents, priors, a model for an unseen GPU.

    Uses the server of TPS_DATABASE_URL, else the embedded Postgres, in a database of its own.
    Exits non-zero, naming the step, when a step fails. TPS_KERNEL_TUNER_DATA: other caches.

    Examples:
      tps demo
      TPS_KERNEL_TUNER_DATA=~/kernel-tuner-caches tps demo --out ~/tps-demo
    """
    from cli.demo_agent import AGENT_STEPS
    from tools.demo.model import ModelDemo
    from tools.demo.service import DEMO_STEPS, DemoFailed, run_demo

    titles = [title for title, _ in DEMO_STEPS]
    at = titles.index("read priors") + 1
    model = ModelDemo()
    steps = DEMO_STEPS[:at] + AGENT_STEPS + DEMO_STEPS[at:] + model.steps()
    try:
        run_demo(console, steps=steps, database=database, output_dir=out)
    except DemoFailed as exc:
        console.print(f"[red]demo failed:[/red] {exc}", highlight=False)
        if logging.getLogger().isEnabledFor(logging.DEBUG) and exc.__cause__ is not None:
            console.print_exception()
        raise typer.Exit(1) from None
    console.print(f"score@k plot: [bold]{model.plot_written}", highlight=False)


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


def db_maintain(
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="drop raw measurements older than this; default TPS_MEASUREMENT_RETENTION_DAYS",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create the coming days' measurement partitions and drop the days past retention."""
    from services.profiler_api.db import make_engine, make_session_factory
    from services.profiler_api.fleet.retention import PartitionMaintainer
    from services.profiler_api.settings import Settings

    settings = Settings()
    engine = make_engine(_database_url(database_url), settings)
    try:
        done = PartitionMaintainer(
            make_session_factory(engine),
            retention_days=retention_days or settings.measurement_retention_days,
            interval_s=settings.partition_maintenance_s,
        ).run_once()
    finally:
        engine.dispose()
    if not done.ran:
        console.print("another replica is maintaining the partitions right now")
        return
    console.print(
        f"{done.created} day partitions created; {done.dropped_rows} measurements dropped"
    )


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
    """Create a bearer token and print it once (alone on stdout); only its hash is stored.

    Agent tokens push probe runs and read priors; admin tokens also retrain and manage models.

    Examples:
      tps token create --org acme --role admin
      export TPS_AGENT_TOKEN=$(tps token create --org acme --role agent)
    """
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
    notes.print(f"[dim]{role.value} token for {org} (shown once):[/dim]", highlight=False)
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
    from tools.bench.ingest import IngestBenchConfig, run_ingest_bench

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
    measurements: Annotated[
        int, typer.Option(min=1000, help="size of the generated fleet, in measurements")
    ] = 1_000_000,
    workers: Annotated[int, typer.Option(min=1, help="service worker processes")] = 2,
    clients: Annotated[int, typer.Option(min=1, help="closed-loop concurrent clients")] = 50,
    rate: Annotated[float, typer.Option(min=1, help="open-loop requests per second")] = 500.0,
    seconds: Annotated[float, typer.Option(min=1, help="length of each loop")] = 10.0,
    hosts_per_job: Annotated[
        int, typer.Option(min=1, help="hosts that ask about each new GPU (model loop)")
    ] = 50,
    ingest_rate: Annotated[
        int, typer.Option(min=0, help="measurements/s pushed beside a second open loop")
    ] = 0,
    ingest_replica: Annotated[
        bool,
        typer.Option(help="push the ingest through a service process of its own (same Postgres)"),
    ] = False,
    ingest_nice: Annotated[
        int, typer.Option(min=0, max=19, help="that process's CPU niceness (TPS_CPU_NICE)")
    ] = 0,
    holdout: Annotated[str, typer.Option(help="GPU kept out of training")] = "W7800",
    reuse_model: Annotated[
        bool, typer.Option(help="activate the model kept from an earlier run of the same recipe")
    ] = True,
) -> None:
    """Time GET/POST /v1/priors under a closed and an open loop, on a generated fleet."""
    if as_json:
        logging.getLogger().setLevel(logging.WARNING)
    from tools.bench.priors import PriorsBenchConfig, run_priors_bench

    config = PriorsBenchConfig(
        measurements=measurements,
        workers=workers,
        clients=clients,
        closed_s=seconds,
        rate=rate,
        open_s=seconds,
        hosts_per_job=hosts_per_job,
        ingest_rate=ingest_rate,
        ingest_replica=ingest_replica,
        ingest_nice=ingest_nice,
        holdout=holdout,
        reuse_model=reuse_model,
    )
    result = run_priors_bench(_database_url(database_url), config, log=None if as_json else console)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        console.print_json(data=result)


def bench_train(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    rows: Annotated[
        int, typer.Option(min=100, help="training rows of the generated fleet")
    ] = 1_000_000,
    dask_workers: Annotated[
        int, typer.Option(min=0, help="train on a local Dask cluster of this many workers")
    ] = 0,
    seed: Annotated[int, typer.Option(help="seed of the rows' noise and of the model")] = 0,
) -> None:
    """Time training (both boosters and the shape families) on N generated rows."""
    if as_json:
        logging.getLogger().setLevel(logging.WARNING)
    from tools.bench.train import TrainBenchConfig, run_train_bench

    result = run_train_bench(TrainBenchConfig(rows=rows, dask_workers=dask_workers, seed=seed))
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
    from tools.bench.sustained import SustainedConfig, run_sustained_bench

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
    from tools.fuzz import FuzzConfig, run_api_fuzz, unexplained

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
    db_app.command("maintain")(db_maintain)
    app.add_typer(db_app, name="db")
    token_app = typer.Typer(no_args_is_help=True, help="Manage bearer tokens.")
    token_app.command("create")(token_create)
    token_app.command("list")(token_list)
    token_app.command("revoke")(token_revoke)
    app.add_typer(token_app, name="token")
    bench_app.command("ingest")(bench_ingest)
    bench_app.command("priors")(bench_priors)
    from cli.bench_runtime import bench_runtime, bench_runtime_overhead

    bench_app.command("runtime")(bench_runtime)
    bench_app.command("runtime-overhead")(bench_runtime_overhead)
    bench_app.command("train")(bench_train)
    bench_app.command("fuzz")(bench_fuzz)
    bench_app.command("sustained")(bench_sustained)
    app.add_typer(bench_app, name="bench")
