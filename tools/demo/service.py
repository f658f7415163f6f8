"""`tps demo`: the whole job end to end, as a list of steps.

Each step takes the shared DemoContext and adds to it; a step that cannot do its part raises,
and the demo stops there (`DemoFailed`), never reporting done. The demo works in a database of
its own (`tps_demo`, made afresh on each run on the configured or embedded server), so that
whatever else that server holds, its organisation, runs and model lineage are the demo's alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from client import ServiceClient
from models.data_files import read_probe_runs_jsonl
from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, recreate_database
from services.profiler_api.settings import Settings
from tools.embedded_postgres import database_url_or_embedded
from tools.local_service import quiet_client_logs, running_service
from tools.settings import LocalSettings
from tps.errors import TPSError
from tps.schemas import Prior, ProbeRun

DEMO_ORG = "demo"
DEMO_DATABASE = "tps_demo"
DEFAULT_OUTPUT = Path("tps-demo")
# Real measurements shipped with the checkout (see benchmarks/data/README.md).
H200_DATASET = Path(__file__).resolve().parents[2] / "benchmarks/data/gemm_h200_probe_runs.jsonl.gz"
DEMO_BATCH = 100


@dataclass
class DemoContext:
    """What the steps share: where the service is, the tokens, and what was pushed."""

    console: Console
    stack: ExitStack
    settings: Settings = field(default_factory=Settings)
    local: LocalSettings = field(default_factory=LocalSettings)
    database_name: str = DEMO_DATABASE
    output_dir: Path = DEFAULT_OUTPUT
    database_url: str = ""
    base_url: str = ""
    tokens: dict[Role, str] = field(default_factory=dict)
    runs: list[ProbeRun] = field(default_factory=list)

    @contextmanager
    def client(self, role: Role = Role.AGENT) -> Iterator[ServiceClient]:
        """Yield a client of the running service with the token of `role`."""
        with ServiceClient.connect(
            self.base_url, token=self.tokens[role], timeout_s=60.0
        ) as client:
            yield client


DemoStep = Callable[[DemoContext], None]


class DemoFailed(TPSError):
    """A step of the demo could not do its part; the demo stops there."""


def start_database(ctx: DemoContext) -> None:
    """Make the demo's own database on TPS_DATABASE_URL's server or the embedded one."""
    server_url = database_url_or_embedded(ctx.settings, ctx.local)
    try:
        ctx.database_url = recreate_database(server_url, ctx.database_name)
    except (psycopg.Error, ValueError) as exc:
        raise DemoFailed(
            f"could not make the demo's own database {ctx.database_name!r} on the Postgres "
            f"server: {exc}"
        ) from exc
    migrate.upgrade(ctx.database_url)
    where = (
        "TPS_DATABASE_URL's server"
        if ctx.settings.database_url
        else f"embedded, {ctx.local.data_dir}"
    )
    ctx.console.print(
        f"Postgres ready ({where}); database {ctx.database_name!r} made afresh for the demo, "
        f"schema at {migrate.current(ctx.database_url)}"
    )


def create_tokens(ctx: DemoContext) -> None:
    """Create an agent and an admin token for the demo organisation."""
    engine = make_engine(ctx.database_url, ctx.settings)
    try:
        with Session(engine) as session, session.begin():
            for role in Role:
                ctx.tokens[role] = create_token(session, org=DEMO_ORG, role=role, name="tps demo")
    finally:
        engine.dispose()
    ctx.console.print(f"tokens for organisation {DEMO_ORG!r}: agent and admin (stored hashed)")


def start_service(ctx: DemoContext) -> None:
    """Run the service on a free local port until the demo ends."""
    service = ctx.stack.enter_context(running_service(ctx.database_url))
    ctx.base_url = service.base_url
    ctx.console.print(f"service at {ctx.base_url} (OpenAPI at {ctx.base_url}/docs)")


def push_probe_runs(ctx: DemoContext) -> None:
    """Push the measured H200 GEMM dataset over HTTP, gzip-encoded, in batches."""
    if not H200_DATASET.is_file():
        raise DemoFailed(f"no measured dataset at {H200_DATASET} (shipped with the checkout)")
    ctx.runs = list(read_probe_runs_jsonl(H200_DATASET))
    with ctx.client() as client:
        result = client.push(ctx.runs, max_runs=DEMO_BATCH)
    ctx.console.print(
        f"pushed {len(ctx.runs)} probe runs measured on an H200 ({H200_DATASET.name}): "
        f"{result.accepted} accepted ({result.measurements} measurements), "
        f"{result.duplicates} duplicates"
    )


def read_priors(ctx: DemoContext) -> None:
    """Read ranked candidates back for a few (hardware, problem) pairs the fleet probed."""
    seen: dict[tuple[str, str], list[ProbeRun]] = {}
    for run in ctx.runs:
        seen.setdefault((run.hardware.fingerprint(), run.problem.key_hash()), []).append(run)
    pairs = sorted(seen.items(), key=lambda item: -len(item[1]))[:3]
    with ctx.client() as client:
        for (fingerprint, problem_hash), runs in pairs:
            prior = client.prior_by_ids(fingerprint, problem_hash, limit=5)
            ctx.console.print(_prior_table(prior, runs[0]))


def show_stats(ctx: DemoContext) -> None:
    """Print what the service holds."""
    with ctx.client() as client:
        stats = client.stats()
    ctx.console.print(
        f"service holds {stats.runs} runs, {stats.measurements} measurements, "
        f"{stats.hardware} hardware, {stats.problems} problems"
    )


DEMO_STEPS: list[tuple[str, DemoStep]] = [
    ("start Postgres", start_database),
    ("create tokens", create_tokens),
    ("start the service", start_service),
    ("push probe runs", push_probe_runs),
    ("read priors", read_priors),
    ("show stats", show_stats),
]


def add_demo_step(title: str, step: DemoStep, *, after: str | None = None) -> None:
    """Insert a step after the one titled `after` (at the end when None)."""
    titles = [t for t, _ in DEMO_STEPS]
    index = titles.index(after) + 1 if after is not None else len(DEMO_STEPS)
    DEMO_STEPS.insert(index, (title, step))


def run_demo(
    console: Console,
    *,
    settings: Settings | None = None,
    local: LocalSettings | None = None,
    steps: list[tuple[str, DemoStep]] | None = None,
    database: str = DEMO_DATABASE,
    output_dir: Path = DEFAULT_OUTPUT,
) -> DemoContext:
    """Run the demo's steps in order; the service stops when they are done.

    Raises DemoFailed, naming the step, when one fails; "demo done" means every step did its part.
    """
    quiet_client_logs()
    steps = DEMO_STEPS if steps is None else steps
    with ExitStack() as stack:
        ctx = DemoContext(
            console=console,
            stack=stack,
            settings=settings or Settings(),
            local=local or LocalSettings(),
            database_name=database,
            output_dir=output_dir,
        )
        for number, (title, step) in enumerate(steps, start=1):
            console.rule(f"[bold]{number}. {title}")
            try:
                step(ctx)
            except Exception as exc:
                console.rule(f"[bold red]demo failed at step {number}: {title}")
                raise DemoFailed(f"step {number} ({title}): {exc}") from exc
        console.rule("[bold green]demo done")
        return ctx


def _prior_table(prior: Prior, run: ProbeRun) -> Table:
    table = Table(
        title=f"{run.hardware.name}: {prior.canonical}",
        caption=f"source: {prior.source}" if prior.candidates else prior.reason,
    )
    for column in ("rank", "candidate", "median µs", "runs", "samples", "confidence"):
        if column == "candidate":
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, justify="right")
    for candidate in prior.candidates:
        table.add_row(
            str(candidate.rank),
            candidate.candidate.label(),
            f"{candidate.median_us:.2f}" if candidate.median_us else "-",
            str(candidate.runs),
            str(candidate.samples),
            f"{candidate.confidence:.2f}",
        )
    return table
