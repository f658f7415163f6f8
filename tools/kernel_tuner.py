"""The Kernel Tuner data through the service: import, push, retrain (demo and bench).

The data comes from a directory named by the caller or by TPS_KERNEL_TUNER_DATA; the copy
shipped in the checkout's benchmarks/data/ is the default of a checkout only.

One GPU is kept out of everything the service sees, so that its priors are a true test:
the service never trained on it, and its own measurements give each candidate's true rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client import ServiceClient
from models.data_files import load_runs
from tps.catalog import UnknownHardwareError, normalise_name, resolve
from tps.errors import TPSError
from tps.schemas import IngestResult, Job, ProbeRun

REPO_ROOT = Path(__file__).resolve().parents[1]
# Five GPUs, two kernels, MIT (see its README.md and LICENSE).
SHIPPED_DATASET = REPO_ROOT / "benchmarks" / "data" / "kernel_tuner"
DEFAULT_HOLDOUT = "W7800"


class DatasetMissingError(TPSError):
    """The Kernel Tuner directory named by the settings, or shipped with the checkout, is absent."""


def find_dataset(configured: Path | None = None) -> Path:
    """Return the Kernel Tuner directory: `configured` (TPS_KERNEL_TUNER_DATA), else the shipped."""
    if configured is not None:
        path = configured.expanduser()
        if not path.is_dir():
            raise DatasetMissingError(f"TPS_KERNEL_TUNER_DATA={configured} is not a directory")
        return path
    if not SHIPPED_DATASET.is_dir():
        raise DatasetMissingError(
            f"no Kernel Tuner data at {SHIPPED_DATASET} (shipped with the checkout); "
            "set TPS_KERNEL_TUNER_DATA to a directory of Kernel Tuner caches"
        )
    return SHIPPED_DATASET


@dataclass
class SplitRuns:
    """The runs the service gets, and the held-out GPU's runs it never sees."""

    train: list[ProbeRun]
    heldout: list[ProbeRun]
    holdout_name: str


def load_split(path: Path, *, holdout: str = DEFAULT_HOLDOUT) -> SplitRuns:
    """Read every cache under `path` and split off the runs of the `holdout` GPU."""
    try:
        wanted = normalise_name(resolve(holdout).name)
    except UnknownHardwareError:
        wanted = normalise_name(holdout)
    runs = load_runs([path])
    heldout = [r for r in runs if normalise_name(r.hardware.name) == wanted]
    if not heldout:
        names = sorted({r.hardware.name for r in runs})
        raise TPSError(f"no runs of {holdout!r} under {path}; found {names}")
    train = [r for r in runs if normalise_name(r.hardware.name) != wanted]
    return SplitRuns(train=train, heldout=heldout, holdout_name=heldout[0].hardware.name)


def push_runs(service: ServiceClient, runs: Sequence[ProbeRun]) -> IngestResult:
    """Push runs one per request (a cache file is up to 20 000 measurements), gzipped."""
    return service.push(runs, max_runs=1)


def retrain(
    admin: ServiceClient,
    params: Mapping[str, Any],
    *,
    timeout_s: float = 600.0,
    poll_s: float = 0.5,
) -> Job:
    """Queue a retrain through the admin endpoint and wait for the job to end; return it."""
    accepted = admin.retrain(params)
    return admin.wait_for_job(accepted.job_id, timeout_s=timeout_s, poll_s=poll_s)
