"""OpenMP's idle threads sleep in any process that loads the model, unless the user says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _spin_counts(env: dict[str, str]) -> list[int]:
    """Return each OpenMP runtime's spin count in a fresh process that imports the model."""
    env = {**env, "OMP_DISPLAY_ENV": "VERBOSE", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", "import models.estimator, models.calibration, models.families"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [int(n) for n in re.findall(r"GOMP_SPINCOUNT = '(\d+)'", done.stderr)]


def test_the_models_openmp_threads_sleep_when_idle() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    counts = _spin_counts(env)
    assert counts and all(n == 0 for n in counts), counts  # OpenMP's default spins 300,000


def test_a_wait_policy_the_user_set_is_kept() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    counts = _spin_counts({**env, "OMP_WAIT_POLICY": "ACTIVE"})
    assert counts and all(n > 0 for n in counts), counts
