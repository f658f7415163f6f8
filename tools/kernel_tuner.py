"""The Kernel Tuner data through the service: import, push, retrain (demo and bench).

One GPU is kept out of everything the service sees, so that its priors are a true test:
the service never trained on it, and its own measurements give each candidate's true rank.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from models.sources import load_runs
from tps.catalog import UnknownHardwareError, normalise_name, resolve
from tps.errors import TPSError
from tps.schemas import ProbeRun, ProbeRunBatch

REPO_ROOT = Path(__file__).resolve().parents[1]
# Five GPUs, two kernels, MIT (see its README.md and LICENSE).
SHIPPED_DATASET = REPO_ROOT / "benchmarks" / "data" / "kernel_tuner"
DEFAULT_HOLDOUT = "W7800"
TERMINAL = ("succeeded", "rejected", "failed")


class JobTimeout(TPSError):
    """A training job that did not finish in time."""


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


def push_runs(client: httpx.Client, runs: list[ProbeRun]) -> dict[str, int]:
    """POST runs one per request (a cache file is up to 20 000 measurements), gzipped."""
    totals = {"accepted": 0, "duplicates": 0, "measurements": 0}
    for run in runs:
        body = gzip.compress(ProbeRunBatch(runs=[run]).model_dump_json().encode(), 3)
        response = client.post(
            "/v1/probe-runs",
            content=body,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        response.raise_for_status()
        for key in totals:
            totals[key] += int(response.json()[key])
    return totals


def retrain(
    admin: httpx.Client,
    params: dict[str, Any],
    *,
    timeout_s: float = 600.0,
    poll_s: float = 0.5,
) -> dict[str, Any]:
    """Queue a retrain through the admin endpoint and wait for the job to end; return it."""
    response = admin.post("/v1/admin/retrain", json=params)
    response.raise_for_status()
    url = response.json()["status_url"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = admin.get(url).json()
        if job["state"] in TERMINAL:
            return job
        time.sleep(poll_s)
    raise JobTimeout(f"training job {url} not done after {timeout_s:.0f} s")
