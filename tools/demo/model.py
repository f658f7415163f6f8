"""Demo steps of the model: import Kernel Tuner data without one GPU, retrain, ask about it.

The GPU left out (W7800 by default) is what the service has never seen; its own measurements,
kept aside, give the true rank of each candidate the priors endpoint proposes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table
from sqlalchemy.orm import Session

from models.bundle import ModelBundle
from models.dataset import TuningData
from models.evaluation import evaluate_group
from models.plots import plot_score_at_k
from models.policy import DEFAULT_POLICY
from services.profiler_api.auth.service import Role
from services.profiler_api.db import make_engine
from services.profiler_api.model_registry import repository as registry
from tools.demo.service import DemoContext, DemoFailed, DemoStep
from tools.kernel_tuner import (
    DEFAULT_HOLDOUT,
    SplitRuns,
    find_dataset,
    load_split,
    push_runs,
    retrain,
)
from tps.catalog import resolve
from tps.schemas import Job, Prior, ProbeRun

# Sized for a 2-core box: a random 500 of each kernel's configurations, 100 trees.
DEMO_TRAINING = {"max_candidates": 500, "n_estimators": 100}
SHOWN = 8


@dataclass
class ModelDemo:
    """The model's demo steps and what they pass along."""

    holdout: str = DEFAULT_HOLDOUT
    dataset: Path | None = None  # default: TPS_KERNEL_TUNER_DATA, else the shipped data
    plot_path: Path | None = None  # default: score_at_k.png in the demo's output folder
    split: SplitRuns | None = None
    plot_written: Path | None = None
    job: Job | None = None

    def steps(self) -> list[tuple[str, DemoStep]]:
        return [
            (f"import Kernel Tuner data (all but {self.holdout})", self.import_data),
            ("retrain through the admin endpoint", self.retrain),
            (f"priors for the unseen {self.holdout}", self.ask_priors),
            ("plot score@k: model and baselines", self.plot),
        ]

    def import_data(self, ctx: DemoContext) -> None:
        path = self.dataset or find_dataset(ctx.local.kernel_tuner_data)
        self.split = load_split(path, holdout=self.holdout)
        with ctx.client() as client:
            totals = push_runs(client, self.split.train)
        gpus = sorted({run.hardware.name for run in self.split.train})
        ctx.console.print(
            f"pushed {len(self.split.train)} Kernel Tuner runs from {path} "
            f"({totals.measurements} measurements; GPUs: {', '.join(gpus)}); "
            f"kept {self.split.holdout_name} aside"
        )

    def _imported(self) -> SplitRuns:
        if self.split is None:
            raise DemoFailed("no Kernel Tuner runs: the import step did not run")
        return self.split

    def _trained(self) -> tuple[SplitRuns, int]:
        if self.job is None or self.job.state != "succeeded" or self.job.model_version is None:
            raise DemoFailed("no model: the retrain step did not succeed")
        return self._imported(), self.job.model_version

    def retrain(self, ctx: DemoContext) -> None:
        ops = sorted({run.problem.op for run in self._imported().train})
        with ctx.client(Role.ADMIN) as admin:
            job = self.job = retrain(admin, {"ops": ops, **DEMO_TRAINING})
        if job.state != "succeeded":
            raise DemoFailed(f"training job {job.state}: {job.error}")
        table = Table(
            title=f"job {job.id}: model v{job.model_version} active",
            caption="held-out evaluation inside the job (quality gate); score@1 / score@5",
        )
        for column in ("op", "held out", "model", "served policy", "nearest GPU", "random"):
            table.add_column(column)
        for report in (job.metrics or {}).get("reports", []):
            table.add_row(
                report["op"],
                report["holdout"],
                *(
                    _pair(report[name])
                    for name in ("model", "policy", "baseline_nearest", "baseline_random")
                ),
            )
        ctx.console.print(table)

    def ask_priors(self, ctx: DemoContext) -> None:
        split, _ = self._trained()
        spec = resolve(self.holdout)  # the catalog's datasheet figures: all a new GPU brings
        with ctx.client() as client:
            for run in split.heldout:
                prior = client.prior(spec, run.problem, limit=SHOWN)
                ctx.console.print(_truth_table(prior, run))

    def plot(self, ctx: DemoContext) -> None:
        split, version = self._trained()
        engine = make_engine(ctx.database_url, ctx.settings)
        try:
            with Session(engine) as session:
                stored = registry.artifact_of(session, version)
        finally:
            engine.dispose()
        if stored is None:
            raise DemoFailed(f"model v{version} is not in the registry")
        bundle = ModelBundle.from_bytes(stored[0], expected_checksum=stored[1])
        data = TuningData.from_runs(split.heldout)
        reports: list[dict[str, Any]] = []
        for op in sorted(set(data.ops) & set(bundle.ops)):
            model = bundle.models[op]
            rows = data.frame[(data.frame["op"] == op)]
            # The served universe: the configurations the model was trained to rank.
            group = rows[rows["candidate_id"].isin(model.candidates_)].reset_index(drop=True)
            choice = bundle.policy_for(op)
            served = choice.policy if choice is not None else DEFAULT_POLICY
            result = evaluate_group(model, data, group, policy=served, choice=choice)
            reports.append(
                {
                    "op": op,
                    "holdout": split.holdout_name,
                    **{
                        name: {
                            "score_at_1": result.scores[name].score_at_1,
                            "score_at_5": result.scores[name].score_at_5,
                            "score_at_k": result.curves[name],
                        }
                        for name in result.curves
                    },
                }
            )
        if not reports:
            raise DemoFailed(f"model v{version} serves none of the ops {data.ops}")
        path = self.plot_path or ctx.output_dir / "score_at_k.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        plot_score_at_k(reports, path, title=f"{split.holdout_name}: never seen by the service")
        for report in reports:
            figures = ", ".join(
                f"{name} {_pair(report[name])}"
                for name in ("model", "policy", "baseline_nearest", "baseline_random")
                if name in report
            )
            ctx.console.print(f"{report['op']} on {report['holdout']}: {figures}")
        self.plot_written = path
        ctx.console.print(f"score@k plot written to [bold]{path}")


def _pair(figures: dict[str, Any]) -> str:
    if not figures:
        return "-"
    return f"{figures['score_at_1']:.3f} / {figures['score_at_5']:.3f}"


def _short_label(params: dict[str, Any]) -> str:
    """Return `bsx=64 bsy=1 ...`: each parameter by its words' initials, unless two collide."""
    short = {name: "".join(word[0] for word in name.split("_") if word) for name in params}
    taken = Counter(short.values())
    return " ".join(
        f"{short[name] if taken[short[name]] == 1 else name}={value}"
        for name, value in sorted(params.items())
    )


def _truth_table(prior: Prior, run: ProbeRun) -> Table:
    """Return the served candidates next to their true rank on the held-out GPU."""
    measured = {m.candidate.id: m.median_us for m in run.measurements if m.valid and m.median_us}
    order = sorted(measured, key=lambda cid: measured[cid])
    true_rank = {cid: rank for rank, cid in enumerate(order, start=1)}
    best = measured[order[0]]
    caption = prior.reason or ""
    if prior.candidates:
        served = min(measured.get(c.candidate_id, np.inf) for c in prior.candidates)
        caption = (
            f"source: {prior.source}; true ranks among {len(order)} valid configurations; "
            f"the best of these {len(prior.candidates)} is {best / served:.3f} of optimal"
        )
    table = Table(title=f"{run.hardware.name}: {prior.canonical}", caption=caption)
    for column in ("#", "source", "conf.", "pred. µs", "true µs", "true rank"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("candidate (parameters abbreviated)", overflow="fold")
    for c in prior.candidates:
        true_us = measured.get(c.candidate_id)
        table.add_row(
            str(c.rank + 1),
            c.source,
            f"{c.confidence:.2f}",
            f"{c.predicted_us:.0f}" if c.predicted_us else "-",
            f"{true_us:.0f}" if true_us else "failed",
            str(true_rank.get(c.candidate_id, "-")),
            _short_label(c.candidate.params),
        )
    return table
