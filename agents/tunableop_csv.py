"""PyTorch TunableOp results files: `Validator` lines, then `op_sig,params_sig,solution,time`."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from agents.errors import CacheError

# TunableOp solution names -> TPS backends; anything else is kept under its own name.
SOLUTION_BACKENDS = (("Gemm_Hipblaslt", "hipblaslt"), ("Gemm_Rocblas", "rocblas"))


@dataclass(frozen=True)
class TunableResult:
    op_signature: str
    params_signature: str
    solution: str
    time_ms: float | None


@dataclass
class TunableFile:
    validators: dict[str, str]
    results: list[TunableResult]


def solution_backend(solution: str) -> str:
    """Return the TPS backend of a TunableOp solution name."""
    if solution == "Default":
        return "vendor-default"
    for prefix, backend in SOLUTION_BACKENDS:
        if solution.startswith(prefix):
            return backend
    return "tunableop"


def parse_rows(rows: list[list[str]], *, origin: str = "TunableOp results") -> TunableFile:
    validators: dict[str, str] = {}
    results: list[TunableResult] = []
    for lineno, row in enumerate(rows, 1):
        row = [c.strip() for c in row]
        if not row or not any(row):
            continue
        if row[0] == "Validator":
            if len(row) < 3:
                raise CacheError(f"{origin}:{lineno}: a Validator line needs a key and a value")
            validators[row[1]] = ",".join(row[2:])
            continue
        if len(row) < 3:
            raise CacheError(f"{origin}:{lineno}: expected op_sig,params_sig,solution[,time]")
        time_ms: float | None = None
        if len(row) >= 4 and row[3]:
            try:
                time_ms = float(row[3])
            except ValueError as exc:
                raise CacheError(f"{origin}:{lineno}: time {row[3]!r} is not a number") from exc
        results.append(TunableResult(row[0], row[1], row[2], time_ms))
    return TunableFile(validators=validators, results=results)


def read_file(path: str | Path) -> TunableFile:
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            return parse_rows(list(csv.reader(fh)), origin=str(path))
    except OSError as exc:
        raise CacheError(f"cannot read TunableOp results {path}: {exc}") from exc


def write_file(path: str | Path, data: TunableFile) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        for key, value in data.validators.items():
            out.writerow(["Validator", key, value])
        for r in data.results:
            time = "" if r.time_ms is None else f"{r.time_ms:.6f}"
            out.writerow([r.op_signature, r.params_signature, r.solution, time])
