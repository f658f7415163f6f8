"""Shape families: k-means on log dims; a problem never seen borrows its family's winners."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans

from models.dataset import TuningData, add_relative_time
from models.reference import FAILED_LOG_REL
from tps.problem import ProblemKey

GEMM_DIMS = ("m", "n", "k")


def shape_vector(problem: ProblemKey, dim_names: tuple[str, ...]) -> np.ndarray:
    """Return log2 of the dims that families cluster on (log(M, N, K) for GEMM)."""
    return np.array([math.log2(problem.dims.get(name, 1)) for name in dim_names])


class ShapeFamilies:
    """Cluster one op's problems by shape and keep each family's winners.

    Winners are candidates ordered by their mean relative latency over the family's problems,
    per hardware and over all hardware.
    """

    def __init__(self, *, op: str, n_families: int = 8, seed: int = 0) -> None:
        self.op = op
        self.n_families = n_families
        self.seed = seed

    def fit(self, data: TuningData) -> ShapeFamilies:
        """Cluster the problems of `data` (rows of other ops are ignored)."""
        data = data.for_op(self.op)
        problems = dict(sorted(data.problems.items()))
        names: set[str] = set()
        for problem in problems.values():
            names.update(problem.dims)
        self.dim_names_ = GEMM_DIMS if self.op == "gemm" else tuple(sorted(names - {"batch"}))
        X = np.array([shape_vector(p, self.dim_names_) for p in problems.values()])
        n_clusters = max(1, min(self.n_families, len(np.unique(X, axis=0))))
        kmeans = KMeans(n_clusters=n_clusters, n_init=10, random_state=self.seed).fit(X)
        self.centers_ = kmeans.cluster_centers_
        self.problem_family_ = dict(zip(problems, (int(x) for x in kmeans.labels_), strict=True))
        frame = add_relative_time(data.frame.copy())
        frame["log_rel"] = frame["log_rel"].fillna(FAILED_LOG_REL)
        frame["family"] = frame["problem_hash"].map(self.problem_family_)
        self.winners_ = _winners(frame, ["family"])
        self.hw_winners_ = _winners(frame, ["family", "hw_key"])
        return self

    def family_of(self, problem: ProblemKey) -> int:
        """Return the family whose centre is nearest the problem's shape."""
        v = shape_vector(problem, self.dim_names_)
        return int(np.argmin(np.linalg.norm(self.centers_ - v, axis=1)))

    def winners(self, problem: ProblemKey, *, hw_key: str | None = None, k: int = 8) -> list[str]:
        """Return the family's best candidate ids, from `hw_key`'s own data when it has some."""
        family = self.family_of(problem)
        own = self.hw_winners_.get(f"{family}|{hw_key}") if hw_key else None
        return list((own or self.winners_.get(str(family), []))[:k])

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": {"op": self.op, "n_families": self.n_families, "seed": self.seed},
            "dim_names": list(self.dim_names_),
            "centers": self.centers_.tolist(),
            "problem_family": self.problem_family_,
            "winners": self.winners_,
            "hw_winners": self.hw_winners_,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ShapeFamilies:
        families = cls(**doc["params"])
        families.dim_names_ = tuple(doc["dim_names"])
        families.centers_ = np.array(doc["centers"], dtype=float)
        families.problem_family_ = dict(doc["problem_family"])
        families.winners_ = dict(doc["winners"])
        families.hw_winners_ = dict(doc["hw_winners"])
        return families


def _winners(frame: pd.DataFrame, by: list[str], keep: int = 64) -> dict[str, list[str]]:
    mean = frame.groupby([*by, "candidate_id"], sort=True)["log_rel"].mean().reset_index()
    out: dict[str, list[str]] = {}
    for key, rows in mean.groupby(by, sort=True):
        parts = key if isinstance(key, tuple) else (key,)
        name = "|".join(str(p) for p in parts)
        out[name] = rows.sort_values(["log_rel", "candidate_id"])["candidate_id"].tolist()[:keep]
    return out


def family_oracle_loss(
    data: TuningData, *, op: str, n_families: int = 8, seed: int = 0
) -> dict[str, Any]:
    """Measure what taking the family's winner costs against the oracle, problem by problem.

    Each problem is left out of the families it is scored against; its hardware's own data on
    the other problems of the family picks the winner. Needs at least two problems.
    """
    data = data.for_op(op)
    losses: list[float] = []
    for problem_hash, problem in sorted(data.problems.items()):
        rest = data.subset(data.frame["problem_hash"] != problem_hash)
        if rest.frame.empty:
            continue
        families = ShapeFamilies(op=op, n_families=n_families, seed=seed).fit(rest)
        rows = data.frame[data.frame["problem_hash"] == problem_hash]
        for hw_key, group in rows.groupby("hw_key", sort=True):
            times = group.set_index("candidate_id")["median_us"]
            best = times.min()
            picks = [c for c in families.winners(problem, hw_key=hw_key, k=64) if c in times]
            picked = next((times[c] for c in picks if np.isfinite(times[c])), np.nan)
            losses.append(float(picked / best - 1.0) if np.isfinite(picked) else np.inf)
    if not losses:
        return {"op": op, "workloads": 0, "note": "needs at least two problems of the op"}
    arr = np.array(losses)
    return {
        "op": op,
        "workloads": len(arr),
        "within_3pct": float(np.mean(arr <= 0.03)),
        "median_loss": float(np.median(arr)),
        "p95_loss": float(np.quantile(arr, 0.95)),
    }
