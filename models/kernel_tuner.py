"""Convert Kernel Tuner cache files into probe runs.

A cache file holds one kernel on one problem on one device, tuned by brute force: it becomes
one ProbeRun whose measurements are all the configurations of the tuning space.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import statistics
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tps.candidate import Candidate
from tps.catalog import resolve
from tps.errors import TPSError
from tps.hardware import HardwareSpec
from tps.problem import OPS, ProblemKey
from tps.schemas import MAX_MEASUREMENTS_PER_RUN, Measurement, ProbeRun

BACKEND = "kernel_tuner"
SOURCE = "kernel_tuner"
# Fixed namespace so that the same file always imports under the same run id.
RUN_NAMESPACE = uuid.UUID("6f3d1c2e-9a4b-5c7d-8e0f-1a2b3c4d5e6f")
PROBLEM_DIM_NAMES = ("x", "y", "z")


class KernelTunerImportError(TPSError):
    """A cache file that cannot be converted."""

    status_code = 422


def read_cache(path: Path) -> tuple[dict[str, Any], bytes]:
    """Return the parsed cache document of a .json or .json.gz file and its raw JSON bytes."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KernelTunerImportError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or "cache" not in doc:
        raise KernelTunerImportError(f"{path}: not a Kernel Tuner cache file (no 'cache')")
    return doc, raw


def device_name_of(doc: dict[str, Any], path: Path) -> str:
    """Return the header's device name, or the file name's stem when the header has none."""
    name = (doc.get("device_name") or "").strip()
    if name:
        return name
    stem = path.name
    for suffix in (".gz", ".json"):
        stem = stem.removesuffix(suffix)
    return stem


def op_of(kernel_name: str) -> str:
    """Return the TPS op a Kernel Tuner kernel name belongs to (`convolution_kernel` -> ...)."""
    op = kernel_name.removesuffix("_kernel")
    if op not in OPS:
        raise KernelTunerImportError(f"kernel {kernel_name!r} maps to unregistered op {op!r}")
    return op


def problem_of(doc: dict[str, Any]) -> ProblemKey:
    """Build the problem key from the header's kernel name and problem size."""
    kernel_name = doc.get("kernel_name") or ""
    size = doc.get("problem_size") or []
    if isinstance(size, int):
        size = [size]
    dims = {PROBLEM_DIM_NAMES[i] if i < 3 else f"d{i}": int(v) for i, v in enumerate(size)}
    return ProblemKey(op=op_of(kernel_name), dtype="fp32", dims=dims, variant=kernel_name)


def _std(samples: list[float]) -> float:
    # statistics.pstdev is exact (Fractions) and 10x slower than this on 11k records.
    mean = sum(samples) / len(samples)
    return math.sqrt(sum((s - mean) ** 2 for s in samples) / len(samples))


def _measurement(record: dict[str, Any], param_keys: list[str]) -> Measurement:
    params = {k: record[k] for k in param_keys if k in record}
    candidate = Candidate(backend=BACKEND, params=params)
    compile_ms = record.get("compile_time")
    compile_ms = float(compile_ms) if isinstance(compile_ms, int | float) else None
    time = record.get("time")
    if isinstance(time, str) or time is None or not time > 0:
        error = time if isinstance(time, str) else "no time recorded"
        return Measurement(candidate=candidate, valid=False, error=error, compile_ms=compile_ms)
    samples_us = sorted(
        float(t) * 1000.0 for t in record.get("times") or [] if isinstance(t, int | float) and t > 0
    )
    if not samples_us:
        samples_us = [float(time) * 1000.0]
    quantiles = (
        statistics.quantiles(samples_us, n=10, method="inclusive")
        if len(samples_us) > 1
        else [samples_us[0]] * 9
    )
    return Measurement(
        candidate=candidate,
        median_us=statistics.median(samples_us),
        p10_us=quantiles[0],
        p90_us=quantiles[-1],
        std_us=_std(samples_us),
        samples=len(samples_us),
        compile_ms=compile_ms,
    )


def _created_at(records: list[dict[str, Any]]) -> datetime:
    stamps = [r["timestamp"] for r in records if isinstance(r.get("timestamp"), str)]
    if not stamps:
        return datetime(1970, 1, 1, tzinfo=UTC)
    latest = datetime.fromisoformat(max(stamps))
    return latest if latest.tzinfo else latest.replace(tzinfo=UTC)


def host_id_for(device_name: str) -> str:
    """Return a stable host id for imported data (it identifies the file's source, not a host)."""
    return hashlib.sha256(f"{SOURCE}:{device_name}".encode()).hexdigest()[:16]


def convert(
    doc: dict[str, Any],
    *,
    raw: bytes,
    device_name: str,
    hardware: HardwareSpec | None = None,
) -> ProbeRun:
    """Convert one parsed cache document into a ProbeRun."""
    hardware = hardware or resolve(device_name)
    problem = problem_of(doc)
    param_keys = list(doc.get("tune_params_keys") or [])
    records = [r for r in doc["cache"].values() if isinstance(r, dict)]
    if not records:
        raise KernelTunerImportError("the cache holds no configurations")
    if len(records) > MAX_MEASUREMENTS_PER_RUN:
        raise KernelTunerImportError(
            f"{len(records)} configurations exceed {MAX_MEASUREMENTS_PER_RUN} per run"
        )
    measurements = [_measurement(r, param_keys) for r in records]
    valid = [m for m in measurements if m.valid and m.median_us is not None]
    winner = min(valid, key=lambda m: m.median_us or float("inf")) if valid else None
    digest = hashlib.sha256(raw).hexdigest()
    return ProbeRun(
        run_id=uuid.uuid5(RUN_NAMESPACE, f"{digest}:{hardware.fingerprint()}"),
        host_id=host_id_for(device_name),
        hardware=hardware,
        problem=problem,
        measurements=measurements,
        winner_id=winner.candidate.id if winner else None,
        budget_ms=sum(float(r.get("benchmark_time") or 0.0) for r in records),
        compile_ms=sum(m.compile_ms or 0.0 for m in measurements),
        rationale=f"imported from Kernel Tuner cache ({len(records)} configurations, brute force)",
        source=SOURCE,
        created_at=_created_at(records),
    )


def import_file(path: Path, *, device: str | None = None) -> ProbeRun:
    """Read a Kernel Tuner cache file (.json or .json.gz) and return its ProbeRun."""
    doc, raw = read_cache(path)
    name = device or device_name_of(doc, path)
    return convert(doc, raw=raw, device_name=name)
