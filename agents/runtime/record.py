"""Recorded workloads: the products a program ran, with counts, as a shape list for the agent.

The file is the agent's shape-list format (`tps agent run` reads it as a workload source),
with the columns a program's products need beyond m, n, k: dtype, transposes, leading
dimensions, batch strides and how many calls each problem had, most frequent first.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tps.problem import ProblemKey

COLUMNS = (
    "m",
    "n",
    "k",
    "batch",
    "dtype",
    "trans_a",
    "trans_b",
    "lda",
    "ldb",
    "ldc",
    "stride_a",
    "stride_b",
    "count",
)


def write_workload(path: str | Path, counts: Iterable[tuple[ProblemKey, int]]) -> int:
    """Write (merging with what `path` already holds) and return how many problems it lists."""
    from agents.daemon.workloads import read_shape_rows

    path = Path(path)
    problems: dict[str, ProblemKey] = {}
    merged: Counter[str] = Counter()
    old = read_shape_rows(path, dtype="bf16") if path.exists() else []
    for problem, count in [*old, *counts]:
        if problem.op == "gemm":
            problems.setdefault(problem.key_hash(), problem)
            merged[problem.key_hash()] += count
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for key, count in merged.most_common():
            writer.writerow(_row(problems[key], count))
    os.replace(tmp, path)
    return len(merged)


def _row(problem: ProblemKey, count: int) -> list[object]:
    d = problem.dims

    def blank(value: int | None) -> object:
        return "" if value is None else value

    return [
        d["m"],
        d["n"],
        d["k"],
        problem.batch,
        problem.dtype,
        int(problem.trans_a),
        int(problem.trans_b),
        blank(problem.lda),
        blank(problem.ldb),
        blank(problem.ldc),
        blank(problem.stride_a),
        blank(problem.stride_b),
        count,
    ]
