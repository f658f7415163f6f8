"""What the training data measured, kept with a model: per (hardware, problem) the relative
latency of every candidate. It feeds the reference features, the nearest baseline and the
fallback policy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeAlias

import numpy as np
import pandas as pd

from models.dataset import GROUP_COLUMNS, TuningData, add_relative_time
from models.features import model_bandwidth_gbs, problem_bytes
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

# A candidate that failed on a reference device counts as this much slower than its best
# (log scale, about 20x): failures are informative, but not certain to repeat elsewhere.
FAILED_LOG_REL = 3.0
VENDOR_PENALTY = 2.0
WARP_PENALTY = 1.0
SIMILARITY_SCALE = 2.0
# A device never measured on a problem is ranked among the candidates that were fast on some
# known device: each one's fastest SHORTLIST_SHARE of the space, at least SHORTLIST_MIN and at
# most SHORTLIST_MAX. On the Kernel Tuner data, leaving each GPU out, the shortlist always held
# the best (with a cap of 128 it missed it on 3 of 10 holdouts, by 2 to 11%). The cap bounds a
# model answer: 2416 rows to rank for a new GPU's dedispersion without it, 698 with it.
SHORTLIST_SHARE = 0.10
SHORTLIST_MIN = 32
SHORTLIST_MAX = 256
REFERENCE_FEATURES = ("ref_mean", "ref_vendor", "ref_near", "ref_wmean", "ref_min", "ref_max")
# The latency a candidate measured on the closest known (device, problem), and what carries it
# to the device and problem asked about (see `Reference.anchor_columns`).
ANCHOR_FEATURES = (
    "anc_log_us",
    "anc_log_scale",
    "anc_log_peak_ratio",
    "anc_log_bw_ratio",
    "anc_distance",
    "anc_log_bound",
    "anc_log_pred",
)
# Also given per candidate, and not features: the problem's level, where a candidate without
# an anchor starts, and whether its anchor was measured in another dtype.
ANCHOR_EXTRAS = ("anc_log_group", "anc_cross_dtype")
# An anchor is looked for among the groups of this many closest measured problems ...
ANCHOR_PROBLEMS = 4
# ... and, of those, this many closest (device, problem) groups.
ANCHOR_GROUPS = 8
# The closest measured problems kept (CLOSEST_KEPT of them, closest first) for each of the
# MAX_PROBLEM_ORDERS problems asked about lately.
CLOSEST_KEPT = 64
MAX_PROBLEM_ORDERS = 1024
# Each group's weight in the pooled anchor is exp(-distance / ANCHOR_SCALE).
ANCHOR_SCALE = 1.0
# Datasheets that give no figure for a dtype: its rate relative to fp16 on the matrix units
# (TF32 runs at half the FP16 rate on NVIDIA's and AMD's matrix cores, FP8 and INT8 at twice).
PEAK_FROM_FP16 = {"tf32": 0.5, "fp8_e4m3": 2.0, "fp8_e5m2": 2.0, "int8": 2.0}


def dtype_peak_tflops(hardware: HardwareSpec, dtype: str) -> float:
    """Return the peak TFLOP/s of `dtype` on the units in use (datasheet, else a rule)."""
    peaks = hardware.peak_tflops
    share = hardware.active_units / hardware.compute_units
    fp16 = peaks.get("fp16", peaks.get("bf16"))
    if dtype in peaks:
        peak = peaks[dtype]
    elif dtype in PEAK_FROM_FP16 and fp16 is not None:
        peak = fp16 * PEAK_FROM_FP16[dtype]
    else:
        peak = peaks.get("fp32", fp16 or 1.0)
    return float(peak) * share


def bound_us(hardware: HardwareSpec, problem: ProblemKey) -> float:
    """Return the roofline bound of `problem` on `hardware` in µs: the larger of its FLOPs at
    the dtype's peak and its operands' bytes at the memory bandwidth (ops other than GEMM,
    whose FLOPs are not known, count one operation per element at the fp32 peak)."""
    flops = problem.flops or float(math.prod(problem.dims.values()))
    peak = dtype_peak_tflops(hardware, problem.dtype if problem.flops else "fp32")
    compute = flops / (peak * 1e6)
    memory = problem_bytes(problem) / (model_bandwidth_gbs(hardware) * 1e3)
    return max(compute, memory, 1e-3)


def spec_vector(hardware: HardwareSpec) -> np.ndarray:
    """Return the log2 datasheet figures that spec distance compares."""
    units = hardware.active_units
    share = units / hardware.compute_units
    return np.array(
        [
            math.log2(units),
            math.log2(max(hardware.l2_bytes, 1)),
            math.log2(model_bandwidth_gbs(hardware)),
            math.log2(hardware.peak_tflops.get("fp32", 1.0) * share),
            math.log2(hardware.clock_mhz or 1000.0),
        ]
    )


# spec_vector of specs seen lately, by identity (specs are frozen): spec distance runs once per
# reference device for every (hardware, problem) group of every training fold.
_VECTORS: dict[int, tuple[HardwareSpec, tuple[float, ...]]] = {}
_MAX_VECTORS = 4096


def _vector(hardware: HardwareSpec) -> tuple[float, ...]:
    known = _VECTORS.get(id(hardware))
    if known is not None and known[0] is hardware:
        return known[1]
    if len(_VECTORS) >= _MAX_VECTORS:
        _VECTORS.clear()
    vector = tuple(float(x) for x in spec_vector(hardware))
    _VECTORS[id(hardware)] = (hardware, vector)
    return vector


def spec_distance(a: HardwareSpec, b: HardwareSpec) -> float:
    """Return how different two devices are by spec (0 for the same spec)."""
    d = math.dist(_vector(a), _vector(b))
    if a.vendor != b.vendor:
        d += VENDOR_PENALTY
    if (a.warp_size or 32) != (b.warp_size or 32):
        d += WARP_PENALTY
    return d


def problem_distance(a: ProblemKey, b: ProblemKey) -> float:
    """Return how different two problems of one op are (log2 dims, dtype, layout)."""
    names = sorted(set(a.dims) | set(b.dims))
    va = np.array([math.log2(a.dims.get(n, 1)) for n in names])
    vb = np.array([math.log2(b.dims.get(n, 1)) for n in names])
    d = float(np.linalg.norm(va - vb))
    d += 4.0 * (a.dtype != b.dtype) + 1.0 * (a.trans_a != b.trans_a) + (a.trans_b != b.trans_b)
    return d + 8.0 * (a.variant != b.variant)


# Candidate ids in order: an Index, an array or a list of them.
CandidateIds: TypeAlias = pd.Index | np.ndarray | list[str]


@dataclass(frozen=True)
class _HardwareTable:
    """The known devices' spec vectors as arrays, so that `spec_distance` to all runs at once.

    Distances to a device asked about are kept for the devices asked about lately (specs are
    frozen, so by identity, as `_vector` keeps vectors).
    """

    keys: list[str]  # sorted
    position: dict[str, int]
    vectors: np.ndarray  # devices x spec_vector
    vendors: np.ndarray
    warps: np.ndarray
    _asked: dict[int, tuple[HardwareSpec, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def of(cls, hardware: dict[str, HardwareSpec]) -> _HardwareTable:
        keys = sorted(hardware)
        return cls(
            keys=keys,
            position={k: i for i, k in enumerate(keys)},
            vectors=np.array([_vector(hardware[k]) for k in keys], dtype=float).reshape(
                len(keys), -1
            ),
            vendors=np.array([hardware[k].vendor for k in keys]),
            warps=np.array([hardware[k].warp_size or 32 for k in keys]),
        )

    def distances(self, hardware: HardwareSpec) -> np.ndarray:
        """Return `spec_distance` from `hardware` to every known device, in `keys` order."""
        known = self._asked.get(id(hardware))
        if known is not None and known[0] is hardware:
            return known[1]
        d: np.ndarray = np.sqrt(((self.vectors - np.array(_vector(hardware))) ** 2).sum(axis=1))
        d = d + VENDOR_PENALTY * (self.vendors != hardware.vendor)
        d = d + WARP_PENALTY * (self.warps != (hardware.warp_size or 32))
        if len(self._asked) >= _MAX_VECTORS:
            self._asked.clear()
        self._asked[id(hardware)] = (hardware, d)
        return d


@dataclass(frozen=True)
class _ProblemTable:
    """The problems of one op as arrays, so that `problem_distance` to all runs at once."""

    hashes: np.ndarray  # sorted
    names: tuple[str, ...]
    log_dims: np.ndarray  # problems x names, log2 (0 where a problem lacks the dim)
    dtypes: np.ndarray
    trans_a: np.ndarray
    trans_b: np.ndarray
    variants: np.ndarray

    @classmethod
    def of(cls, problems: list[tuple[str, ProblemKey]]) -> _ProblemTable:
        names = tuple(sorted({n for _, p in problems for n in p.dims}))
        return cls(
            hashes=np.array([h for h, _ in problems]),
            names=names,
            log_dims=np.array(
                [[math.log2(p.dims.get(n, 1)) for n in names] for _, p in problems], dtype=float
            ).reshape(len(problems), len(names)),
            dtypes=np.array([p.dtype for _, p in problems]),
            trans_a=np.array([p.trans_a for _, p in problems]),
            trans_b=np.array([p.trans_b for _, p in problems]),
            variants=np.array([p.variant for _, p in problems]),
        )

    def closest(self, problem: ProblemKey, k: int) -> list[tuple[float, str]]:
        """Return the k problems closest to `problem`, as (distance, hash), closest first."""
        extra = sorted(set(problem.dims) - set(self.names))
        v = np.array([math.log2(problem.dims.get(n, 1)) for n in self.names])
        d2 = ((self.log_dims - v) ** 2).sum(axis=1)
        d2 += sum(math.log2(problem.dims[n]) ** 2 for n in extra)
        d = np.sqrt(d2)
        d += 4.0 * (self.dtypes != problem.dtype) + 1.0 * (self.trans_a != problem.trans_a)
        d += 1.0 * (self.trans_b != problem.trans_b) + 8.0 * (self.variants != problem.variant)
        order = np.lexsort((self.hashes, d))[:k]  # by distance, then hash
        return [(float(d[i]), str(self.hashes[i])) for i in order]


@dataclass
class Reference:
    """Relative latencies measured on known hardware, as a (group x candidate) matrix."""

    log_rel: pd.DataFrame  # index (hw_key, problem_hash), columns candidate_id; NaN = failed
    median_us: pd.DataFrame  # same shape, absolute latencies
    hardware: dict[str, HardwareSpec]
    problems: dict[str, ProblemKey]

    @classmethod
    def from_data(cls, data: TuningData) -> Reference:
        """Build the matrices of `data`: a row for each (hardware, problem) that was measured,
        and none for a pair that was not (a device that ran other problems has not run this
        one)."""
        frame = add_relative_time(data.frame.copy())
        groups, group_index = pd.MultiIndex.from_frame(frame[GROUP_COLUMNS]).factorize(sort=True)
        candidates, candidate_index = pd.factorize(frame["candidate_id"], sort=True)
        shape = (len(group_index), len(candidate_index))
        log_rel = np.full(shape, np.nan)
        median = np.full(shape, np.nan)
        log_rel[groups, candidates] = frame["log_rel"].to_numpy(dtype=float)
        median[groups, candidates] = frame["median_us"].to_numpy(dtype=float)
        # Measured but failed: a large penalty; never measured there: stays NaN.
        failed = np.zeros(shape, dtype=bool)
        failed[groups, candidates] = ~np.isfinite(frame["log_rel"].to_numpy(dtype=float))
        log_rel[failed] = FAILED_LOG_REL
        index = pd.MultiIndex.from_tuples(list(group_index), names=GROUP_COLUMNS)
        columns = pd.Index(candidate_index, name="candidate_id")
        return cls(
            log_rel=pd.DataFrame(log_rel, index=index, columns=columns),
            median_us=pd.DataFrame(median, index=index, columns=columns),
            hardware=dict(data.hardware),
            problems=dict(data.problems),
        )

    def closest_problem(self, problem: ProblemKey, *, exclude: str | None = None) -> str | None:
        """Return the hash of the problem most like `problem` (itself when measured) that a
        device other than `exclude` measured, or None."""
        own = problem.key_hash()
        if own in self.problems and self.groups_for(own, exclude=exclude):
            return own
        for _, problem_hash in self._closest_problems(problem):
            if self.groups_for(problem_hash, exclude=exclude):
                return problem_hash
        return None

    @cached_property
    def _rows(self) -> dict[tuple[str, str], int]:
        """Return the row of each (hw_key, problem_hash) in log_rel and median_us (one index)."""
        return {key: i for i, key in enumerate(self.log_rel.index)}

    @cached_property
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for hw_key, problem_hash in self.log_rel.index:
            groups.setdefault(problem_hash, []).append(hw_key)
        return {problem_hash: sorted(keys) for problem_hash, keys in groups.items()}

    def warm_up(self) -> None:
        """Build the positional lookups and each group's level now, not in the first query
        that needs them."""
        _ = self._rows, self._groups, self._group_log_median, self._column_of

    def shortlist(self, problem_hash: str, *, exclude: str | None = None) -> frozenset[str] | None:
        """Return the candidates a new device is ranked among for `problem_hash`: every known
        device's fastest SHORTLIST_SHARE (at least SHORTLIST_MIN, at most SHORTLIST_MAX),
        together.

        None when no device but `exclude` measured the problem (then all are ranked).
        """
        if (problem_hash, exclude) in self._shortlists:
            return self._shortlists[(problem_hash, exclude)]
        keys = [(k, problem_hash) for k in self.groups_for(problem_hash, exclude=exclude)]
        if not keys:
            return None
        table = self.median_us.to_numpy()[[self._rows[k] for k in keys]]
        chosen: set[str] = set()
        for row in table:
            valid = np.flatnonzero(np.isfinite(row))
            k = min(SHORTLIST_MAX, max(SHORTLIST_MIN, math.ceil(SHORTLIST_SHARE * len(valid))))
            fastest = valid[np.argsort(row[valid], kind="stable")[:k]]
            chosen.update(self.median_us.columns[fastest])
        shortlist = frozenset(chosen)
        self._shortlists[(problem_hash, exclude)] = shortlist
        return shortlist

    @cached_property
    def _shortlists(self) -> dict[tuple[str, str | None], frozenset[str] | None]:
        return {}

    def groups_for(self, problem_hash: str, *, exclude: str | None = None) -> list[str]:
        """Return the hw_keys that measured `problem_hash`, except `exclude`."""
        return [k for k in self._groups.get(problem_hash, []) if k != exclude]

    @cached_property
    def _values(self) -> dict[str, np.ndarray]:
        return {"log_rel": self.log_rel.to_numpy(), "median_us": self.median_us.to_numpy()}

    @cached_property
    def _group_log_median(self) -> np.ndarray:
        """Return each group's median log latency over the candidates it ran validly."""
        with np.errstate(all="ignore"):
            values = self._values["median_us"]
            logs = np.log(np.where(values > 0, values, np.nan))
        valid = np.isfinite(logs).any(axis=1)
        medians = np.full(len(logs), np.nan)
        medians[valid] = np.nanmedian(logs[valid], axis=1)
        return medians

    @cached_property
    def _column_of(self) -> dict[str, int]:
        """Each candidate's column. A dict: training looks a group's few dozen ids up twice
        per (device, problem) group, where pandas' indexer, which builds an Index of them
        each time, took 140 µs of a group's 1 ms."""
        return {str(c): i for i, c in enumerate(self.log_rel.columns)}

    def _table(
        self, values: str, keys: list[tuple[str, str]], candidate_ids: CandidateIds
    ) -> np.ndarray:
        """Return the rows `keys` of `values` ("log_rel" or "median_us") for `candidate_ids`
        (NaN where a candidate is not a column)."""
        columns = self._columns(candidate_ids)
        rows = np.array([self._rows[k] for k in keys], dtype=np.int64)
        table: np.ndarray = self._values[values][np.ix_(rows, columns)]
        table[:, columns < 0] = np.nan
        return table

    def _columns(self, candidate_ids: CandidateIds) -> np.ndarray:
        """Return each candidate's column (-1 where it is none), read only.

        A served answer looks the same candidates up four times (its features, the nearest
        device's times and coverage, the anchors), so the last list's columns are kept.
        """
        ids = candidate_ids.tolist() if hasattr(candidate_ids, "tolist") else list(candidate_ids)
        last = self._last_columns[0]
        if last is not None and last[0] == ids:
            return last[1]
        column_of = self._column_of
        columns = np.fromiter((column_of.get(c, -1) for c in ids), dtype=np.int64, count=len(ids))
        columns.flags.writeable = False
        self._last_columns[0] = (ids, columns)  # one store: threads see one pair or the other
        return columns

    @cached_property
    def _last_columns(self) -> list[tuple[list[str], np.ndarray] | None]:
        return [None]

    def measured_us(
        self, hw_key: str, problem_hash: str, candidate_ids: list[str]
    ) -> np.ndarray | None:
        """Return the median latencies measured on (hw_key, problem_hash), or None if never."""
        if (hw_key, problem_hash) not in self._rows:
            return None
        row: np.ndarray = self._table("median_us", [(hw_key, problem_hash)], candidate_ids)[0]
        return row

    def coverage(self, hw_key: str, problem_hash: str, candidate_ids: list[str]) -> float:
        """Return the share of `candidate_ids` run on (hw_key, problem_hash), failed ones too."""
        if (hw_key, problem_hash) not in self._rows or not candidate_ids:
            return 0.0
        rel = self._table("log_rel", [(hw_key, problem_hash)], candidate_ids)[0]
        return float(np.isfinite(rel).mean())

    def nearest_hardware(
        self, hardware: HardwareSpec, problem_hash: str, *, exclude: str | None = None
    ) -> tuple[str, float] | None:
        """Return (hw_key, spec distance) of the most similar device that measured the problem."""
        keys = self.groups_for(problem_hash, exclude=exclude)
        if not keys:
            return None
        devices = self._hardware_table
        distances = devices.distances(hardware)[[devices.position[k] for k in keys]]
        best = int(np.lexsort((np.arange(len(keys)), distances))[0])  # keys are sorted
        return keys[best], float(distances[best])

    @cached_property
    def _problem_order(self) -> dict[str, list[tuple[float, str]]]:
        return {}

    @cached_property
    def _problem_table(self) -> dict[str, _ProblemTable]:
        by_op: dict[str, list[str]] = {}
        for problem_hash, problem in sorted(self.problems.items()):
            by_op.setdefault(problem.op, []).append(problem_hash)
        return {
            op: _ProblemTable.of([(h, self.problems[h]) for h in hashes])
            for op, hashes in by_op.items()
        }

    def _closest_problems(self, problem: ProblemKey) -> list[tuple[float, str]]:
        """Return (distance, hash) of the closest measured problems of `problem`'s op, closest
        first (at most CLOSEST_KEPT); distances are `problem_distance`'s."""
        own = problem.key_hash()
        known = self._problem_order.get(own)
        if known is None:
            table = self._problem_table.get(problem.op)
            known = table.closest(problem, CLOSEST_KEPT) if table is not None else []
            if len(self._problem_order) >= MAX_PROBLEM_ORDERS:
                self._problem_order.clear()
            self._problem_order[own] = known
        return known

    @cached_property
    def _hardware_table(self) -> _HardwareTable:
        return _HardwareTable.of(self.hardware)

    @cached_property
    def _group_positions(self) -> dict[str, np.ndarray]:
        """Return, per problem, the positions in `_hardware_table` of the devices that ran it."""
        position = self._hardware_table.position
        return {
            problem_hash: np.array([position[k] for k in keys], dtype=np.int64)
            for problem_hash, keys in self._groups.items()
        }

    def _anchor_groups(
        self, hardware: HardwareSpec, problem: ProblemKey, exclude: str | None
    ) -> list[tuple[float, str, str]]:
        """Return the (distance, hw_key, problem_hash) groups an anchor is read from, closest
        first (by distance, then hw_key, then the problem's rank)."""
        table = self._hardware_table
        to_device = table.distances(hardware)
        left_out = table.position.get(exclude) if exclude is not None else None
        distances, positions, ranks = [], [], []
        for rank, (distance, problem_hash) in enumerate(self._closest_problems(problem)):
            where = self._group_positions.get(problem_hash)
            if where is not None and left_out is not None:
                where = where[where != left_out]
            if where is None or not len(where):
                continue
            distances.append(distance + to_device[where])
            positions.append(where)
            ranks.append(np.full(len(where), rank))
            if len(ranks) >= ANCHOR_PROBLEMS:
                break
        if not distances:
            return []
        d, pos, rank_of = (
            np.concatenate(distances),
            np.concatenate(positions),
            np.concatenate(ranks),
        )
        closest = self._closest_problems(problem)
        chosen = np.lexsort((rank_of, pos, d))[:ANCHOR_GROUPS]
        return [(float(d[i]), table.keys[pos[i]], closest[rank_of[i]][1]) for i in chosen]

    def anchor_columns(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidate_ids: CandidateIds,
        *,
        exclude: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Return, per candidate, the latency it measured on the closest known (device,
        problem) that ran it validly, and the ratios that carry it to (hardware, problem).

        anc_log_us: log µs measured there (NaN: no such group); anc_log_scale: log of the
        roofline bound here over there; anc_log_peak_ratio, anc_log_bw_ratio: the log ratios
        of the dtype's peak and of the bandwidth; anc_distance: spec plus problem distance;
        anc_log_bound: log of the roofline bound here, which stands in where nothing is known;
        anc_log_group: the same groups' typical (median) latency over every candidate they ran,
        carried here and pooled as anc_log_pred is: the problem's level, for every candidate,
        which a candidate none of them ran starts from; anc_cross_dtype: 1 where what
        carries the candidate here was measured in another dtype (its anchor's group, else
        the closest group), else 0. These two are not features of the booster.
        """
        n = len(candidate_ids)
        target = bound_us(hardware, problem)
        out = {name: np.full(n, np.nan) for name in (*ANCHOR_FEATURES, *ANCHOR_EXTRAS)}
        out["anc_log_bound"] = np.full(n, math.log(target))
        groups = self._anchor_groups(hardware, problem, exclude)
        if not groups or not n:
            return out
        table = self._table("median_us", [(k, p) for _, k, p in groups], candidate_ids)
        usable = np.isfinite(table) & (table > 0)
        first = np.argmax(usable, axis=0)
        found = usable.any(axis=0)
        scale, peak, bandwidth = [], [], []
        for _, k, p in groups:
            ref_hw, ref_problem = self.hardware[k], self.problems[p]
            scale.append(math.log(target / bound_us(ref_hw, ref_problem)))
            peak.append(
                math.log(
                    dtype_peak_tflops(hardware, problem.dtype)
                    / dtype_peak_tflops(ref_hw, ref_problem.dtype)
                )
            )
            bandwidth.append(math.log(model_bandwidth_gbs(hardware) / model_bandwidth_gbs(ref_hw)))
        columns = np.arange(n)
        distances = [d for d, _, _ in groups]
        # how alike each group's device and problem are to these: the weight of what it carries
        alike = np.exp(-np.array(distances) / ANCHOR_SCALE)
        with np.errstate(all="ignore"):
            logs = np.log(np.where(usable, table, 1.0))
            chosen = logs[first, columns]
            # every group's latency carried here, weighted by how alike it is
            carried = logs + np.asarray(scale)[:, None]
            weights = alike[:, None] * usable
            pooled = (carried * weights).sum(axis=0) / weights.sum(axis=0)
        out["anc_log_us"] = np.where(found, chosen, np.nan)
        out["anc_log_pred"] = np.where(found, pooled, np.nan)
        levels = np.array([self._group_log_median[self._rows[(k, p)]] for _, k, p in groups])
        level_weights = np.where(np.isfinite(levels), alike, 0.0)
        if level_weights.sum() > 0:
            carried_levels = np.where(np.isfinite(levels), levels + np.asarray(scale), 0.0)
            level = float((carried_levels * level_weights).sum() / level_weights.sum())
            out["anc_log_group"] = np.full(n, level)
        crossed = np.array([self.problems[p].dtype != problem.dtype for _, _, p in groups])
        out["anc_cross_dtype"] = np.where(found, crossed[first], crossed[0]).astype(np.float64)
        for name, values in (
            ("anc_log_scale", scale),
            ("anc_log_peak_ratio", peak),
            ("anc_log_bw_ratio", bandwidth),
            ("anc_distance", distances),
        ):
            out[name] = np.where(found, np.asarray(values)[first], np.nan)
        return out

    def feature_columns(
        self,
        hardware: HardwareSpec,
        problem_hash: str,
        candidate_ids: CandidateIds,
        *,
        exclude: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Return reference features for candidates on `hardware` (excluding `exclude`), one
        array per feature name.

        ref_mean: mean relative latency over the other devices; ref_vendor: over devices
        of the same vendor; ref_near: on the nearest device by spec; ref_wmean: weighted
        by spec similarity; ref_min/ref_max: the spread over devices.
        """
        keys = self.groups_for(problem_hash, exclude=exclude)
        out = {name: np.full(len(candidate_ids), np.nan) for name in REFERENCE_FEATURES}
        if not keys:
            return out
        table = self._table("log_rel", [(k, problem_hash) for k in keys], candidate_ids)
        devices = self._hardware_table
        where = np.array([devices.position[k] for k in keys])
        distances = devices.distances(hardware)[where]
        weights = np.exp(-distances / SIMILARITY_SCALE)
        same_vendor = devices.vendors[where] == hardware.vendor
        with np.errstate(all="ignore"), warnings.catch_warnings():
            # An all-NaN column is a candidate no reference device measured: expected.
            warnings.simplefilter("ignore", category=RuntimeWarning)
            present = np.isfinite(table)
            filled = np.where(present, table, 0.0)
            out["ref_mean"] = np.nanmean(table, axis=0)
            out["ref_min"] = np.nanmin(table, axis=0)
            out["ref_max"] = np.nanmax(table, axis=0)
            if same_vendor.any():
                out["ref_vendor"] = np.nanmean(table[same_vendor], axis=0)
            out["ref_near"] = table[int(np.argmin(distances))]
            w = weights[:, None] * present
            out["ref_wmean"] = (filled * w).sum(axis=0) / w.sum(axis=0)
        return out
