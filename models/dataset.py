"""Turn probe runs into a table: one row per (hardware, problem, candidate) measured."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

KEY_COLUMNS = ["hw_key", "problem_hash", "candidate_id"]
GROUP_COLUMNS = ["hw_key", "problem_hash"]


class MedianRow(NamedTuple):
    """One (hardware, problem, candidate) of an op: the median over runs of its valid medians."""

    op: str
    hw_key: str
    problem_hash: str
    candidate_id: str
    median_us: float | None  # None: never ran validly there


def hardware_label(hardware: HardwareSpec) -> str:
    """Return the name a hardware configuration goes by in reports (`NVIDIA H200@66u`)."""
    if hardware.unit_limit and hardware.unit_limit < hardware.compute_units:
        return f"{hardware.name}@{hardware.unit_limit}u"
    return hardware.name


@dataclass
class TuningData:
    """Measurements of one or more ops, with the specs behind their keys.

    `frame` has one row per (hw_key, problem_hash, candidate_id): `median_us` is the median
    over runs of the valid medians (NaN when the candidate never ran validly there).
    """

    frame: pd.DataFrame
    hardware: dict[str, HardwareSpec] = field(default_factory=dict)
    problems: dict[str, ProblemKey] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return sorted(self.frame["op"].unique())

    def hardware_labels(self) -> dict[str, str]:
        """Return hw_key -> label."""
        return {k: hardware_label(v) for k, v in self.hardware.items()}

    def subset(self, mask: pd.Series | np.ndarray) -> TuningData:
        """Return the rows selected by `mask`, with only the specs they use."""
        frame = self.frame[mask].reset_index(drop=True)
        return TuningData(
            frame=frame,
            hardware={k: self.hardware[k] for k in frame["hw_key"].unique()},
            problems={k: self.problems[k] for k in frame["problem_hash"].unique()},
            candidates={k: self.candidates[k] for k in frame["candidate_id"].unique()},
        )

    def for_op(self, op: str) -> TuningData:
        return self.subset(self.frame["op"] == op)

    @classmethod
    def from_runs(cls, runs: Iterable[ProbeRun]) -> TuningData:
        """Build the table from probe runs; repeated measurements are merged by median."""
        hardware: dict[str, HardwareSpec] = {}
        problems: dict[str, ProblemKey] = {}
        candidates: dict[str, Candidate] = {}
        columns: dict[str, list[object]] = {
            "hw_key": [],
            "op": [],
            "problem_hash": [],
            "candidate_id": [],
            "median_us": [],
        }
        for run in runs:
            hw_key = run.hardware.fingerprint()
            problem_hash = run.problem.key_hash()
            hardware.setdefault(hw_key, run.hardware)
            problems.setdefault(problem_hash, run.problem)
            for m in run.measurements:
                cid = m.candidate.id
                candidates.setdefault(cid, m.candidate)
                columns["hw_key"].append(hw_key)
                columns["op"].append(run.problem.op)
                columns["problem_hash"].append(problem_hash)
                columns["candidate_id"].append(cid)
                ok = m.valid and m.median_us is not None
                columns["median_us"].append(m.median_us if ok else np.nan)
        raw = pd.DataFrame(columns)
        frame = (
            raw.groupby(["op", *KEY_COLUMNS], sort=True, observed=True)["median_us"]
            .median()
            .reset_index()
        )
        return cls._of(frame, hardware=hardware, problems=problems, candidates=candidates)

    @classmethod
    def from_medians(
        cls,
        rows: Iterable[MedianRow | tuple[str, str, str, str, float | None]],
        *,
        hardware: Mapping[str, HardwareSpec],
        problems: Mapping[str, ProblemKey],
        candidates: Mapping[str, Candidate],
    ) -> TuningData:
        """Build the table from medians already merged per key (as a database aggregates them).

        `rows` come sorted by (op, hw_key, problem_hash, candidate_id), as `from_runs` sorts
        them; the mappings hold the specs of the keys the rows name.
        """
        frame = pd.DataFrame(list(rows), columns=list(MedianRow._fields))
        frame["median_us"] = frame["median_us"].astype(float)
        return cls._of(
            frame, hardware=dict(hardware), problems=dict(problems), candidates=dict(candidates)
        )

    @classmethod
    def _of(
        cls,
        frame: pd.DataFrame,
        *,
        hardware: dict[str, HardwareSpec],
        problems: dict[str, ProblemKey],
        candidates: dict[str, Candidate],
    ) -> TuningData:
        frame["valid"] = frame["median_us"].notna()
        labels = {k: hardware_label(v) for k, v in hardware.items()}
        frame["hw_label"] = frame["hw_key"].map(labels)
        return cls(frame=frame, hardware=hardware, problems=problems, candidates=candidates)


def add_relative_time(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `log_rel` = log(time / best time in the group), NaN for invalid rows."""
    best = frame.groupby(GROUP_COLUMNS, observed=True)["median_us"].transform("min")
    frame["log_rel"] = np.log(frame["median_us"] / best)
    return frame
