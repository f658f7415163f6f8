"""The rows of one batch: deduplicated and checked against their columns.

A plan holds plain values only (tuples of strings, numbers, UUIDs and datetimes), so that a
batch validated in a process of its own comes back to the API process cheaply.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from services.profiler_api.errors import Unprocessable
from services.profiler_api.ingest.repository import MeasurementValues, RunRow
from tps.hardware import MEASURED_FIELDS, SOFTWARE_FIELDS, HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun, ProbeRunBatch

# A measurement's values after its run id, in the order of the COPY's columns.
MeasurementTail = tuple[Any, ...]
INT4_MAX = 2**31 - 1
# Run ids are the agents' own: when another organisation already holds one, the run is
# stored under an id derived from the organisation and the sent id, so that the sender's
# answer (accepted, then duplicate) never tells it the id exists elsewhere.
_RUN_ALIASES = uuid.UUID("5b0f2a4e-7c1d-4f3a-9d6b-2e8c1a7f4b90")


def org_run_id(org_id: int, run_id: uuid.UUID) -> uuid.UUID:
    """Return the id that organisation `org_id` stores run `run_id` under on a clash."""
    return uuid.uuid5(_RUN_ALIASES, f"{org_id}/{run_id}")


_SOFTWARE_FIELDS = set(SOFTWARE_FIELDS)  # model_dump_json wants a set
# What each run keeps of its host's spec beside the hardware row (the configuration as first
# seen): its software versions, and measurements that vary between hosts of one configuration.
_PER_RUN_FIELDS = sorted(SOFTWARE_FIELDS | MEASURED_FIELDS)


@dataclass(frozen=True)
class PlannedRun:
    row: RunRow
    measurements: list[MeasurementTail]

    @property
    def hardware_id(self) -> str:
        return self.row[3]

    @property
    def problem_hash(self) -> str:
        return self.row[4]


@dataclass
class IngestPlan:
    """The rows of one batch, deduplicated, ready for one statement per table."""

    org_id: int
    hardware: dict[str, tuple[str, ...]] = field(default_factory=dict)
    problems: dict[str, tuple[str, ...]] = field(default_factory=dict)
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    runs: dict[uuid.UUID, PlannedRun] = field(default_factory=dict)
    repeated: list[uuid.UUID] = field(default_factory=list)
    # The runs of a batch share a few devices: a fingerprint (a sorted JSON dump and a
    # SHA-256) is computed once per distinct spec.
    _fingerprints: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_batch(cls, batch: ProbeRunBatch, *, org_id: int) -> IngestPlan:
        """Build the rows of `batch`; a run id repeated inside the batch is a duplicate."""
        plan = cls(org_id=org_id)
        for index, run in enumerate(batch.runs):
            if run.run_id in plan.runs:
                plan.repeated.append(run.run_id)
                continue
            plan.runs[run.run_id] = plan._add_run(run, index)
        return plan

    def _add_run(self, run: ProbeRun, index: int) -> PlannedRun:
        hardware = run.hardware
        fingerprint = self._hardware_id(hardware)
        problem_hash = self._problem_id(run.problem)
        measurements: list[MeasurementTail] = []
        for ordinal, m in enumerate(run.measurements):
            # Binary COPY would silently wrap a count too large for its int4 column.
            if m.samples > INT4_MAX or m.outliers_rejected > INT4_MAX:
                field = "samples" if m.samples > INT4_MAX else "outliers_rejected"
                raise Unprocessable(
                    f"runs.{index}.measurements.{ordinal}.{field}: must be at most {INT4_MAX}"
                )
            candidate = m.candidate
            candidate_id = candidate.id
            if candidate_id not in self.candidates:
                params = json.dumps(candidate.params, sort_keys=True)
                self.candidates[candidate_id] = (candidate_id, candidate.backend, params)
            measurements.append(
                (
                    ordinal,
                    candidate_id,
                    m.median_us,
                    m.p10_us,
                    m.p90_us,
                    m.std_us,
                    m.samples,
                    m.outliers_rejected,
                    m.valid,
                    m.error,
                    m.compile_ms,
                )
            )
        software = json.dumps({name: getattr(hardware, name) for name in _PER_RUN_FIELDS})
        row: RunRow = (
            run.run_id,
            self.org_id,
            run.host_id,
            fingerprint,
            problem_hash,
            run.winner_id,
            run.budget_ms,
            run.compile_ms,
            run.telemetry.model_dump_json() if run.telemetry else None,
            run.priors.model_dump_json(),
            software,
            run.rationale,
            run.agent_version,
            run.source,
            run.created_at,
        )
        return PlannedRun(row=row, measurements=measurements)

    def _hardware_id(self, hardware: HardwareSpec) -> str:
        spec = hardware.model_dump_json(exclude=_SOFTWARE_FIELDS)
        fingerprint = self._fingerprints.get(spec)
        if fingerprint is None:
            fingerprint = self._fingerprints[spec] = hardware.fingerprint()
            row = (fingerprint, hardware.vendor, hardware.arch, hardware.name, spec)
            self.hardware.setdefault(fingerprint, row)
        return fingerprint

    def _problem_id(self, problem: ProblemKey) -> str:
        problem_hash = problem.key_hash()
        if problem_hash not in self.problems:
            self.problems[problem_hash] = (
                problem_hash,
                problem.canonical(),
                problem.op,
                problem.dtype,
                json.dumps(problem.dims, sort_keys=True),
                problem.model_dump_json(),
            )
        return problem_hash

    def measurement_rows(
        self, run_ids: set[uuid.UUID] | None = None
    ) -> Iterator[MeasurementValues]:
        """Yield the measurement rows of the runs in `run_ids` (all runs when None)."""
        for run_id, planned in self.runs.items():
            if run_ids is not None and run_id not in run_ids:
                continue
            for values in planned.measurements:
                yield (run_id, *values)

    def aliased(self, run_ids: list[uuid.UUID]) -> IngestPlan:
        """Return a plan of the runs `run_ids` only, each keyed by its organisation's alias."""
        plan = IngestPlan(
            org_id=self.org_id,
            hardware=self.hardware,
            problems=self.problems,
            candidates=self.candidates,
        )
        for run_id in run_ids:
            planned = self.runs[run_id]
            alias = org_run_id(self.org_id, run_id)
            row: RunRow = (alias, *planned.row[1:])
            plan.runs[alias] = PlannedRun(row=row, measurements=planned.measurements)
        return plan

    def run_rows(self) -> list[RunRow]:
        return [planned.row for planned in self.runs.values()]

    def measurement_count(self, run_ids: set[uuid.UUID]) -> int:
        return sum(len(self.runs[run_id].measurements) for run_id in run_ids)
