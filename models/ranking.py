"""Rankers: what orders the candidates of one (hardware, problem), best guess first.

Every ranker answers from the same `SourceRankings` (the model's scores, the nearest known
device's measurements, the consensus of known devices) through one method, `rank`, as a cost
model does in a tuner: the model alone, the nearest-device and random-order baselines, and
the blend policies (models.policy.BlendPolicy) that serve priors. Evaluation scores them all
alike (models.scoring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from models.estimator import LatencyModel
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

# Draws that estimate what a random order achieves.
N_RANDOM_ORDERS = 32


def order_by(values: np.ndarray, *, ascending: bool) -> np.ndarray:
    """Return positions sorted by value (NaN last), ties by position."""
    v = np.asarray(values, dtype=float)
    key = np.where(np.isfinite(v), v if ascending else -v, np.inf)
    return np.argsort(key, kind="stable")


# The latencies a policy may serve. `regressor`: the plain regressor's. The others are the
# anchor (a candidate's time on the closest known devices, carried here by the roofline
# bound's ratio) plus a share of the anchored booster's correction of it: all of it
# (`anchored`), part (`anchored*0.5`, ...), or none (`carried`). Learned from a few devices
# with one problem each, the correction carries their own quirks to the next device: on the
# Kernel Tuner convolution it took the held-out W7800 from 54% off to 187% off. The share is
# chosen with the policy, by the same inner folds (models.selection.choose_latency).
CORRECTIONS = {
    "anchored": 1.0,
    "anchored*0.75": 0.75,
    "anchored*0.5": 0.5,
    "anchored*0.25": 0.25,
    "carried": 0.0,
}
LATENCY_SOURCES = ("anchored", "regressor", *(name for name in CORRECTIONS if name != "anchored"))


def served_latency(frame: pd.DataFrame, latency: str) -> np.ndarray:
    """Return the latency (µs) `latency` serves for each row of a `predict_frame`."""
    if latency == "regressor":
        regressor: np.ndarray = frame["regressor_us"].to_numpy()
        return regressor
    share = CORRECTIONS.get(latency, 1.0)
    anchored: np.ndarray = frame["predicted_us"].to_numpy()
    if share == 1.0 or "carried_us" not in frame:
        return anchored
    with np.errstate(all="ignore"):
        carried = np.log(frame["carried_us"].to_numpy())
        served: np.ndarray = np.exp(carried + share * (np.log(anchored) - carried))
    return served


def with_latency(frame: pd.DataFrame, latency: str) -> pd.DataFrame:
    """Return `frame` with `predicted_us` the latency that `latency` serves."""
    if latency == "anchored":
        return frame
    return frame.assign(predicted_us=served_latency(frame, latency))


@dataclass
class SourceRankings:
    """The candidate orders each source proposes for one (hardware, problem)."""

    frame: pd.DataFrame  # the model's predict_frame
    orders: dict[str, np.ndarray]
    nearest_key: str | None
    nearest_distance: float | None
    nearest_coverage: float = 0.0  # the share of the candidates the nearest device measured
    # What the nearest device measured for each candidate (NaN where it did not).
    nearest_us: np.ndarray | None = None


def source_rankings(
    model: LatencyModel,
    hardware: HardwareSpec,
    problem: ProblemKey,
    frame: pd.DataFrame,
) -> SourceRankings:
    """Return the model's, the nearest device's and the same-vendor consensus orders."""
    reference = model.reference_
    own = hardware.fingerprint()
    ref_problem = reference.closest_problem(problem, exclude=own)
    nearest = (
        reference.nearest_hardware(hardware, ref_problem, exclude=own) if ref_problem else None
    )
    orders = {"model": order_by(frame["score"].to_numpy(), ascending=False)}
    coverage = 0.0
    times = None
    if nearest is not None and ref_problem is not None:
        times = reference.measured_us(nearest[0], ref_problem, frame["candidate_id"].tolist())
        assert times is not None  # nearest_hardware only names devices that measured it
        orders["nearest"] = order_by(times, ascending=True)
        coverage = reference.coverage(nearest[0], ref_problem, frame["candidate_id"].tolist())
    consensus = frame["ref_vendor"] if "ref_vendor" in frame else None
    if consensus is None or consensus.isna().all():
        consensus = frame["ref_mean"] if "ref_mean" in frame else None
    if consensus is not None and consensus.notna().any():
        orders["consensus"] = order_by(consensus.to_numpy(), ascending=True)
    return SourceRankings(
        frame=frame,
        orders=orders,
        nearest_key=nearest[0] if nearest else None,
        nearest_distance=nearest[1] if nearest else None,
        nearest_coverage=coverage,
        nearest_us=times,
    )


@dataclass(frozen=True)
class Ranking:
    """A ranker's answer: candidate positions best first, the source of each entry, and the
    latencies the ranker predicts (None: it predicts none).

    A random order answers with several draws, scored by their mean; the others with one.
    """

    orders: tuple[np.ndarray, ...]
    sources: tuple[str, ...] = ()
    predicted_us: np.ndarray | None = None

    @property
    def order(self) -> np.ndarray:
        return self.orders[0]


class Ranker(Protocol):
    """Order the candidates that `rankings` describes; None when it has nothing to say."""

    def rank(self, rankings: SourceRankings, *, limit: int | None = None) -> Ranking | None: ...


class ModelRanker:
    """The model alone: candidates by its ranking score, with its latency regressor's."""

    def rank(self, rankings: SourceRankings, *, limit: int | None = None) -> Ranking:
        order = rankings.orders["model"][:limit]
        return Ranking(
            orders=(order,),
            sources=("model",) * len(order),
            predicted_us=rankings.frame["predicted_us"].to_numpy(),
        )


class NearestRanker:
    """Copy the ranking measured on the most similar known device (the baseline to beat)."""

    def rank(self, rankings: SourceRankings, *, limit: int | None = None) -> Ranking | None:
        if "nearest" not in rankings.orders:
            return None
        order = rankings.orders["nearest"][:limit]
        return Ranking(
            orders=(order,), sources=("nearest",) * len(order), predicted_us=rankings.nearest_us
        )


@dataclass(frozen=True)
class RandomRanker:
    """Random orders (the floor): `draws` permutations from a generator seeded with `seed`."""

    seed: int = 0
    draws: int = N_RANDOM_ORDERS

    def rank(self, rankings: SourceRankings, *, limit: int | None = None) -> Ranking:
        rng = np.random.default_rng(self.seed)
        n = len(rankings.frame)
        return Ranking(orders=tuple(rng.permutation(n)[:limit] for _ in range(self.draws)))
