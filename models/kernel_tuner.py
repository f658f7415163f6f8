"""Convert Kernel Tuner cache files into probe runs, for any kernel on any device.

Two formats are read:

- the cache file (`cache=` of `tune_kernel`): a header (`device_name`, `kernel_name`,
  `problem_size`, `tune_params_keys`, ...) and a `cache` object of one record per
  configuration; unversioned (legacy) or with a `schema_version` (1.0.0 and later). A file
  still being written by a tuning session lacks its closing braces; it is read as it stands.
- the T4 results file (`schema_version` and a `results` list, as `kernel_tuner`'s
  `convert_cache_to_t4` writes it): one entry per configuration with its `configuration`,
  `times`, `invalidity` and `measurements`. It names no kernel, device or problem, so those come
  from the options (or a `metadata` block that carries them).

A file holds one kernel on one problem on one device: it becomes one ProbeRun whose
measurements are its configurations. Any kernel name becomes a user-defined op named after it
(`tps.problem.op_spec`), any parameter names are kept, and a device the catalog lacks gets
its spec from the fields given, guessing the rest (`tps.catalog.spec_for`, which says which).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import statistics
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tps.candidate import Candidate
from tps.catalog import ResolvedHardware, spec_for
from tps.errors import TPSError
from tps.problem import ProblemKey, is_builtin, op_spec
from tps.schemas import MAX_MEASUREMENTS_PER_RUN, Measurement, ProbeRun

BACKEND = "kernel_tuner"
SOURCE = "kernel_tuner"
# Fixed namespace so that the same file always imports under the same run id.
RUN_NAMESPACE = uuid.UUID("6f3d1c2e-9a4b-5c7d-8e0f-1a2b3c4d5e6f")
PROBLEM_DIM_NAMES = ("x", "y", "z")
# Kernel Tuner times in milliseconds; T4 files say their unit (spelt as they spell it).
_US_PER_UNIT = {
    "milliseconds": 1000.0,
    "miliseconds": 1000.0,
    "ms": 1000.0,
    "microseconds": 1.0,
    "us": 1.0,
    "seconds": 1e6,
    "s": 1e6,
}
MAX_VARIANT = 128


class KernelTunerImportError(TPSError):
    """A cache file that cannot be converted."""


@dataclass(frozen=True)
class ImportedRun:
    """One imported file: its run, and where its hardware spec came from."""

    path: Path
    run: ProbeRun
    hardware: ResolvedHardware


def _parse(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        # A tuning session appends records as it goes and closes the file only at the end.
        text = raw.decode("utf-8", errors="replace").rstrip().rstrip(",")
        for closing in ("}}", "}", "]}"):
            try:
                doc = json.loads(text + closing)
                break
            except json.JSONDecodeError:
                continue
        else:
            raise KernelTunerImportError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not ("cache" in doc or "results" in doc):
        raise KernelTunerImportError(
            f"{path}: not a Kernel Tuner file (no 'cache' object, no 'results' list)"
        )
    return doc


def read_cache(path: Path) -> tuple[dict[str, Any], bytes]:
    """Return the parsed document of a .json or .json.gz file and its raw JSON bytes."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return _parse(raw, path), raw


def _header(doc: dict[str, Any], name: str) -> Any:
    """Return a header field, from the top level or a T4 file's `metadata`."""
    value = doc.get(name)
    if value in (None, "", []):
        metadata = doc.get("metadata")
        value = metadata.get(name) if isinstance(metadata, dict) else None
    return value


def device_name_of(doc: dict[str, Any], path: Path) -> str:
    """Return the header's device name, or the file name's stem when the header has none."""
    name = str(_header(doc, "device_name") or "").strip()
    if name:
        return name
    stem = path.name
    for suffix in (".gz", ".json"):
        stem = stem.removesuffix(suffix)
    return stem


def op_of(kernel_name: str) -> str:
    """Return the op a Kernel Tuner kernel becomes: its name as an identifier, less `_kernel`.

    A kernel whose name is a built-in op (`gemm`) becomes `kt_gemm`: the built-in op has dims
    of its own, which a Kernel Tuner problem size does not give.
    """
    name = re.sub(r"[^a-z0-9_]+", "_", kernel_name.strip().lower()).strip("_")
    name = re.sub(r"_+", "_", name).removesuffix("_kernel") or "kernel"
    if not name[0].isalpha():
        name = f"k_{name}"
    if is_builtin(name):
        name = f"kt_{name}"
    name = name[:64].rstrip("_")
    op_spec(name)  # a valid user-defined op name by construction; checked all the same
    return name


def problem_dims(size: Any) -> dict[str, int]:
    """Return a problem size (an int, a list of ints, or a string such as "4096x4096") as dims."""
    if isinstance(size, str):
        size = [int(part) for part in re.findall(r"\d+", size)]
    if isinstance(size, int):
        size = [size]
    if not isinstance(size, list) or not size:
        raise KernelTunerImportError(
            f"problem size {size!r}: expected an int or a list of ints (give --problem-size)"
        )
    try:
        values = [int(v) for v in size]
    except (TypeError, ValueError) as exc:
        raise KernelTunerImportError(f"problem size {size!r} holds a non-integer") from exc
    return {PROBLEM_DIM_NAMES[i] if i < 3 else f"d{i}": v for i, v in enumerate(values)}


def _std(samples: list[float]) -> float:
    # statistics.pstdev is exact (Fractions) and 10x slower than this on 11k records.
    mean = sum(samples) / len(samples)
    return math.sqrt(sum((s - mean) ** 2 for s in samples) / len(samples))


def _measurement(
    params: dict[str, Any],
    *,
    time: Any,
    samples: list[Any],
    compile_ms: Any,
    us_per_unit: float,
) -> Measurement:
    candidate = Candidate(backend=BACKEND, params=params)
    compile_ms = float(compile_ms) if isinstance(compile_ms, int | float) else None
    if isinstance(time, list):  # a T4 measurement may hold every run
        samples, time = time, statistics.median(t for t in time if isinstance(t, int | float))
    if isinstance(time, str) or time is None or not time > 0:
        error = time if isinstance(time, str) else "no time recorded"
        return Measurement(candidate=candidate, valid=False, error=error, compile_ms=compile_ms)
    samples_us = sorted(float(t) * us_per_unit for t in samples or [] if _positive(t))
    if not samples_us:
        samples_us = [float(time) * us_per_unit]
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


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _cache_measurements(doc: dict[str, Any]) -> tuple[list[Measurement], list[dict[str, Any]]]:
    records = [r for r in doc["cache"].values() if isinstance(r, dict)]
    keys = list(doc.get("tune_params_keys") or [])
    if not keys and isinstance(doc.get("tune_params"), dict):
        keys = list(doc["tune_params"])
    measurements = [
        _measurement(
            {k: r[k] for k in keys if k in r},
            time=r.get("time"),
            samples=r.get("times") or [],
            compile_ms=r.get("compile_time"),
            us_per_unit=1000.0,
        )
        for r in records
    ]
    return measurements, records


def _t4_measurements(doc: dict[str, Any]) -> tuple[list[Measurement], list[dict[str, Any]]]:
    metadata = doc.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    unit = str(metadata.get("timeunit") or "milliseconds").lower()
    if unit not in _US_PER_UNIT:
        raise KernelTunerImportError(f"T4 metadata.timeunit {unit!r} is not a unit of time")
    records = [r for r in doc["results"] if isinstance(r, dict)]
    measurements = []
    for record in records:
        times = record.get("times")
        times = times if isinstance(times, dict) else {}
        by_name = {
            m.get("name"): m.get("value")
            for m in record.get("measurements") or []
            if isinstance(m, dict)
        }
        invalidity = record.get("invalidity", "correct")
        time = by_name.get("time") if invalidity == "correct" else f"invalid: {invalidity}"
        measurements.append(
            _measurement(
                dict(record.get("configuration") or {}),
                time=time,
                samples=times.get("runtimes") or [],
                compile_ms=times.get("compilation", times.get("compilation_time")),
                us_per_unit=_US_PER_UNIT[unit],
            )
        )
    return measurements, records


def _created_at(records: list[dict[str, Any]]) -> datetime:
    stamps = [r["timestamp"] for r in records if isinstance(r.get("timestamp"), str)]
    if not stamps:
        return datetime(1970, 1, 1, tzinfo=UTC)
    try:
        latest = datetime.fromisoformat(max(stamps))
    except ValueError:
        return datetime(1970, 1, 1, tzinfo=UTC)
    return latest if latest.tzinfo else latest.replace(tzinfo=UTC)


def host_id_for(device_name: str) -> str:
    """Return a stable host id for imported data (it identifies the file's source, not a host)."""
    return hashlib.sha256(f"{SOURCE}:{device_name}".encode()).hexdigest()[:16]


def convert(
    doc: dict[str, Any],
    *,
    raw: bytes,
    device_name: str,
    hardware: Mapping[str, Any] | None = None,
    kernel: str | None = None,
    problem_size: Any = None,
) -> tuple[ProbeRun, ResolvedHardware]:
    """Convert one parsed document into a ProbeRun; return it with its hardware's origin.

    `hardware` holds spec fields the user gave (a flag, a JSON file); `kernel` and
    `problem_size` replace the header's (a T4 file has none).
    """
    kernel_name = str(kernel or _header(doc, "kernel_name") or "").strip()
    if not kernel_name:
        raise KernelTunerImportError("the file names no kernel: give --kernel NAME")
    size = problem_size if problem_size is not None else _header(doc, "problem_size")
    problem = ProblemKey(
        op=op_of(kernel_name),
        dtype="fp32",
        dims=problem_dims(size),
        variant=kernel_name[:MAX_VARIANT],
    )
    resolved = spec_for(device_name, hardware)
    if "cache" in doc and isinstance(doc["cache"], dict):
        measurements, records = _cache_measurements(doc)
    elif isinstance(doc.get("results"), list):
        measurements, records = _t4_measurements(doc)
    else:
        raise KernelTunerImportError("'cache' is not an object and 'results' is not a list")
    if not measurements:
        raise KernelTunerImportError("the file holds no configurations")
    if len(measurements) > MAX_MEASUREMENTS_PER_RUN:
        raise KernelTunerImportError(
            f"{len(measurements)} configurations exceed {MAX_MEASUREMENTS_PER_RUN} per run"
        )
    valid = [m for m in measurements if m.valid and m.median_us is not None]
    winner = min(valid, key=lambda m: m.median_us or float("inf")) if valid else None
    spec = resolved.spec
    identity = f"{hashlib.sha256(raw).hexdigest()}:{spec.fingerprint()}"
    if kernel or problem_size is not None:  # one file may be imported as several problems
        identity += f":{problem.key_hash()}"
    rationale = f"imported from Kernel Tuner ({len(measurements)} configurations, brute force)"
    if resolved.guessed:
        rationale += f"; {resolved.describe()}"
    run = ProbeRun(
        run_id=uuid.uuid5(RUN_NAMESPACE, identity),
        host_id=host_id_for(device_name),
        hardware=spec,
        problem=problem,
        measurements=measurements,
        winner_id=winner.candidate.id if winner else None,
        budget_ms=sum(_number(r.get("benchmark_time")) for r in records),
        compile_ms=sum(m.compile_ms or 0.0 for m in measurements),
        rationale=rationale[:4000],
        source=SOURCE,
        created_at=_created_at(records),
    )
    return run, resolved


def _number(value: Any) -> float:
    return float(value) if _positive(value) else 0.0


def import_cache(
    path: Path,
    *,
    device: str | None = None,
    hardware: Mapping[str, Any] | None = None,
    kernel: str | None = None,
    problem_size: Any = None,
) -> ImportedRun:
    """Read a Kernel Tuner file (.json or .json.gz) and return its run and hardware origin."""
    doc, raw = read_cache(path)
    name = device or str((hardware or {}).get("name") or "") or device_name_of(doc, path)
    try:
        run, resolved = convert(
            doc,
            raw=raw,
            device_name=name,
            hardware=hardware,
            kernel=kernel,
            problem_size=problem_size,
        )
    except KernelTunerImportError as exc:
        raise KernelTunerImportError(f"{path}: {exc}") from exc
    return ImportedRun(path=path, run=run, hardware=resolved)


def import_file(path: Path, *, device: str | None = None) -> ProbeRun:
    """Read a Kernel Tuner file and return its ProbeRun (see `import_cache`)."""
    return import_cache(path, device=device).run
