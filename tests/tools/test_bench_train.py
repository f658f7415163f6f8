"""`tps bench train`: its figures, alone on stdout, locally and on a local Dask cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("distributed")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_bench_train_prints_one_json_object(workers: int) -> None:
    args = ["bench", "train", "--rows", "3000", "--json", "--dask-workers", str(workers)]
    done = subprocess.run(
        [sys.executable, "-c", "from cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)  # nothing else on stdout: the workers' chatter is not
    assert figures["train_s"] > 0 and figures["config"]["dask_workers"] == workers
    assert 2500 <= figures["rows"] <= 3500 and figures["trees"] == {"gemm": 200}
