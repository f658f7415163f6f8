"""Commands of the model: import, evaluate, train.

models/ (lightgbm, pandas) and the service are imported inside the commands, so that
`tps --help` works with only the core installed.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import httpx

    from tps.schemas import IngestResult, ProbeRun

console = Console()
log = logging.getLogger(__name__)

DataPaths = Annotated[
    list[Path],
    typer.Option(
        "--data",
        help="Kernel Tuner caches (*.json, *.json.gz), ProbeRun files (*.jsonl, *.jsonl.gz) "
        "or directories holding them (searched recursively); repeat for several",
    ),
]
Seed = Annotated[int, typer.Option(help="seed of the model, the families and the baselines")]
NEstimators = Annotated[
    int | None, typer.Option(min=1, help="trees per booster (default: the model's)")
]
Threads = Annotated[
    int | None,
    typer.Option(min=1, help="LightGBM threads (1 is fastest on a box other jobs share)"),
]


def model_params(n_estimators: int | None, threads: int | None) -> dict[str, int] | None:
    """Return the LatencyModel parameters the options set (None: the model's defaults)."""
    params = {"n_estimators": n_estimators, "n_jobs": threads}
    return {k: v for k, v in params.items() if v is not None} or None


def push_runs(
    runs: list[ProbeRun],
    *,
    url: str,
    token: str,
    timeout_s: float = 120.0,
    transport: httpx.BaseTransport | None = None,
) -> IngestResult:
    """Push runs to the service in gzipped batches within its limits; return the summed result."""
    from client import ClientError, ServiceClient

    with ServiceClient.connect(url, token=token, timeout_s=timeout_s, transport=transport) as tps:
        try:
            return tps.push(runs)
        except ClientError as exc:
            raise typer.BadParameter(str(exc)) from exc


def ingest_into_database(runs: list[ProbeRun], *, database_url: str, org: str) -> IngestResult:
    """Store runs straight into the service's Postgres, as POST /v1/probe-runs would.

    Uses the service's own ingest (services.profiler_api.ingest): one all-or-nothing batch
    per call, idempotent by run id. The schema must be current (`tps db upgrade`).
    """
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.repository import upsert_organisation
    from services.profiler_api.db import make_engine, sqlalchemy_url
    from services.profiler_api.ingest.plan import IngestPlan
    from services.profiler_api.ingest.service import store
    from services.profiler_api.settings import Settings
    from tps.schemas import IngestResult, ProbeRunBatch

    engine = make_engine(sqlalchemy_url(database_url), Settings())
    accepted = duplicates = measurements = 0
    try:
        for run in runs:  # one run per transaction keeps each COPY bounded
            with Session(engine) as session, session.begin():
                org_id = upsert_organisation(session, org)
                plan = IngestPlan.from_batch(ProbeRunBatch(runs=[run]), org_id=org_id)
                result = store(session, plan)
            accepted += result.accepted
            duplicates += result.duplicates
            measurements += result.measurements
    finally:
        engine.dispose()
    return IngestResult(accepted=accepted, duplicates=duplicates, measurements=measurements)


def write_jsonl(runs: list[ProbeRun], path: Path) -> None:
    """Write runs as ProbeRun JSON Lines (gzipped when the name ends in .gz)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        for run in runs:
            out.write(run.model_dump_json() + "\n")


def hardware_fields(spec_file: Path | None, fields: list[str]) -> dict[str, object]:
    """Return spec fields from a JSON file and `key=value` options (the options win)."""
    given: dict[str, object] = {}
    if spec_file is not None:
        try:
            doc = json.loads(spec_file.read_text())
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(f"--hardware-spec {spec_file}: {exc}") from exc
        if not isinstance(doc, dict):
            raise typer.BadParameter(f"--hardware-spec {spec_file}: not a JSON object")
        given.update(doc)
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--hardware {field!r}: expected FIELD=VALUE")
        try:
            given[key.strip()] = json.loads(value)
        except ValueError:
            given[key.strip()] = value  # a bare string: a name, an arch
    return given


def import_kernel_tuner(
    files: Annotated[list[Path], typer.Argument(help="Kernel Tuner cache files or directories")],
    device: Annotated[
        str | None, typer.Option(help="device name for every file (default: header, else stem)")
    ] = None,
    hardware_spec: Annotated[
        Path | None,
        typer.Option(
            help="JSON file of HardwareSpec fields (all or some) for a device the catalog "
            "lacks; fields not given are guessed from the most similar catalog entry"
        ),
    ] = None,
    hardware: Annotated[
        list[str] | None,
        typer.Option(
            help="a HardwareSpec field as FIELD=VALUE (compute_units=84); repeat for several"
        ),
    ] = None,
    kernel: Annotated[
        str | None, typer.Option(help="kernel name (needed for T4 files, which name none)")
    ] = None,
    problem_size: Annotated[
        str | None, typer.Option(help="problem size such as 4096x4096 (T4 files record none)")
    ] = None,
    push: Annotated[
        str | None, typer.Option(help="service base URL to POST /v1/probe-runs to")
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="TPS_TOKEN", help="agent token for --push")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="store straight into the service's Postgres")
    ] = None,
    org: Annotated[str, typer.Option(help="organisation owning runs for --database-url")] = (
        "imported"
    ),
    out: Annotated[
        Path | None, typer.Option(help="also write the runs as ProbeRun JSON Lines (.jsonl.gz)")
    ] = None,
) -> None:
    """Convert Kernel Tuner files (cache or T4) of any kernel into probe runs; push or store them.

    A device the catalog lacks takes its spec from --hardware-spec / --hardware, and the
    fields neither gives are guessed; the table says which.

    Examples:
      tps import kernel-tuner benchmarks/data/kernel_tuner --out runs.jsonl.gz
      TPS_TOKEN=... tps import kernel-tuner caches/ --push http://127.0.0.1:8000
    """
    from pydantic import ValidationError

    from models.data_files import KERNEL_TUNER_SUFFIXES, data_files
    from models.kernel_tuner import import_cache
    from tps.errors import TPSError

    if push and not token:
        raise typer.BadParameter("--push needs --token (or TPS_TOKEN)")
    given = hardware_fields(hardware_spec, hardware or [])
    paths = [p for p in data_files(files) if p.name.endswith(KERNEL_TUNER_SUFFIXES)]
    try:
        imported = [
            import_cache(p, device=device, hardware=given, kernel=kernel, problem_size=problem_size)
            for p in paths
        ]
    except (TPSError, ValidationError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    table = Table("file", "device", "problem", "configs", "failed", "guessed spec fields", "run id")
    for item in imported:
        run = item.run
        failed = sum(not m.valid for m in run.measurements)
        guessed = item.hardware.guessed
        table.add_row(
            item.path.name,
            run.hardware.name,
            run.problem.canonical(),
            str(len(run.measurements)),
            str(failed),
            f"{', '.join(guessed)} (from {item.hardware.basis})" if guessed else "-",
            str(run.run_id),
        )
    console.print(table)
    for item in imported:
        if item.hardware.guessed:
            console.print(f"{item.path.name}: {item.hardware.describe()}", soft_wrap=True)
    runs = [item.run for item in imported]
    if out:
        write_jsonl(runs, out)
        console.print(f"wrote {len(runs)} runs to {out}")
    if push:
        pushed = push_runs(runs, url=push, token=token or "")
        totals = pushed.model_dump(include={"accepted", "duplicates", "measurements"})
        console.print(f"pushed to {push}: {totals}")
    if database_url:
        result = ingest_into_database(runs, database_url=database_url, org=org)
        console.print(f"stored in the database: {result.model_dump(exclude={'duplicate_run_ids'})}")


def _print_reports(reports: list[dict[str, Any]]) -> None:
    table = Table(
        "op",
        "holdout",
        "n",
        "source",
        "score@1",
        "score@5",
        "regret@1",
        "probes≤3%",
        "spearman",
        "median APE",
    )
    for report in reports:
        for source in ("model", "policy", "baseline_nearest", "baseline_random"):
            figures = report.get(source) or {}
            if not figures:
                continue

            def fmt(name: str, figures: dict[str, Any] = figures) -> str:
                value = figures.get(name)
                if value is None:
                    return "-"
                return f"{value:.3f}" if isinstance(value, float) else str(value)

            label = source
            if source == "policy" and "policy_choice" in report:
                # what was served: the policy chosen on the training hardware and its latency
                choice = report["policy_choice"]
                label = f"policy: {choice['name']}, {choice.get('latency', 'anchored')} latency"
            table.add_row(
                report["op"],
                str(report["holdout"]),
                str(report["n_candidates"]),
                label,
                fmt("score_at_1"),
                fmt("score_at_5"),
                fmt("regret_at_1"),
                fmt("probes_to_3pct"),
                fmt("spearman"),
                fmt("median_ape"),
            )
    console.print(table)


def evaluate(
    data: DataPaths,
    holdout: Annotated[
        str | None, typer.Option(help="hardware to hold out (name, alias, or label like X@66u)")
    ] = None,
    all_holdouts: Annotated[
        bool, typer.Option("--all", help="hold out each hardware in turn (the whole table)")
    ] = False,
    op: Annotated[str | None, typer.Option(help="only this op")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    plot: Annotated[Path | None, typer.Option(help="write a PNG of score@k, k = 1..20")] = None,
    n_estimators: NEstimators = None,
    threads: Threads = None,
    seed: Seed = 0,
) -> None:
    """Train without the held-out hardware and rank every candidate for it.

    The served policy is chosen by leave-one-out over the training hardware only (nested);
    the report gives the model, the served policy, the nearest-device and random baselines,
    and the served confidence's Brier score and reliability table.

    Examples:
      tps evaluate --data benchmarks/data/kernel_tuner --holdout W7800
      tps evaluate --data benchmarks/data/kernel_tuner --all --plot k.png
    """
    from models.data_files import load_runs
    from models.dataset import TuningData
    from models.evaluation import evaluate_holdout, leave_one_out, summarise
    from models.plots import plot_score_at_k

    if not all_holdouts and not holdout:
        raise typer.BadParameter("give --holdout NAME or --all")
    tuning = TuningData.from_runs(load_runs(data))
    ops = [op] if op else tuning.ops
    if op and op not in tuning.ops:
        raise typer.BadParameter(f"no data for op {op!r}; found {tuning.ops}")
    params = model_params(n_estimators, threads)
    if all_holdouts:
        reports = leave_one_out(tuning, ops=ops, seed=seed, model_params=params)
    else:
        reports = [
            evaluate_holdout(tuning, holdout or "", op=o, seed=seed, model_params=params)
            for o in ops
        ]
    documents = [report.as_dict() for report in reports]
    if plot:
        plot_score_at_k(documents, plot)
    if as_json:
        payload: object = documents[0] if len(documents) == 1 else documents
        if all_holdouts:
            payload = {"reports": documents, "summary": summarise(reports)}
        typer.echo(json.dumps(payload, indent=2))
        return
    _print_reports(documents)
    if all_holdouts:
        for entry in summarise(reports):
            console.print(entry)


def train(
    data: DataPaths,
    out: Annotated[Path, typer.Option(help="where to write the model artifact")] = Path(
        "model.tpsm"
    ),
    dask_scheduler: Annotated[
        str | None, typer.Option(help="Dask scheduler address: train on the cluster")
    ] = None,
    n_estimators: NEstimators = None,
    threads: Threads = None,
    seed: Seed = 0,
) -> None:
    """Train one model per op and write the artifact (prints its checksum).

    --data is required: measurements to learn from (the service retrains from its own database
    through POST /v1/admin/retrain instead).

    Examples:
      tps train --data benchmarks/data/kernel_tuner --out model.tpsm
      tps train --data runs.jsonl.gz --dask-scheduler tcp://scheduler:8786
    """
    from models.bundle import checksum, train_bundle
    from models.data_files import load_runs
    from models.dataset import TuningData

    tuning = TuningData.from_runs(load_runs(data))
    client = None
    if dask_scheduler:
        from distributed import Client

        client = Client(dask_scheduler)  # type: ignore[no-untyped-call]
    try:
        params = model_params(n_estimators, threads)
        bundle = train_bundle(tuning, seed=seed, client=client, model_params=params)
    finally:
        if client is not None:
            client.close()  # type: ignore[no-untyped-call]
    artifact = bundle.to_bytes()
    out.write_bytes(artifact)
    console.print(
        f"trained ops {bundle.ops} on {bundle.data_counts}; wrote {out} "
        f"({len(artifact)} bytes, sha256 {checksum(artifact)})"
    )


def register(app: typer.Typer) -> None:
    """Add this domain's commands to `app`."""
    import_app = typer.Typer(no_args_is_help=True, help="Import measurements from other tools.")
    import_app.command("kernel-tuner")(import_kernel_tuner)
    app.add_typer(import_app, name="import")
    app.command("evaluate")(evaluate)
    app.command("train")(train)
