"""Fixtures of the model tests: a subsample of the Kernel Tuner data shipped in the checkout.

The tests always read `benchmarks/data/kernel_tuner`, never TPS_KERNEL_TUNER_DATA, so that their
expectations (these GPUs, these files) hold wherever they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.dataset import TuningData
from models.kernel_tuner import import_file
from tps.schemas import ProbeRun

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNEL_TUNER = REPO_ROOT / "benchmarks" / "data" / "kernel_tuner"
GPUS = ("A100", "A4000", "A6000", "W7800")
SUBSAMPLE = 400


@pytest.fixture(scope="session")
def kernel_tuner_dir() -> Path:
    if not (KERNEL_TUNER / "convolution_milo").is_dir():
        raise FileNotFoundError(f"the Kernel Tuner data of the checkout is missing: {KERNEL_TUNER}")
    return KERNEL_TUNER


@pytest.fixture(scope="session")
def convolution_runs(kernel_tuner_dir: Path) -> list[ProbeRun]:
    """Return the convolution runs of four GPUs, on one shared subsample of candidates."""
    runs = [import_file(kernel_tuner_dir / "convolution_milo" / f"{g}.json.gz") for g in GPUS]
    ids = sorted({m.candidate.id for m in runs[0].measurements})
    keep = set(np.random.default_rng(7).choice(ids, size=SUBSAMPLE, replace=False))
    return [subsample(run, keep) for run in runs]


def subsample(run: ProbeRun, keep: set[str]) -> ProbeRun:
    measurements = [m for m in run.measurements if m.candidate.id in keep]
    return run.model_copy(update={"measurements": measurements, "winner_id": None})


@pytest.fixture(scope="session")
def convolution_data(convolution_runs: list[ProbeRun]) -> TuningData:
    return TuningData.from_runs(convolution_runs)


FAST_MODEL: dict[str, Any] = {
    "n_estimators": 30,
    "num_leaves": 15,
    "max_group_rows": 256,
    "n_jobs": 1,
}
