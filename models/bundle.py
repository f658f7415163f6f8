"""A trained model for every op, as one artifact: gzipped JSON bytes plus a checksum.

The artifact holds LightGBM's own text form of each booster, the reference measurements
(relative latencies per known hardware and problem), the candidate universe per op, and the
shape families; nothing is pickled, so an artifact loads in any process that has this package.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from models.dataset import TuningData
from models.estimator import LatencyModel, ModelError
from models.families import ShapeFamilies
from models.reference import Reference
from models.selection import FoldModels, PolicyChoice, choose_policy
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import ProbeRun

FORMAT = "tps-latency-model/1"


class ArtifactError(ModelError):
    """An artifact that is corrupt, tampered with, or of an unknown format."""


def checksum(artifact: bytes) -> str:
    """Return the artifact's sha256 hex digest (what the model registry stores)."""
    return hashlib.sha256(artifact).hexdigest()


def _frame_to_dict(frame: pd.DataFrame) -> dict[str, Any]:
    values = frame.to_numpy(dtype=float)
    return {
        "index": [list(i) for i in frame.index],
        "columns": list(frame.columns),
        "values": [[None if not np.isfinite(v) else float(v) for v in row] for row in values],
    }


def _frame_from_dict(doc: dict[str, Any]) -> pd.DataFrame:
    index = pd.MultiIndex.from_tuples(
        [tuple(i) for i in doc["index"]], names=["hw_key", "problem_hash"]
    )
    values = np.array(
        [[np.nan if v is None else v for v in row] for row in doc["values"]], dtype=float
    ).reshape(len(doc["index"]), len(doc["columns"]))
    frame = pd.DataFrame(values, index=index, columns=pd.Index(doc["columns"]))
    frame.columns.name = "candidate_id"
    return frame


def model_to_dict(model: LatencyModel) -> dict[str, Any]:
    """Return a fitted model as plain JSON-able data."""
    model._check_fitted()
    ref = model.reference_
    return {
        "params": model.get_params(),
        "feature_names": model.feature_names_,
        "n_rows": model.n_rows_,
        "ranker": model.ranker_.model_to_string(),
        "regressor": model.regressor_.model_to_string(),
        "latency": model.latency_.model_to_string() if model.latency_ is not None else None,
        "crossed_dtypes": (
            None if model.crossed_dtypes_ is None else sorted(model.crossed_dtypes_)
        ),
        "candidates": {k: c.model_dump(mode="json") for k, c in sorted(model.candidates_.items())},
        "hardware": {k: h.model_dump(mode="json") for k, h in sorted(ref.hardware.items())},
        "problems": {k: p.model_dump(mode="json") for k, p in sorted(ref.problems.items())},
        "log_rel": _frame_to_dict(ref.log_rel),
        "median_us": _frame_to_dict(ref.median_us),
    }


def model_from_dict(doc: dict[str, Any]) -> LatencyModel:
    """Rebuild a fitted model from `model_to_dict`'s output."""
    model = LatencyModel(**doc["params"])
    model.feature_names_ = list(doc["feature_names"])
    model.n_rows_ = int(doc["n_rows"])
    model.ranker_ = lgb.Booster(model_str=doc["ranker"])
    model.regressor_ = lgb.Booster(model_str=doc["regressor"])
    # an artifact from before the anchored booster predicts latency with its regressor
    latency = doc.get("latency")
    model.latency_ = lgb.Booster(model_str=latency) if latency else None
    # an artifact from before the problem's level anchored a candidate has no crossed dtypes:
    # it starts a candidate without an anchor from the bound, and corrects every row
    crossed = doc.get("crossed_dtypes")
    model.crossed_dtypes_ = None if crossed is None else frozenset(map(str, crossed))
    model.candidates_ = {k: Candidate.model_validate(v) for k, v in doc["candidates"].items()}
    model.reference_ = Reference(
        log_rel=_frame_from_dict(doc["log_rel"]),
        median_us=_frame_from_dict(doc["median_us"]),
        hardware={k: HardwareSpec.model_validate(v) for k, v in doc["hardware"].items()},
        problems={k: ProblemKey.model_validate(v) for k, v in doc["problems"].items()},
    )
    return model


@dataclass
class ModelBundle:
    """One LatencyModel and one ShapeFamilies per op, with training facts and metrics."""

    models: dict[str, LatencyModel]
    families: dict[str, ShapeFamilies]
    data_counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    # The served policy per op, chosen by leave-one-out over the training hardware.
    policies: dict[str, PolicyChoice] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return sorted(self.models)

    def model_for(self, op: str) -> LatencyModel:
        """Return the model of `op`, or raise ModelError naming the ops it has."""
        if op not in self.models:
            raise ModelError(f"no model for op {op!r}; this artifact has {self.ops}")
        return self.models[op]

    def policy_for(self, op: str) -> PolicyChoice | None:
        """Return the served policy chosen for `op`, or None (the default policy serves)."""
        return self.policies.get(op)

    def warm_up(self) -> ModelBundle:
        """Prepare every model for prediction (see `LatencyModel.warm_up`); return self."""
        for model in self.models.values():
            model.warm_up()
        return self

    def candidate_universe(self, op: str) -> list[Candidate]:
        """Return every candidate of `op` seen in training."""
        return self.model_for(op).candidate_universe()

    def to_bytes(self) -> bytes:
        """Serialise to gzipped JSON; equal bundles give equal bytes."""
        doc = {
            "format": FORMAT,
            "data_counts": self.data_counts,
            "metrics": self.metrics,
            "models": {op: model_to_dict(m) for op, m in sorted(self.models.items())},
            "families": {op: f.to_dict() for op, f in sorted(self.families.items())},
            "policies": {op: c.to_dict() for op, c in sorted(self.policies.items())},
        }
        payload = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return gzip.compress(payload, compresslevel=6, mtime=0)

    @classmethod
    def from_bytes(cls, artifact: bytes, *, expected_checksum: str | None = None) -> ModelBundle:
        """Load an artifact, verifying its checksum when one is given."""
        if expected_checksum is not None and checksum(artifact) != expected_checksum:
            raise ArtifactError("artifact checksum mismatch: refusing to load it")
        try:
            doc = json.loads(gzip.decompress(artifact))
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"not a model artifact: {exc}") from exc
        if doc.get("format") != FORMAT:
            raise ArtifactError(f"unknown artifact format {doc.get('format')!r}")
        return cls(
            models={op: model_from_dict(m) for op, m in doc["models"].items()},
            families={op: ShapeFamilies.from_dict(f) for op, f in doc["families"].items()},
            data_counts=doc.get("data_counts", {}),
            metrics=doc.get("metrics", {}),
            policies={
                op: PolicyChoice.from_dict(c) for op, c in (doc.get("policies") or {}).items()
            },
        )


def train_bundle(
    data: TuningData | Iterable[ProbeRun],
    *,
    model_params: dict[str, Any] | None = None,
    n_families: int = 8,
    seed: int = 0,
    client: Any = None,
    select_policy: bool = True,
    folds: dict[str, FoldModels] | None = None,
) -> ModelBundle:
    """Train one model and one family table per op found in `data`.

    `data` may be probe runs (as the service stores them) or a TuningData; with a Dask
    `client`, the boosters train on the cluster. With `select_policy`, the served policy of
    each op and its confidence calibration are chosen by leave-one-out over the hardware of
    `data` (models.selection); `folds` may hold models already trained for it.
    """
    if not isinstance(data, TuningData):
        data = TuningData.from_runs(data)
    if data.frame.empty:
        raise ModelError("no measurements to train on")
    models: dict[str, LatencyModel] = {}
    families: dict[str, ShapeFamilies] = {}
    policies: dict[str, PolicyChoice] = {}
    for op in data.ops:
        op_data = data.for_op(op)
        trained = (folds or {}).get(op) or FoldModels(
            op_data, op=op, model_params=model_params, seed=seed
        )
        if client is None:
            models[op] = trained.without(())
        else:
            models[op] = LatencyModel(op=op, seed=seed, **(model_params or {})).fit(
                op_data, client=client
            )
        if select_policy:
            policies[op] = choose_policy(trained, seed=seed)
        families[op] = ShapeFamilies(op=op, n_families=n_families, seed=seed).fit(op_data)
    frame = data.frame
    counts = {
        "measurements": int(len(frame)),
        "valid_measurements": int(frame["valid"].sum()),
        "hardware": int(frame["hw_key"].nunique()),
        "problems": int(frame["problem_hash"].nunique()),
        "candidates": int(frame["candidate_id"].nunique()),
    }
    return ModelBundle(models=models, families=families, data_counts=counts, policies=policies)
