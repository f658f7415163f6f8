"""Workload sources: the problems an agent should probe, read from files users hand it.

Two formats: shape lists (`name,m,n,k,trans_b`, one GEMM per row) and the files PyTorch
TunableOp writes with PYTORCH_TUNABLEOP_RECORD_UNTUNED=1 (`op_signature,params_signature`
per line). Names in shape lists are model names: they are read past, never kept.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agents.daemon.errors import SourceError
from tps.problem import Dtype, ProblemKey

log = logging.getLogger(__name__)

SHAPE_COLUMNS = ("m", "n", "k")
TUNABLEOP_PREFIXES = ("Gemm", "ScaledGemm")


LAYOUT_COLUMNS = ("lda", "ldb", "ldc", "stride_a", "stride_b")


def read_shape_rows(path: Path, *, dtype: Dtype) -> list[tuple[ProblemKey, int]]:
    """Read a shape list as (problem, count) rows; `count` is 1 where the file has none.

    Beyond `m,n,k`: `trans_b` (default 1, as in nn.Linear), `trans_a`, `dtype`, `batch`,
    leading dimensions and batch strides (blank for packed), and `count`, the calls a
    recorded program made (files written by the runtime's record mode).
    """
    rows: list[tuple[ProblemKey, int]] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = [c.strip() for c in reader.fieldnames or ()]
        if not set(SHAPE_COLUMNS) <= set(header):
            raise SourceError(f"{path.name}: a shape list needs columns m,n,k; found {header}")
        for line, row in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
            try:
                dims = {c: int(row[c]) for c in SHAPE_COLUMNS}
                if "batch" in row and row["batch"] and int(row["batch"]) > 1:
                    dims["batch"] = int(row["batch"])
                layout = {c: int(row[c]) for c in LAYOUT_COLUMNS if row.get(c)}
                problem = ProblemKey(
                    op="gemm",
                    dtype=row.get("dtype") or dtype,
                    dims=dims,
                    trans_a=_flag(row.get("trans_a", "0")),
                    trans_b=_flag(row.get("trans_b", "1")),
                    **layout,
                )
                rows.append((problem, int(row.get("count") or 1)))
            except ValueError as exc:
                log.warning("%s line %d skipped: %s", path.name, line, exc)
    return rows


def read_shape_csv(path: Path, *, dtype: Dtype) -> list[ProblemKey]:
    """Read a shape list: one GEMM per row, in file order (see `read_shape_rows`)."""
    return [problem for problem, _ in read_shape_rows(path, dtype=dtype)]


def _flag(value: str) -> bool:
    if value.lower() in ("1", "true", "t", "yes"):
        return True
    if value.lower() in ("", "0", "false", "f", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_untuned_line(line: str) -> ProblemKey:
    """Parse one TunableOp `op_signature,params_signature[,...]` line into a GEMM problem."""
    fields = line.strip().split(",")
    if len(fields) < 2:
        raise ValueError(f"expected op_signature,params_signature: {line.strip()!r}")
    op_sig, params_sig = fields[0].strip(), fields[1].strip()
    if op_sig.startswith("ScaledGemm"):
        raise ValueError("scaled (fp8 with scales) GEMMs are not probed yet")
    parts = params_sig.split("_")
    if op_sig.startswith("GemmStridedBatched") and len(parts) > 6 and parts[4] == "B":
        # tn_M_N_K_B_batch_ld_A_B_C[_stride_...]: drop the batch, parse, then put it back.
        batch = int(parts[5])
        problem = ProblemKey.from_tunableop(op_sig, "_".join(parts[:4] + parts[6:]))
        if batch > 1:
            problem = ProblemKey.model_validate(
                {**problem.model_dump(), "dims": {**problem.dims, "batch": batch}}
            )
        return problem
    return ProblemKey.from_tunableop(op_sig, params_sig)


def read_tunableop_untuned(path: Path) -> list[ProblemKey]:
    """Read a TunableOp untuned file; lines of other kinds (validators, comments) are skipped."""
    problems = []
    with path.open() as f:
        for number, line in enumerate(f, start=1):
            if not line.startswith(TUNABLEOP_PREFIXES):
                continue
            try:
                problems.append(parse_untuned_line(line))
            except ValueError as exc:
                log.warning("%s line %d skipped: %s", path.name, number, exc)
    return problems


def sniff_kind(path: Path) -> str | None:
    """Return "shape_csv", "tunableop" or None for a file of neither kind."""
    try:
        with path.open() as f:
            head = [f.readline() for _ in range(8)]
    except (OSError, UnicodeDecodeError):
        return None
    first = head[0].strip().lower()
    if set(SHAPE_COLUMNS) <= {c.strip() for c in first.split(",")}:
        return "shape_csv"
    if any(line.startswith(TUNABLEOP_PREFIXES) for line in head):
        return "tunableop"
    return None


def read_any(path: Path, *, dtype: Dtype) -> list[ProblemKey]:
    """Read a workload file of either kind, telling which from its content."""
    kind = sniff_kind(path)
    if kind == "shape_csv":
        return read_shape_csv(path, dtype=dtype)
    if kind == "tunableop":
        return read_tunableop_untuned(path)
    raise SourceError(f"{path.name} is neither a shape list nor a TunableOp untuned file")


@dataclass
class WatchFolder:
    """Poll a folder for new or grown workload files; each poll yields the problems they hold."""

    folder: Path
    dtype: Dtype
    _seen: dict[Path, tuple[float, int]] = field(default_factory=dict)

    def poll(self) -> list[ProblemKey]:
        """Read files that appeared or changed since the last poll."""
        problems: list[ProblemKey] = []
        if not self.folder.is_dir():
            return problems
        for path in sorted(p for p in self.folder.iterdir() if p.is_file()):
            if path.name.startswith("."):
                continue
            stat = path.stat()
            signature = (stat.st_mtime, stat.st_size)
            if self._seen.get(path) == signature:
                continue
            self._seen[path] = signature
            try:
                problems.extend(read_any(path, dtype=self.dtype))
            except SourceError as exc:
                log.info("watch folder: %s", exc)
        return problems


@dataclass
class WorkloadSources:
    """All of an agent's sources: fixed files read once, plus an optional watch folder."""

    shape_csv: list[Path] = field(default_factory=list)
    tunableop_untuned: list[Path] = field(default_factory=list)
    watch: WatchFolder | None = None
    dtype: Dtype = "bf16"
    _read_fixed: bool = False

    def poll(self) -> list[ProblemKey]:
        """Return the problems not returned before (fixed files on the first call only)."""
        problems: list[ProblemKey] = []
        if not self._read_fixed:
            self._read_fixed = True
            problems.extend(_read_all(self.shape_csv, self._read_shapes))
            problems.extend(_read_all(self.tunableop_untuned, read_tunableop_untuned))
        if self.watch is not None:
            problems.extend(self.watch.poll())
        return problems

    def _read_shapes(self, path: Path) -> list[ProblemKey]:
        return read_shape_csv(path, dtype=self.dtype)


def _read_all(
    paths: Iterable[Path], read: Callable[[Path], list[ProblemKey]]
) -> Iterator[ProblemKey]:
    for path in paths:
        try:
            yield from read(path)
        except OSError as exc:
            raise SourceError(f"cannot read workload file {path}: {exc.strerror}") from exc


@dataclass
class FixedProblems:
    """A source holding a list of problems given in code (the demo's short shape list)."""

    problems: list[ProblemKey]
    _given: bool = False

    def poll(self) -> list[ProblemKey]:
        """Return the problems on the first call, nothing after."""
        if self._given:
            return []
        self._given = True
        return list(self.problems)
