"""What evaluation reports: typed figures, written out as the JSON the CLI and the model
registry keep.

`HoldoutReport.as_dict()` is the document `tps evaluate --json` prints and a training job
stores under `metrics.reports`; the attributes are what the quality gate reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from models.metrics import MeanScores


@dataclass(frozen=True)
class SourceSummary(MeanScores):
    """One ranker's figures over the held-out hardware's problems (means)."""

    score_at_k: list[float]  # k = 1..20
    probes_to_3pct_share: float
    within_3pct_in_5pct_of_space: float


@dataclass(frozen=True)
class PolicySummary(SourceSummary):
    """The served policy's figures, its name, and the sources its first entries came from."""

    name: str
    near_distance: float
    lead_sources: list[str]


@dataclass(frozen=True)
class GateFigures:
    """The two figures the quality gate compares."""

    score_at_1: float | None
    score_at_5: float | None

    @classmethod
    def of(cls, scores: MeanScores) -> GateFigures:
        return cls(score_at_1=scores.score_at_1, score_at_5=scores.score_at_5)


@dataclass(frozen=True)
class Champion:
    """The active model's recipe scored on the same split as the challenger."""

    version: int
    policy: GateFigures
    model: GateFigures


@dataclass(frozen=True)
class ReliabilityBin:
    """One probability bin: its edges, its rows, the mean predicted and the observed rate."""

    bin: list[float]
    rows: int
    predicted: float
    observed: float


@dataclass(frozen=True)
class Reliability:
    """The Brier score and reliability table of served confidences against what happened."""

    brier: float | None
    rows: int
    table: list[ReliabilityBin]
    brier_base_rate: float | None = None
    positions: int | None = None  # how many first entries of each ranking were scored

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"brier": self.brier}
        if self.brier_base_rate is not None:
            out["brier_base_rate"] = self.brier_base_rate
        out |= {"rows": self.rows, "table": [asdict(b) for b in self.table]}
        if self.positions is not None:
            out["positions"] = self.positions
        return out


@dataclass(frozen=True)
class FoldFigures:
    """One candidate policy's figures on one inner fold of the policy choice."""

    score_at_1: float | None
    score_at_5: float | None
    probes_share: float  # the share of the candidates probed to come within 3% of the best


@dataclass(frozen=True)
class Fold:
    """One inner fold of the policy choice: the nearest baseline's figures and each policy's."""

    holdout: str
    baseline_nearest: GateFigures
    policies: dict[str, FoldFigures]  # by policy name

    def as_dict(self) -> dict[str, Any]:
        return {
            "holdout": self.holdout,
            "baseline_nearest": asdict(self.baseline_nearest),
            **{name: asdict(figures) for name, figures in self.policies.items()},
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Fold:
        return cls(
            holdout=str(doc["holdout"]),
            baseline_nearest=GateFigures(**doc["baseline_nearest"]),
            policies={
                name: FoldFigures(**figures)
                for name, figures in doc.items()
                if name not in ("holdout", "baseline_nearest")
            },
        )


@dataclass(frozen=True)
class ChoiceSummary:
    """How the served policy was chosen: its name, the rule, each inner fold's figures."""

    name: str
    rule: str
    folds: list[Fold]
    calibrated: bool
    latency: str = "anchored"  # which latency predicted_us serves (models.ranking.LATENCY_SOURCES)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rule": self.rule,
            "folds": [fold.as_dict() for fold in self.folds],
            "calibrated": self.calibrated,
            "latency": self.latency,
        }


@dataclass(frozen=True)
class HoldoutReport:
    """Figures of every ranker on one held-out configuration of one op.

    Figures are means over the held-out hardware's problems. `baseline_nearest` is None when
    no known device measured the problems; `champion` is set by the quality gate.
    """

    holdout: str
    op: str
    n_candidates: int
    n_problems: int
    n_train_rows: int
    model: SourceSummary
    baseline_nearest: SourceSummary | None
    baseline_random: SourceSummary
    policy: PolicySummary
    candidate_policies: dict[str, MeanScores]
    policy_choice: ChoiceSummary
    calibration: Reliability
    champion: Champion | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the report as JSON-able data (an absent baseline is `{}`)."""
        out: dict[str, Any] = {
            "holdout": self.holdout,
            "op": self.op,
            "n_candidates": self.n_candidates,
            "n_problems": self.n_problems,
            "n_train_rows": self.n_train_rows,
            "model": asdict(self.model),
            "baseline_nearest": asdict(self.baseline_nearest) if self.baseline_nearest else {},
            "baseline_random": asdict(self.baseline_random),
            "policy": asdict(self.policy),
            "candidate_policies": {k: v.as_dict() for k, v in self.candidate_policies.items()},
            "policy_choice": self.policy_choice.as_dict(),
            "calibration": self.calibration.as_dict(),
        }
        if self.champion is not None:
            out["champion"] = asdict(self.champion)
        return out
