"""The latency model of one op: a LambdaRank ranker and a log-latency regressor.

Rows are (hardware, problem, candidate). The ranker is grouped by (hardware, problem) and
learns relevance labels graded by how close a candidate comes to the group's best; the
regressor predicts log latency. Both see the same features: the problem, the candidate's
parameters, the hardware spec, their ratios, and reference features (how the candidate did,
relative to the best, on the other known devices; computed leaving the row's own device out,
so that training sees what prediction for a new device will see).

`predicted_us` comes from a third booster, anchored: it learns how far a candidate's latency
lies from what it measured on the closest known (device, problem), carried over by the ratio
of their roofline bounds (`Reference.anchor_columns`), or from the roofline bound alone where
no device ran it. Trees cannot extrapolate an absolute latency to a device faster or slower
than every one they saw; a ratio to a measured neighbour they can. The ranking keeps the
unanchored regressor: across vendors, with a handful of devices, the anchored one ranked worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from models.dataset import GROUP_COLUMNS, TuningData, add_relative_time
from models.features import CandidateBlock, candidate_table, feature_columns, feature_rows
from models.reference import ANCHOR_EXTRAS, ANCHOR_FEATURES, Reference
from tps.candidate import Candidate
from tps.errors import TPSError
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

MAX_LABEL = 30  # LightGBM's default label_gain covers labels 0..30
# Prediction runs in one thread (`n_jobs` is for training): a query's thousand rows take
# ~2.5 ms per booster, and on a busy two-core box a second OpenMP thread that is descheduled
# stalls the first (median 13 ms per booster with two threads, 2.7 ms with one).
PREDICT_THREADS = 1


class ModelError(TPSError):
    """A model used before it is fitted, or asked about something it cannot answer."""


class LatencyModel:
    """Rank candidates and predict their latency for (hardware, problem), for one op.

    Parameters are stored as given; `fit` sets the fitted state (names ending in `_`).
    """

    _block_cache: CandidateBlock | None  # built on first use (`warm_up`), dropped by `fit`
    candidates_: dict[str, Candidate]  # set by `fit`
    latency_: lgb.Booster | None  # set by `fit`: None when not anchored
    # set by `fit`: the dtypes whose training rows were carried from another dtype's
    # measurements (None: an artifact from before the problem's level anchored a candidate,
    # which starts such a candidate from the roofline bound and corrects every row)
    crossed_dtypes_: frozenset[str] | None = None

    def __init__(
        self,
        *,
        op: str,
        n_estimators: int = 200,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        colsample: float = 0.8,
        label_step: float = 0.02,
        max_group_rows: int = 2048,
        reference_features: bool = True,
        seed: int = 0,
        n_jobs: int = 2,
        rows_per_tree: int = 100_000,
        anchored: bool = True,
    ) -> None:
        self.op = op
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.colsample = colsample
        self.label_step = label_step
        self.max_group_rows = max_group_rows
        self.reference_features = reference_features
        self.seed = seed
        self.n_jobs = n_jobs
        self.rows_per_tree = rows_per_tree
        self.anchored = anchored

    def get_params(self) -> dict[str, Any]:
        """Return the constructor parameters (as scikit-learn estimators do)."""
        names = (
            "op n_estimators learning_rate num_leaves min_child_samples colsample "
            "label_step max_group_rows reference_features seed n_jobs rows_per_tree anchored"
        ).split()
        return {name: getattr(self, name) for name in names}

    # -- features -----------------------------------------------------------------------

    def _features(self, data: TuningData, keys: pd.DataFrame, *, oof: bool) -> pd.DataFrame:
        frame = feature_rows(
            hardware=data.hardware,
            problems=data.problems,
            candidates=data.candidates,
            keys=keys,
            op=self.op,
            known_candidates=self._known_candidates(),
        )
        if self.reference_features:

            def reference(hw_key: str, problem_hash: str, ids: np.ndarray) -> dict[str, Any] | None:
                ref_problem = self.reference_.closest_problem(
                    data.problems[problem_hash], exclude=hw_key if oof else None
                )
                if ref_problem is None:
                    return None
                return self.reference_.feature_columns(
                    data.hardware[hw_key], ref_problem, ids, exclude=hw_key if oof else None
                )

            columns = _per_group(keys, reference)
            if columns:
                frame = frame.join(pd.DataFrame(columns, index=keys.index))
        return frame

    def _anchors(self, data: TuningData, keys: pd.DataFrame, *, oof: bool) -> pd.DataFrame:
        """Return the anchor columns (`Reference.anchor_columns`) of every row of `keys`."""
        columns = _per_group(
            keys,
            lambda hw_key, problem_hash, ids: self.reference_.anchor_columns(
                data.hardware[hw_key],
                data.problems[problem_hash],
                ids,
                exclude=hw_key if oof else None,
            ),
        )
        return pd.DataFrame(columns, index=keys.index, columns=[*ANCHOR_FEATURES, *ANCHOR_EXTRAS])

    def _latency_matrix(self, features: pd.DataFrame, anchors: pd.DataFrame) -> np.ndarray:
        matrix: np.ndarray = (
            features.join(anchors)
            .reindex(columns=self.latency_feature_names_)
            .to_numpy(dtype=np.float64)
        )
        return matrix

    def _known_candidates(self) -> pd.DataFrame | None:
        """Return the training candidates' features, computed once per fitted model."""
        if not hasattr(self, "candidates_"):
            return None
        if getattr(self, "_candidate_cache", None) is None:
            self._candidate_cache = candidate_table(self.candidates_)
        return self._candidate_cache

    def warm_up(self) -> LatencyModel:
        """Build what every prediction reuses now, not in the first query after a load."""
        self._check_fitted()
        self._candidate_block()
        self.reference_.warm_up()
        return self

    def _candidate_block(self) -> CandidateBlock:
        """Return the training candidates' feature columns, built once per fitted model."""
        block = getattr(self, "_block_cache", None)
        if block is None:
            table = self._known_candidates()
            assert table is not None
            block = self._block_cache = CandidateBlock.of(table)
        return block

    def _matrix(self, frame: pd.DataFrame) -> np.ndarray:
        matrix: np.ndarray = frame.reindex(columns=self.feature_names_).to_numpy(dtype=np.float64)
        return matrix

    def _lgb_params(self, objective: str, rows: int = 0) -> dict[str, Any]:
        params: dict[str, Any] = {
            "objective": objective,
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_child_samples": self.min_child_samples,
            "colsample_bytree": self.colsample,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": self.n_jobs,
            "verbose": -1,
        }
        if objective == "lambdarank":
            params["lambdarank_truncation_level"] = 64
            params["eval_at"] = [1, 5]
        if rows > self.rows_per_tree:
            # Past this many rows each tree learns from a fresh random sample of them
            # (LightGBM's bagging; whole queries for the ranker): a tree's cost stops
            # growing with the fleet's data, and every row still takes part.
            params["bagging_fraction"] = self.rows_per_tree / rows
            params["bagging_freq"] = 1
            if objective == "lambdarank":
                params["bagging_by_query"] = True
        return params

    # -- training -----------------------------------------------------------------------

    def _labels(self, frame: pd.DataFrame) -> np.ndarray:
        steps = np.floor(frame["log_rel"].to_numpy() / math.log1p(self.label_step))
        labels = np.clip(MAX_LABEL - steps, 0, MAX_LABEL)
        return np.where(np.isfinite(labels), labels, 0).astype(int)

    def _ranking_order(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Return row positions ordered into query chunks, and the chunks' sizes."""
        rng = np.random.default_rng(self.seed)
        labels = frame.index.to_numpy()
        # the groups' row positions, in the groups' sorted order: no frame built per group
        # (1.7 s of every fit at 1M rows)
        groups = frame.groupby(GROUP_COLUMNS, sort=True).indices
        positions: list[np.ndarray] = []
        sizes: list[int] = []
        for key in sorted(groups):
            idx = rng.permutation(labels[groups[key]])
            n_chunks = max(1, math.ceil(len(idx) / self.max_group_rows))
            chunks = [idx] if n_chunks == 1 else np.array_split(idx, n_chunks)
            for chunk in chunks:
                positions.append(chunk)
                sizes.append(len(chunk))
        return np.concatenate(positions), np.array(sizes)

    def fit(self, data: TuningData, *, client: Any = None) -> LatencyModel:
        """Train on the measurements of `data` (rows of other ops are ignored).

        With a Dask `client`, both boosters train through LightGBM's Dask integration.
        """
        data = data.for_op(self.op)
        if data.frame.empty:
            raise ModelError(f"no measurements of op {self.op!r} to train on")
        self._candidate_cache = None
        self._block_cache = None
        self._universe_cache: list[Candidate] | None = None
        if hasattr(self, "candidates_"):
            del self.candidates_  # a refit must not reuse the previous fit's candidates
        self.reference_ = Reference.from_data(data)
        frame = add_relative_time(data.frame.copy())
        features = self._features(data, frame, oof=True)
        self.feature_names_ = sorted(features.columns)
        order, sizes = self._ranking_order(frame)
        X_rank = self._matrix(features.loc[order])
        y_rank = self._labels(frame.loc[order])
        valid = frame["valid"].to_numpy()
        log_us = np.log(frame.loc[valid, "median_us"].to_numpy())
        regressions = {"regressor": (self._matrix(features[valid]), log_us)}
        self.latency_feature_names_: list[str] = []
        if self.anchored:
            anchors = self._anchors(data, frame, oof=True)
            crossed = frame.loc[valid & (anchors["anc_cross_dtype"] == 1).to_numpy()]
            self.crossed_dtypes_ = frozenset(
                data.problems[p].dtype for p in crossed["problem_hash"].unique()
            )
            self.latency_feature_names_ = self.feature_names_ + list(ANCHOR_FEATURES)
            regressions["latency"] = (
                self._latency_matrix(features[valid], anchors[valid]),
                log_us - _anchor_log_us(anchors[valid]),
            )
        if client is None:
            boosters = self._train_side_by_side(
                {
                    "ranker": (
                        self._lgb_params("lambdarank", len(y_rank)),
                        lgb.Dataset(X_rank, y_rank, group=sizes, free_raw_data=True),
                    ),
                    **{
                        name: (
                            self._lgb_params("regression", len(y)),
                            lgb.Dataset(X, y, free_raw_data=True),
                        )
                        for name, (X, y) in regressions.items()
                    },
                }
            )
            self.ranker_ = boosters.pop("ranker")
        else:
            from models.distributed import fit_boosters_dask

            self.ranker_, boosters = fit_boosters_dask(
                client,
                rank=(X_rank, y_rank, sizes),
                regressions=regressions,
                params={
                    "ranker": self._lgb_params("lambdarank", len(y_rank)),
                    "regressor": self._lgb_params("regression", len(log_us)),
                },
                n_estimators=self.n_estimators,
            )
        self.regressor_ = boosters["regressor"]
        self.latency_ = boosters.get("latency")
        self.candidates_ = dict(data.candidates)
        self.n_rows_ = int(len(frame))
        return self

    def _train_side_by_side(
        self, boosters: dict[str, tuple[dict[str, Any], lgb.Dataset]]
    ) -> dict[str, lgb.Booster]:
        """Train `boosters` (name: (params, dataset)) side by side, in `n_jobs` threads in
        all: up to `n_jobs` boosters at once, first named first, each with its share.

        LightGBM gives up the interpreter while it trains. One OpenMP team per booster would
        wake its sleeping threads (models/__init__) at every parallel region of every round:
        a 50,000-row fold model took twice as long with two threads as a spinning team did.
        Two boosters of one thread each keep both cores busy with no team to wake.
        """
        workers = max(1, min(self.n_jobs, len(boosters)))
        threads = max(1, self.n_jobs // workers)

        def train(name: str) -> lgb.Booster:
            params, dataset = boosters[name]
            return lgb.train(
                {**params, "num_threads": threads}, dataset, num_boost_round=self.n_estimators
            )

        if workers == 1:
            return {name: train(name) for name in boosters}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tps-booster") as pool:
            futures = {name: pool.submit(train, name) for name in boosters}
            return {name: future.result() for name, future in futures.items()}

    # -- prediction ---------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "ranker_"):
            raise ModelError("the model is not fitted")

    def predict_frame(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate] | None = None,
        *,
        anchored: bool = True,
    ) -> pd.DataFrame:
        """Return one row per candidate: `score` (higher is better), `predicted_us`, and the
        parts behind them (`ranker_score`, the reference features). `predicted_us` is the
        anchored booster's where the model has one and `anchored` is set (serving asks for it
        only for the candidates it returns: `anchored_us`); `regressor_us` is the plain
        regressor's.

        `score` averages the rank percentiles of the ranker and of the regressor: on the
        leave-one-GPU-out data neither alone was as steady as the two together.
        Without `candidates`, every candidate seen in training is scored.
        """
        return self.predict_parts(hardware, problem, candidates, anchored=anchored)[0]

    def predict_parts(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate] | None = None,
        *,
        anchored: bool = True,
    ) -> tuple[pd.DataFrame, np.ndarray]:
        """Return `predict_frame`'s frame and the feature matrix behind it, a row per
        candidate (what `anchored_us` takes as `features` for some of them)."""
        self._check_fitted()
        if problem.op != self.op:
            raise ModelError(f"this model ranks op {self.op!r}, not {problem.op!r}")
        if candidates is None:
            candidates = self.candidate_universe()
        hw_key = hardware.fingerprint()
        ids = [c.id for c in candidates]
        keys = {"hw_key": hw_key, "problem_hash": problem.key_hash(), "candidate_id": ids}
        if not candidates:
            empty = pd.DataFrame(keys).assign(
                score=[], predicted_us=[], regressor_us=[], ranker_score=[]
            )
            return empty, np.empty((0, len(self.feature_names_)))
        X, references = self._prediction_features(hardware, problem, candidates, ids)
        ranker_score = np.asarray(self.ranker_.predict(X, num_threads=PREDICT_THREADS))
        log_us = np.asarray(self.regressor_.predict(X, num_threads=PREDICT_THREADS))
        predicted_log_us = carried_log_us = log_us
        if anchored and self.latency_ is not None:
            predicted_log_us, carried_log_us = self._anchored_log_us(hardware, problem, X, ids)
        frame = pd.DataFrame(
            {
                **keys,
                **references,
                "ranker_score": ranker_score,
                "predicted_us": np.exp(predicted_log_us),
                "regressor_us": np.exp(log_us),
                "carried_us": np.exp(carried_log_us),
                "score": _percentile(ranker_score) + _percentile(-log_us),
            }
        )
        return frame, X

    def anchored_us(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate],
        *,
        features: np.ndarray | None = None,
        correction: float = 1.0,
    ) -> np.ndarray | None:
        """Return the anchored booster's latency (µs) of `candidates`, or None without one.

        `features`: their rows of `predict_parts`' matrix for the same hardware and problem,
        when the caller has them (a served answer: a tenth of its time went to building them
        again). `correction`: the share of the booster's correction of the anchor served
        (models.ranking.CORRECTIONS; 0: the anchor as carried).
        """
        self._check_fitted()
        if self.latency_ is None or not candidates:
            return None
        ids = [c.id for c in candidates]
        X = features
        if X is None:
            X, _ = self._prediction_features(hardware, problem, candidates, ids)
        booster, carried = self._anchored_log_us(hardware, problem, X, ids)
        anchored: np.ndarray = np.exp(carried + correction * (booster - carried))
        return anchored

    def _anchored_log_us(
        self, hardware: HardwareSpec, problem: ProblemKey, X: np.ndarray, ids: list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the log latency of the anchored booster and that of the anchor alone."""
        assert self.latency_ is not None
        anchors = self.reference_.anchor_columns(
            hardware, problem, ids, exclude=hardware.fingerprint()
        )
        X_lat = np.column_stack([X, *(anchors[name] for name in ANCHOR_FEATURES)])
        correction = np.asarray(self.latency_.predict(X_lat, num_threads=PREDICT_THREADS))
        crossed = self.crossed_dtypes_
        if crossed is not None and problem.dtype not in crossed:
            # carried from another dtype, which no training row of this dtype was: the
            # booster never learned that correction (the H200's tf32 held out, whose kernels
            # never ran in another dtype: 22% off with it, 14.5% without, per problem)
            correction[anchors["anc_cross_dtype"] == 1] = 0.0
        carried = _anchor_log_us(anchors, level=crossed is not None)
        return carried + correction, carried

    def _prediction_features(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate],
        ids: list[str] | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Return the feature matrix of the candidates on (hardware, problem), and the
        reference features in it by name.

        Candidates seen in training take their columns from the block built once per model;
        any other list goes through `_features`, which gives the same numbers, slower.
        """
        block = self._candidate_block()
        if ids is None:
            ids = [c.id for c in candidates]
        rows = block.positions(ids)
        if rows is None:
            features = self._training_path_features(hardware, problem, candidates)
            references = features.filter(like="ref_")
            return self._matrix(features), {c: references[c].to_numpy() for c in references}
        columns = feature_columns(
            hardware=hardware, problem=problem, block=block, rows=rows, op=self.op
        )
        references = {}
        own = hardware.fingerprint()
        ref_problem = (
            self.reference_.closest_problem(problem, exclude=own)
            if self.reference_features
            else None
        )
        if ref_problem is not None:
            # A device the model was trained on gets no help from its own measurements here.
            references = self.reference_.feature_columns(hardware, ref_problem, ids, exclude=own)
        columns.update(references)
        X = np.full((len(ids), len(self.feature_names_)), np.nan)
        for i, name in enumerate(self.feature_names_):
            if name in columns:
                X[:, i] = columns[name]
        return X, references

    def _training_path_features(
        self, hardware: HardwareSpec, problem: ProblemKey, candidates: list[Candidate]
    ) -> pd.DataFrame:
        """Return the prediction features through the training path (`_features`)."""
        hw_key = hardware.fingerprint()
        problem_hash = problem.key_hash()
        keys = pd.DataFrame(
            {
                "hw_key": hw_key,
                "problem_hash": problem_hash,
                "candidate_id": [c.id for c in candidates],
            }
        )
        data = TuningData(
            frame=pd.DataFrame(),
            hardware={**self.reference_.hardware, hw_key: hardware},
            problems={**self.reference_.problems, problem_hash: problem},
            candidates={c.id: c for c in candidates},
        )
        # A device the model was trained on gets no help from its own measurements here.
        return self._features(data, keys, oof=True)

    def predict(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate] | None = None,
    ) -> tuple[list[Candidate], np.ndarray, np.ndarray]:
        """Return (candidates, scores: higher is better, predicted latencies in µs)."""
        if candidates is None:
            candidates = self.candidate_universe()
        frame = self.predict_frame(hardware, problem, candidates)
        return candidates, frame["score"].to_numpy(), frame["predicted_us"].to_numpy()

    def candidate_universe(self) -> list[Candidate]:
        """Return every candidate seen in training, in a stable order (its id's)."""
        self._check_fitted()
        universe = getattr(self, "_universe_cache", None)
        if universe is None:
            universe = [self.candidates_[k] for k in sorted(self.candidates_)]
            self._universe_cache = universe
        return list(universe)

    def universe_among(self, ids: frozenset[str]) -> list[Candidate]:
        """Return the candidates of the universe whose id is in `ids`, in the universe's order."""
        self._check_fitted()
        return [self.candidates_[k] for k in sorted(ids) if k in self.candidates_]


def _per_group(
    keys: pd.DataFrame, compute: Callable[[str, str, np.ndarray], dict[str, Any] | None]
) -> dict[str, np.ndarray]:
    """Return `compute`'s columns for every row of `keys`, computed once per (hardware,
    problem) group on the group's candidates (NaN where it returns None)."""
    ids = keys["candidate_id"].to_numpy()
    out: dict[str, np.ndarray] = {}
    for (hw_key, problem_hash), rows in keys.groupby(GROUP_COLUMNS, sort=False).indices.items():
        columns = compute(hw_key, problem_hash, ids[rows])
        for name, values in (columns or {}).items():
            if name not in out:
                out[name] = np.full(len(keys), np.nan)
            out[name][rows] = values
    return out


def _anchor_log_us(
    anchors: pd.DataFrame | dict[str, np.ndarray], *, level: bool = True
) -> np.ndarray:
    """Return the log latency an anchor predicts before the regressor's correction: the
    measured neighbour's, carried by the bound ratio; else the closest groups' typical
    latency (with `level`); else the roofline bound's."""
    measured = np.asarray(anchors["anc_log_pred"], dtype=np.float64)
    bound = np.asarray(anchors["anc_log_bound"], dtype=np.float64)
    if level and "anc_log_group" in anchors:
        group = np.asarray(anchors["anc_log_group"], dtype=np.float64)
        bound = np.where(np.isfinite(group), group, bound)
    return np.where(np.isfinite(measured), measured, bound)


def _percentile(values: np.ndarray) -> np.ndarray:
    """Return each value's rank in [0, 1) (ties broken by position, deterministically)."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(len(values), 1)
