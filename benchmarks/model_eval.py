"""Leave-one-GPU-out figures of the cross-architecture model, as BENCHMARKS.md shows them.

Runs `tps evaluate --all --json` on the Kernel Tuner data (benchmarks/data/kernel_tuner, or
TPS_KERNEL_TUNER_DATA) and, when present, leave-one-configuration-out on the GEMM probe runs
in benchmarks/data/ (the H200's and the H100's, learnt from together); writes the raw reports
to benchmarks/results/model_*.json, a score@k plot per dataset, and prints the Markdown tables.

    .venv/bin/python benchmarks/model_eval.py [--kernel-tuner DIR] [--gemm PATH ...]
        [--gemm-name NAME] [--skip-gemm] [--skip-kernel-tuner] [--families]

The H200's runs alone, as the sections before 2026-12-07 measured them:
    .venv/bin/python benchmarks/model_eval.py --skip-kernel-tuner \
        --gemm benchmarks/data/gemm_h200_probe_runs.jsonl.gz --gemm-name model_gemm_loco
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tools.kernel_tuner import find_dataset
from tools.settings import LocalSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TPS = str(Path(sys.executable).with_name("tps"))
SOURCES = ("model", "policy", "baseline_nearest", "baseline_random")


def machine() -> str:
    cpus = os.cpu_count()
    return f"{platform.machine()} {platform.processor() or ''} {cpus} CPUs, no GPU".strip()


def run_evaluate(data: list[Path], plot: Path) -> tuple[dict, list[str], float]:
    command = [TPS, "evaluate", *(a for p in data for a in ("--data", str(p)))]
    command += ["--all", "--json", "--threads", "1"]
    command += ["--plot", str(plot)]
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout), command, time.perf_counter() - started


def fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 100 else f"{value:.0f}"
    return str(value)


def table(reports: list[dict]) -> str:
    lines = [
        "| op | held out | candidates | source | score@1 | score@5 | regret@1 | probes to 3% "
        "| Spearman | median APE |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        for source in SOURCES:
            f = r.get(source) or {}
            if not f:
                continue
            lines.append(
                f"| {r['op']} | {r['holdout']} | {r['n_candidates']} | {source} | "
                + " | ".join(
                    fmt(f.get(m))
                    for m in (
                        "score_at_1",
                        "score_at_5",
                        "regret_at_1",
                        "probes_to_3pct",
                        "spearman",
                        "median_ape",
                    )
                )
                + " |"
            )
    return "\n".join(lines)


def summary_table(summary: list[dict]) -> str:
    lines = [
        "| op | source | mean score@1 | mean score@5 | mean probes to 3% | probes / space "
        "| median APE | holdouts ≥ nearest (s@1, s@5) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        for source in SOURCES:
            wins = [s.get(f"{source}.holdouts_at_least_nearest_{m}") for m in ("s1", "s5")]
            won = "-" if None in wins else f"{wins[0]}/{s['holdouts']}, {wins[1]}/{s['holdouts']}"
            lines.append(
                f"| {s['op']} | {source} | {fmt(s.get(f'{source}.score_at_1'))} | "
                f"{fmt(s.get(f'{source}.score_at_5'))} | "
                f"{fmt(s.get(f'{source}.probes_to_3pct'))} | "
                f"{fmt(s.get(f'{source}.probes_to_3pct_share'))} | "
                f"{fmt(s.get(f'{source}.median_ape'))} | {won} |"
            )
    return "\n".join(lines)


def policy_table(reports: list[dict]) -> str:
    """Per holdout: the policy chosen on the training hardware, its figures, and calibration."""
    lines = [
        "| op | held out | chosen policy (latency) | served s@1 / s@5 | nearest s@1 / s@5 "
        "| served probes (share) | within 3% in 5% of space | Brier (base rate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        p, n, c = r["policy"], r["baseline_nearest"], r["calibration"]
        lines.append(
            f"| {r['op']} | {r['holdout']} | {p['name']} "
            f"({r['policy_choice'].get('latency', 'anchored')}) | {fmt(p['score_at_1'])} / "
            f"{fmt(p['score_at_5'])} | {fmt(n.get('score_at_1'))} / {fmt(n.get('score_at_5'))} "
            f"| {fmt(p['probes_to_3pct'])} ({fmt(p['probes_to_3pct_share'])}) "
            f"| {fmt(p['within_3pct_in_5pct_of_space'])} "
            f"| {fmt(c.get('brier'))} ({fmt(c.get('brier_base_rate'))}) |"
        )
    return "\n".join(lines)


def gemm_families(data: list[Path]) -> dict:
    from models.data_files import load_runs
    from models.dataset import TuningData
    from models.families import family_oracle_loss

    tuning = TuningData.from_runs(load_runs(data))
    return family_oracle_loss(tuning, op="gemm", n_families=8)


def evaluate(name: str, data: list[Path], out: Path, plot: Path, extra: dict | None = None) -> None:
    payload, command, wall = run_evaluate(data, plot)
    relative = [c if not c.startswith(str(REPO)) else os.path.relpath(c, REPO) for c in command]
    doc = {
        "dataset": name,
        "command": " ".join([".venv/bin/tps", *relative[1:]]),
        "machine": machine(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": round(wall, 1),
        **payload,
        **(extra or {}),
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"## {name}\n\n`{doc['command']}` ({doc['machine']}, {doc['date']}, {wall:.0f} s)\n")
    print(summary_table(payload["summary"]) + "\n")
    print(policy_table(payload["reports"]) + "\n")
    print(table(payload["reports"]) + "\n")
    if extra:
        print(json.dumps(extra, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kernel-tuner", type=Path, default=find_dataset(LocalSettings().kernel_tuner_data)
    )
    parser.add_argument(
        "--gemm", type=Path, action="append", help="probe-run files or folders (repeatable)"
    )
    parser.add_argument("--gemm-name", default="model_gemm_loco_h200_h100")
    parser.add_argument("--skip-gemm", action="store_true")
    parser.add_argument("--skip-kernel-tuner", action="store_true")
    parser.add_argument("--families", action="store_true", help="also the GEMM shape families")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.skip_kernel_tuner:
        for kernel in ("convolution", "dedispersion"):
            evaluate(
                f"Kernel Tuner {kernel}, leave-one-GPU-out",
                [args.kernel_tuner / f"{kernel}_milo"],
                RESULTS / f"model_loo_{kernel}.json",
                RESULTS / f"model_score_at_k_{kernel}.png",
            )
    # The probe-run files alone: the data folder also holds the Kernel Tuner caches.
    gemm_files = [
        f
        for path in args.gemm or [REPO / "benchmarks" / "data"]
        for f in (sorted(path.glob("*.jsonl*")) if path.is_dir() else [path])
    ]
    if not args.skip_gemm and gemm_files:
        evaluate(
            "GEMM, leave-one-configuration-out (GPUs, SM limits, dtypes): "
            + ", ".join(f.name for f in gemm_files),
            gemm_files,
            RESULTS / f"{args.gemm_name}.json",
            RESULTS / f"{args.gemm_name.replace('_loco', '_score_at_k')}.png",
            extra={"families": gemm_families(gemm_files)} if args.families else None,
        )


if __name__ == "__main__":
    main()
