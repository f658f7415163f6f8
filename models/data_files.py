"""Find and read training data: Kernel Tuner caches and ProbeRun JSON Lines files."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from models.kernel_tuner import import_cache
from tps.errors import TPSError
from tps.schemas import ProbeRun

log = logging.getLogger(__name__)
PROBE_RUN_SUFFIXES = (".jsonl", ".jsonl.gz")
KERNEL_TUNER_SUFFIXES = (".json", ".json.gz")


class DataSourceError(TPSError):
    """A data path that holds nothing this package can read."""


def _is(path: Path, suffixes: tuple[str, ...]) -> bool:
    return any(path.name.endswith(s) for s in suffixes)


def data_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories (recursively) into readable data files, sorted for determinism."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and _is(p, PROBE_RUN_SUFFIXES + KERNEL_TUNER_SUFFIXES)
            )
        elif path.is_file():
            found.append(path)
        else:
            raise DataSourceError(f"no such file or directory: {path}")
    return found


def read_probe_runs_jsonl(path: Path) -> Iterator[ProbeRun]:
    """Yield the ProbeRuns of a JSON Lines file (gzipped or not); a line may be a batch."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataSourceError(f"{path}:{number}: not JSON: {exc}") from exc
            for run in doc["runs"] if isinstance(doc, dict) and "runs" in doc else [doc]:
                yield ProbeRun.model_validate(run)


def load_runs(paths: Iterable[Path], *, device: str | None = None) -> list[ProbeRun]:
    """Read every ProbeRun under `paths`; `device` overrides Kernel Tuner device names."""
    runs: list[ProbeRun] = []
    for path in data_files(paths):
        if _is(path, PROBE_RUN_SUFFIXES):
            runs.extend(read_probe_runs_jsonl(path))
        else:
            imported = import_cache(path, device=device)
            if imported.hardware.guessed:
                log.warning("%s: %s", path.name, imported.hardware.describe())
            runs.append(imported.run)
    return runs
