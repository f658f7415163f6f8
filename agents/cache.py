"""The local cache of probe winners: an LRU keyed by problem, hardware and software versions.

It is persisted as JSON, and speaks PyTorch TunableOp's results CSV both ways, so PyTorch
can load TPS's choices and TPS can read what users already tuned.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.bans import write_json_atomic
from agents.errors import CacheError
from agents.tunableop_csv import (
    TunableFile,
    TunableResult,
    read_file,
    solution_backend,
    write_file,
)
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

DEFAULT_CAPACITY = 2048
# Entries imported from a TunableOp file belong to the host that tuned them, whose spec the
# file does not record; they answer for any hardware until a probe on this host replaces them.
IMPORTED = "tunableop-import"
# Only these backends can be named in a TunableOp file; other winners are not exported.
TUNABLEOP_SOLUTIONS = frozenset({"vendor-default", "hipblaslt", "rocblas"})
# The results files TPS writes, by the backends each may name. On ROCm, TunableOp tunes among
# hipBLASLt and rocBLAS solutions (PYTORCH_TUNABLEOP_HIPBLASLT_ENABLED / _ROCBLAS_ENABLED turn
# either off); a file for one library names only its solutions and `Default`.
EXPORT_FORMATS: dict[str, frozenset[str]] = {
    "tunableop": TUNABLEOP_SOLUTIONS,
    "hipblaslt": frozenset({"vendor-default", "hipblaslt"}),
    "rocblas": frozenset({"vendor-default", "rocblas"}),
}


class CacheEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: ProblemKey
    hardware_fingerprint: str
    software_key: str
    winner: Candidate
    median_us: float | None = None
    default_us: float | None = None
    run_id: str | None = None
    source: str = "probe"
    torch_version: str | None = None
    blas_version: str | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def speedup(self) -> float | None:
        if self.median_us and self.default_us:
            return self.default_us / self.median_us
        return None


def cache_key(problem: ProblemKey, fingerprint: str, software_key: str) -> str:
    return f"{problem.key_hash()}|{fingerprint}|{software_key}"


class ProbeCache:
    """An LRU of winners; `get` refreshes an entry, `put` evicts the least recently used."""

    def __init__(self, path: Path | None = None, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("cache capacity must be at least 1")
        self.path = path
        self.capacity = capacity
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[CacheEntry]:
        """Return entries from least to most recently used."""
        return list(self._entries.values())

    def get(self, problem: ProblemKey, hardware: HardwareSpec) -> CacheEntry | None:
        for key in (
            cache_key(problem, hardware.fingerprint(), hardware.software_key()),
            cache_key(problem, IMPORTED, ""),
        ):
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        return None

    def lookup(self, problem: ProblemKey, hardware: HardwareSpec) -> tuple[CacheEntry | None, bool]:
        """Return (entry, stale): this software's entry, or the newest from other versions.

        A stale entry is a winner measured under another driver, BLAS, torch or Triton:
        the caller re-validates it before use rather than trusting or dropping it.
        """
        entry = self.get(problem, hardware)
        if entry is not None:
            return entry, False
        fingerprint = hardware.fingerprint()
        for candidate in reversed(self._entries.values()):
            if candidate.hardware_fingerprint == fingerprint and candidate.problem == problem:
                return candidate, True
        return None, False

    def forget(self, problem: ProblemKey, hardware: HardwareSpec, candidate: Candidate) -> bool:
        """Drop every entry of (problem, hardware) won by `candidate`; return whether any was."""
        fingerprint = hardware.fingerprint()
        doomed = [
            key
            for key, e in self._entries.items()
            if e.problem == problem
            and e.winner.id == candidate.id
            and e.hardware_fingerprint in (fingerprint, IMPORTED)
        ]
        for key in doomed:
            del self._entries[key]
        return bool(doomed)

    def put(self, run: ProbeRun) -> CacheEntry | None:
        """Remember a probe's winner; a run without a winner changes nothing."""
        if run.winner_id is None:
            return None
        by_id = {m.candidate.id: m for m in run.measurements}
        winner = by_id[run.winner_id]
        default = by_id.get(Candidate(backend="vendor-default").id)
        entry = CacheEntry(
            problem=run.problem,
            hardware_fingerprint=run.hardware.fingerprint(),
            software_key=run.hardware.software_key(),
            winner=winner.candidate,
            median_us=winner.median_us,
            default_us=default.median_us if default is not None else None,
            run_id=str(run.run_id),
            torch_version=run.hardware.torch_version,
            blas_version=run.hardware.blas_version,
        )
        self._insert(entry)
        return entry

    def merge(self, entries: list[CacheEntry]) -> None:
        """Insert entries in order; an entry replaces one with the same key."""
        for entry in entries:
            self._insert(entry)

    def _insert(self, entry: CacheEntry) -> None:
        key = cache_key(entry.problem, entry.hardware_fingerprint, entry.software_key)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: Path | None = None) -> None:
        target = path or self.path
        if target is None:
            raise CacheError("the cache has no path to save to")
        write_json_atomic(
            Path(target),
            {
                "version": 1,
                "capacity": self.capacity,
                "entries": [e.model_dump(mode="json") for e in self._entries.values()],
            },
        )

    @classmethod
    def load(cls, path: str | Path, capacity: int | None = None) -> ProbeCache:
        """Read a cache file; a missing file gives an empty cache at that path."""
        path = Path(path)
        if not path.exists():
            return cls(path, capacity or DEFAULT_CAPACITY)
        try:
            raw = json.loads(path.read_text())
            cache = cls(path, capacity or int(raw.get("capacity", DEFAULT_CAPACITY)))
            for row in raw.get("entries", []):
                cache._insert(CacheEntry.model_validate(row))
        except (OSError, ValueError, ValidationError) as exc:
            raise CacheError(f"cache file {path} is unreadable: {exc}") from exc
        return cache

    # -- TunableOp -----------------------------------------------------------------------
    def export_tunableop_csv(
        self,
        path: str | Path,
        *,
        validators: dict[str, str] | None = None,
        solutions: frozenset[str] = TUNABLEOP_SOLUTIONS,
    ) -> int:
        """Write GEMM winners PyTorch can run by name; return how many rows were written.

        TunableOp names only its own solutions (`Default`, hipBLASLt and rocBLAS ids), so
        cuBLASLt, Triton and padded winners have no row; `solutions` narrows the backends
        further (EXPORT_FORMATS). `validators` should be what
        `torch.cuda.tunable.get_validators()` says on the host that will read the file.
        """
        rows: dict[tuple[str, str], TunableResult] = {}
        torch_version = None
        for e in self._entries.values():
            if e.problem.op != "gemm" or e.winner.backend not in solutions & TUNABLEOP_SOLUTIONS:
                continue
            if e.problem.batch > 1 or e.problem.stride_a is not None:
                continue
            op_sig, params_sig = e.problem.tunableop_signature()
            solution = str(e.winner.params.get("solution", "Default"))
            time_ms = e.median_us / 1000 if e.median_us else None
            rows[(op_sig, params_sig)] = TunableResult(op_sig, params_sig, solution, time_ms)
            torch_version = torch_version or e.torch_version
        found = dict(validators or {})
        if torch_version and "PT_VERSION" not in found:
            found["PT_VERSION"] = torch_version.split("+")[0]
        write_file(path, TunableFile(validators=found, results=list(rows.values())))
        return len(rows)

    def import_tunableop_csv(
        self, path: str | Path, *, hardware: HardwareSpec | None = None
    ) -> int:
        """Read a TunableOp results file; return how many GEMM entries were added.

        With `hardware`, entries are keyed to it; without, they answer for any hardware.
        """
        data = read_file(path)
        added = 0
        for r in data.results:
            if not r.op_signature.startswith("GemmTunableOp_"):
                continue  # bias, batched and scaled GEMMs carry more than a ProblemKey holds
            try:
                problem = ProblemKey.from_tunableop(r.op_signature, r.params_signature)
            except ValueError:
                continue  # ops other than GEMM, or dtypes TPS does not model
            backend = solution_backend(r.solution)
            params = {} if backend == "vendor-default" else {"solution": r.solution}
            self._insert(
                CacheEntry(
                    problem=problem,
                    hardware_fingerprint=hardware.fingerprint() if hardware else IMPORTED,
                    software_key=hardware.software_key() if hardware else "",
                    winner=Candidate(backend=backend, params=params),
                    median_us=r.time_ms * 1000 if r.time_ms else None,
                    source="tunableop",
                    torch_version=data.validators.get("PT_VERSION"),
                )
            )
            added += 1
        return added
