"""Inductor's GEMM search, done once per fleet: the compiled twin of the runtime.

Under `max-autotune`, inductor times every template configuration of every GEMM it
compiles, on every host, at every cold start: that search is most of its compile time.
Inside `compiled(session)`:

- a product whose winner this host's cache or the fleet knows compiles with that one
  configuration: inductor's lookup table, so nothing is timed and epilogues still fuse.
  `shortlist=N` serves the fleet's N fastest instead (and its fastest ATen/extern choice,
  where one was measured), which inductor times (with their fused epilogues too, as
  max-autotune does, where `epilogues` is on). On the H200 a shortlist with the epilogues
  timed was slower than the winner alone in 3 of 4 cases (BENCHMARKS.md): decode there is
  bound by the host, and the epilogue benchmarking, which compares GPU time only, leaves
  more kernels to launch;
- a product this GPU model never compiled, which the fleet compiled on other hardware of
  its vendor, is searched among the most similar hardware's `likely` fastest configurations
  (2, and its fastest extern choice): the service's `compiled` source of priors. The search
  is this host's own, timed and recorded as below, so a new GPU model does not pay
  max-autotune's whole search for what the fleet already ranked. A search does not time its
  configurations again with their epilogues fused (`epilogues=False`), as max-autotune does:
  inductor fuses them by its rules, as for a second host's one configuration;
- a product nobody measured yet is searched by inductor as under max-autotune, and TPS
  records every configuration it timed: a probe run per product, cached here and pushed
  to the service, so the next host of the same GPU model compiles it with no search.

A problem is inductor's product exactly (op, dtypes, shapes, strides, scalars); its
candidates are inductor's template configurations (backend `inductor`).

`tune_kernels` (on by default) does the same for inductor's other kernels. It turns on
coordinate-descent tuning, as max-autotune does: inductor then lowers a product with one row
or column (decode at batch 1) to a reduction fused with its neighbours (norm, activation),
and tunes each pointwise and reduction kernel's launch configuration at its first run. On the
H200 that took Llama-3-8B decode at batch 1 from 0.85 to 0.95 of max-autotune (BENCHMARKS.md).
Each kernel's tuning is a probe run too (op `inductor_kernel`, keyed by the kernel's source,
its size hints and the torch and Triton versions): the next host of the same GPU model runs
the fleet's configuration without tuning it. A GPU model new to a kernel that the most similar
hardware tuned times inductor's own configuration and that hardware's `kernel_likely` (4)
fastest; where the fastest of them takes `kernel_descend_min_us` (20 µs) a launch or more,
coordinate descent tunes it further from there (`kernel_descend_reductions` off: only if it
is pointwise or fuses a matrix product). It records them as its own tuning. While a descent
times one configuration, inductor's compile workers compile the ones it tries next
(`kernel_ahead`, `agents.runtime.ahead`).

Inside the block inductor's own caches are off: their keys know nothing of the fleet's
choices, so a graph compiled before (by this host's search, or without TPS) would come back
from them as it was, and a search served from inductor's autotune cache would not be
recorded.

A search's own program is not what the fleet runs: on the H200, OPT-350m decode at batch 32
compiled from host 1's records ran 1.067x (1.039-1.074) faster than host 1's first program,
whose search picked the same winners (BENCHMARKS.md). `compile(model, example)` compiles
once more from the records where its first compile searched, so host 1 runs what every
other host runs.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import re
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.errors import AgentError
from agents.runtime.ahead import AheadStats, Pool, compiled_ahead, inductor_pool
from tps.bounds import KEY_PATTERN
from tps.candidate import INDUCTOR_BACKEND, MAX_PARAMS, Candidate
from tps.problem import MAX_FREE_DIMS, ProblemKey
from tps.schemas import MAX_MEASUREMENTS_PER_RUN, Measurement, ProbeRun

if TYPE_CHECKING:
    from agents.runtime.session import RuntimeSession

log = logging.getLogger("agents.runtime")

BACKEND = INDUCTOR_BACKEND
TEMPLATE_ID = "template_id"
EXTERN_PREFIX = "aten::"  # inductor's uid of an ATen/extern choice (cuBLAS), e.g. aten::addmm
SHORTLIST = 1  # the winner alone: measured faster than a shortlist of 3
# A product this GPU model has not compiled yet, which the most similar hardware has: its
# fastest LIKELY configurations are what inductor times (and the fastest extern choice). On
# the H200, 2 ran level with 4 (paired 0.985 and 0.997, both intervals across 1.0) and
# searched in 8 s where 4 took 13 (BENCHMARKS.md).
LIKELY = 2
# A kernel this GPU model has not tuned yet, which the most similar hardware has: its
# KERNEL_LIKELY fastest launch configurations and inductor's own are timed, and no other.
KERNEL_LIKELY = 4
# Whether inductor's coordinate descent then tunes the fastest of those further, starting
# from it (a new GPU model's first host pays the descent, once for the fleet), for the
# kernels whose fastest of those takes at least KERNEL_DESCEND_MIN_US a launch (0: every
# kernel). On an H100's 64-SM green context, Llama-3-8B decode at batch 1: every kernel
# descended, 15.9 s of tuning for 0.994 of max-autotune; those of 20 µs or more (10 of 24),
# 2.65 s for 0.998; none, 2.74 s for 0.919 (BENCHMARKS.md).
KERNEL_DESCEND = True
KERNEL_DESCEND_MIN_US = 20.0
# Whether a reduction that fuses no matrix product (a norm, a mean) is descended too (off:
# only pointwise kernels and those fusing a product). On the same green context at batch 32,
# one compile's norms gained nothing from their descents, which took 6.6 of 10.7 s of its
# tuning; in another the norms gained up to 1.175x on one kernel, and the compile without
# their descents was no shorter (30.4 s against 27.7 s; BENCHMARKS.md): so they are descended.
# A kernel's kind and ops are read from its name (`triton_red_fused_mm_mul_3`), which inductor
# makes of the original aten ops (`triton.descriptive_names`); a name without them reads as
# a reduction of no product.
KERNEL_DESCEND_REDUCTIONS = True
# Whether a descent's next configurations are compiled ahead in inductor's compile workers
# while it times the current ones (`agents.runtime.ahead`). Off: on an H100 host's 64-SM
# green context, Llama-3-8B decode at batch 1, a new GPU model's first host tuned its kernels
# in 49.6 s with it against 44.4 s without (BENCHMARKS.md).
KERNEL_AHEAD = False
# the aten ops of a matrix product, as they appear among a kernel name's fused ops
PRODUCT_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "matmul", "dot"})
# A search's finalists, timed again before its winner is recorded for the fleet: every
# configuration within FINALIST_SPREAD of the fastest, at most FINALISTS of them, each in
# FINALIST_ROUNDS rounds whose order turns, by its kernels' device time.
FINALISTS = 8
FINALIST_SPREAD = 0.25
FINALIST_ROUNDS = 3
# A search among the most similar hardware's fastest: its own timing decides. On the H200 the
# finalists made a new GPU model's compile 1.4x longer and its program no faster
# (BENCHMARKS.md).
LIKELY_FINALISTS = 0
# Whether a search times its configurations again with their epilogues fused (max-autotune's
# way). Off, inductor fuses them by its rules, as it does for the one configuration a second
# host compiles. On the H200 a new GPU model's compile went from 27.1 to 20.2 s (LIKELY 2)
# and its program ran level (paired 1.005, 0.998-1.016; BENCHMARKS.md).
EPILOGUES = False
OPS = frozenset({"mm", "addmm", "bmm"})
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}
MAX_STR_PARAM = 256
KERNEL_OP = "inductor_kernel"  # a pointwise or reduction kernel inductor generated
KERNEL_CONFIG = "triton_config"  # the template id of a kernel's launch configuration
LAUNCH_FIELDS = ("num_warps", "num_stages")
POINTER_DTYPES = {"*bf16": "bf16", "*fp16": "fp16", "*fp32": "fp32"}


def inductor_problem(
    op_name: str,
    dtypes: Sequence[Any],
    shapes: Sequence[Sequence[int]],
    strides: Sequence[Sequence[int]],
    scalars: dict[str, Any] | None = None,
) -> ProblemKey | None:
    """The problem of one product inductor compiles, or None where TPS does not tune it.

    `addmm` names (bias, a, b), `mm` (a, b) and `bmm` (a, b) with a batch dimension. The
    variant holds the op and a digest of every input's dtype, shape and stride and the
    scalars (alpha, beta), so two products share a problem only when inductor's lookup
    would give them the same configuration.
    """
    if op_name not in OPS or len(shapes) != len(strides) or len(shapes) != len(dtypes):
        return None
    operands = list(zip(dtypes, shapes, strides, strict=True))
    if op_name == "addmm":
        operands = operands[1:]
    if len(operands) != 2:
        return None
    (dtype_a, shape_a, stride_a), (dtype_b, shape_b, stride_b) = operands
    rank = 3 if op_name == "bmm" else 2
    if len(shape_a) != rank or len(shape_b) != rank or str(dtype_a) != str(dtype_b):
        return None
    dtype = DTYPES.get(str(dtype_a))
    if dtype is None:
        return None
    m, k = int(shape_a[-2]), int(shape_a[-1])
    n = int(shape_b[-1])
    if int(shape_b[-2]) != k or min(m, n, k) < 1:
        return None
    dims = {"m": m, "n": n, "k": k}
    if rank == 3:
        dims["batch"] = int(shape_a[0])
    inputs = [
        (str(d), [int(x) for x in s], [int(x) for x in st])
        for d, s, st in zip(dtypes, shapes, strides, strict=True)
    ]
    named = sorted((str(key), repr(value)) for key, value in (scalars or {}).items())
    layout = repr((op_name, inputs, named))
    digest = hashlib.sha256(layout.encode()).hexdigest()[:20]
    return ProblemKey(
        op="gemm",
        dtype=dtype,
        dims=dims,
        trans_a=_column_major(shape_a, stride_a),
        trans_b=_column_major(shape_b, stride_b),
        variant=f"{BACKEND}:{op_name}:{digest}",
    )


def kernel_problem(autotuner: Any) -> ProblemKey | None:
    """The problem of one generated Triton kernel, or None where it cannot be named.

    Its dims are the kernel's size hints (`x`, `r0_`, ... without the underscore); its
    variant a digest of the kind of heuristic, the size hints, the kernel's source (its
    name left out) and the torch and Triton versions, so that only the very same kernel
    shares a configuration.
    """
    import torch

    try:
        source = _anonymous(str(autotuner.fn.src))
        hints = dict(autotuner.size_hints or {})
        heuristic = str(autotuner.heuristic_type)
        signature = dict((autotuner.triton_meta or {}).get("signature") or {})
    except (AttributeError, TypeError, ValueError):
        return None
    dims: dict[str, int] = {}
    for name, value in sorted(hints.items()):
        key = str(name).rstrip("_") or str(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0 and _is_key(key):
            dims[key] = value
    if not dims or len(dims) > MAX_FREE_DIMS:
        return None
    dtype = next((POINTER_DTYPES[t] for t in signature.values() if t in POINTER_DTYPES), "fp32")
    layout = repr((heuristic, sorted(hints.items()), source, torch.__version__, _triton()))
    digest = hashlib.sha256(layout.encode()).hexdigest()[:24]
    try:
        return ProblemKey(
            op=KERNEL_OP, dtype=dtype, dims=dims, variant=f"{BACKEND}:kernel:{digest}"
        )
    except ValueError:  # a size hint past the bounds of a dim
        return None


_KERNEL_NAME = re.compile(r"def\s+(\w+)\s*\(")


def _kernel_name(autotuner: Any) -> str:
    """A generated kernel's name in its graph (`triton_poi_fused_add_3`), or "" unknown."""
    try:
        found = _KERNEL_NAME.search(str(autotuner.fn.src))
    except AttributeError:
        return ""
    return found.group(1) if found is not None else ""


def _plain_reduction(name: str) -> bool:
    """Whether a kernel named `name` in its graph is a reduction fusing no matrix product
    (`triton_red_fused_add_mean_pow_rsqrt_2`, `triton_per_fused_...`, or no name)."""
    kind, _, rest = name.removeprefix("triton_").partition("_")
    if kind == "poi":
        return False
    ops = set(rest.split("_"))
    return not (ops & PRODUCT_OPS)


def _anonymous(source: str) -> str:
    """A kernel's source without its name, which ends in a counter of the graph it is in
    (`triton_poi_fused_add_3`): the same kernel in another graph, or another host's graph
    that fused one kernel differently before it, keeps its configuration."""
    found = _KERNEL_NAME.search(source)
    if found is None:
        return source
    return re.sub(rf"\b{re.escape(found.group(1))}\b", "kernel", source)


def _triton() -> str:
    try:
        import triton
    except ImportError:
        return "none"
    return str(triton.__version__)


def _column_major(shape: Sequence[int], stride: Sequence[int]) -> bool:
    rows, cols = int(shape[-2]), int(shape[-1])
    return int(stride[-2]) == 1 and int(stride[-1]) != 1 and rows > 1 and cols > 1


def config_candidate(template_id: str, kwargs: dict[str, Any]) -> Candidate | None:
    """The candidate of one template configuration: its JSON-scalar parameters.

    Values that are not plain scalars (epilogue functions, layouts) are inductor's own
    derivations from the problem; the lookup rebuilds them, so they are not stored.
    """
    params: dict[str, Any] = {TEMPLATE_ID: template_id}
    for name, value in sorted(kwargs.items()):
        if len(params) >= MAX_PARAMS or not _is_key(name):
            continue
        if isinstance(value, bool | int):
            params[name] = value
        elif isinstance(value, float) and math.isfinite(value):
            params[name] = value
        elif isinstance(value, str) and len(value) <= MAX_STR_PARAM and "\x00" not in value:
            params[name] = value
    try:
        return Candidate(backend=BACKEND, params=params)
    except ValueError:
        return None


def _is_extern(candidate: Candidate) -> bool:
    return str(candidate.params.get(TEMPLATE_ID, "")).startswith(EXTERN_PREFIX)


def _is_key(name: str) -> bool:
    return 0 < len(name) <= 64 and re.fullmatch(KEY_PATTERN, name) is not None


@dataclass
class CompiledStats:
    """What a compiled block did: products served from the cache or fleet, products searched."""

    lookups: int = 0  # inductor's questions: one per product and group of templates
    hits: int = 0
    fleet_hits: int = 0
    served: int = 0  # configurations handed to inductor over all hits
    searched: int = 0
    retimed: int = 0  # searched products whose finalists were timed again
    kernel_lookups: int = 0  # pointwise and reduction kernels about to be tuned
    kernel_hits: int = 0  # of those, run with a known configuration, untuned
    kernels_tuned: int = 0  # tuned here, recorded and pushed
    retime_s: float = 0.0  # seconds spent timing searches' finalists again
    likely: int = 0  # searched products that timed the most similar hardware's fastest only
    kernel_tune_s: float = 0.0  # seconds spent tuning kernels (either way below)
    kernels_likely: int = 0  # of those tuned, timed among the most similar hardware's fastest
    kernels_descended: int = 0  # of those, tuned further by coordinate descent
    # each kernel timed among the most similar hardware's fastest: its fastest there (µs)
    kernel_likely_us: list[float] = field(default_factory=list)
    # and how much slower the slowest of those it timed was (slowest / fastest)
    kernel_likely_spread: list[float] = field(default_factory=list)
    # each kernel descended: [fastest likely µs, fastest after the descent µs, seconds]
    kernel_descents: list[list[float]] = field(default_factory=list)
    # and its name in the graph (`triton_red_fused_...`: its kind of heuristic and its ops)
    kernel_descent_names: list[str] = field(default_factory=list)
    # the descents' configurations compiled ahead in compile workers (`kernel_ahead`)
    ahead: AheadStats = field(default_factory=AheadStats)


def _fastest_timed_us(autotuner: Any, otherwise_us: float) -> float:
    """The fastest time (µs) in a kernel's tuner cache, or `otherwise_us` where it has none."""
    tuner = getattr(autotuner, "coordesc_tuner", None)
    results = dict(getattr(tuner, "cached_benchmark_results", None) or {})
    times = [
        float(ms) * 1e3
        for ms in results.values()
        if isinstance(ms, int | float) and math.isfinite(ms) and ms > 0
    ]
    return min(times, default=otherwise_us)


class InductorFleet:
    """The winners of inductor's GEMM search on this hardware: cache, fleet and recorder.

    `shortlist` is how many of a product's fastest configurations inductor gets to time
    (1, the default: the winner alone, which inductor compiles with no timing).
    `finalists` is how many of a search's fastest configurations are timed again, in
    `rounds` rounds, before its winner is chosen and recorded (0: the search's one timing
    decides). `likely` is how many configurations a search times where this GPU model has
    no winner but the fleet answers with the most similar hardware's ranking (0: inductor's
    whole search space); the search is recorded as any other, its finalists
    `likely_finalists` (0: its one timing decides). `kernel_likely` is the same
    for a pointwise or reduction kernel: inductor's own launch configuration and that
    hardware's `kernel_likely` fastest are timed, in place of coordinate descent (0: always
    coordinate descent); with `kernel_descend`, coordinate descent then starts from the
    fastest of them, for the kernels whose fastest takes at least `kernel_descend_min_us`
    a launch.
    """

    def __init__(
        self,
        session: RuntimeSession,
        *,
        shortlist: int = SHORTLIST,
        finalists: int = FINALISTS,
        rounds: int = FINALIST_ROUNDS,
        likely: int = LIKELY,
        kernel_likely: int = KERNEL_LIKELY,
        kernel_descend: bool = KERNEL_DESCEND,
        kernel_descend_min_us: float = KERNEL_DESCEND_MIN_US,
        kernel_descend_reductions: bool = KERNEL_DESCEND_REDUCTIONS,
        likely_finalists: int = LIKELY_FINALISTS,
        kernel_ahead: bool = KERNEL_AHEAD,
        compile_pool: Pool | None = None,
    ) -> None:
        if shortlist < 1:
            raise ValueError(f"shortlist must be at least 1, not {shortlist}")
        if likely < 0 or likely == 1:
            raise ValueError(f"likely must be 0 or at least 2 (a search), not {likely}")
        if kernel_likely < 0:
            raise ValueError(f"kernel_likely must be 0 or more, not {kernel_likely}")
        if finalists < 0 or finalists == 1 or rounds < 1:
            raise ValueError(
                f"finalists must be 0 or at least 2 and rounds at least 1, not {finalists} "
                f"and {rounds}"
            )
        if not (math.isfinite(kernel_descend_min_us) and kernel_descend_min_us >= 0):
            raise ValueError(
                f"kernel_descend_min_us must be a finite number of µs, 0 or more, not "
                f"{kernel_descend_min_us}"
            )
        if likely_finalists < 0 or likely_finalists == 1:
            raise ValueError(f"likely_finalists must be 0 or at least 2, not {likely_finalists}")
        self.session = session
        self.shortlist = shortlist
        self.finalists = finalists
        self.likely_finalists = likely_finalists
        self.rounds = rounds
        self.likely = likely
        self.kernel_likely = kernel_likely
        self.kernel_descend = kernel_descend
        self.kernel_descend_min_us = kernel_descend_min_us
        self.kernel_descend_reductions = kernel_descend_reductions
        self.kernel_ahead = kernel_ahead
        self.compile_pool = compile_pool
        self._pool_looked_up = compile_pool is not None
        self.stats = CompiledStats()
        self._asked: set[str] = set()
        self._recorded: set[str] = set()
        self._problems: dict[str, ProblemKey] = {}
        self._rankings: dict[str, list[Candidate]] = {}
        # the most similar hardware's ranking, where this hardware has none (source nearest)
        self._nearest: dict[str, list[Candidate]] = {}
        self._likely: set[str] = set()
        # a searched product's finalists: candidate id -> median of their timings again (ms)
        self._retimed: dict[str, dict[str, float]] = {}

    # -- lookup: what inductor asks while it lowers a product -----------------------------
    def configs(self, problem: ProblemKey) -> list[dict[str, Any]] | None:
        """The configurations to compile `problem` with, fastest first; None: inductor searches."""
        rt = self.session.runtime
        self.stats.lookups += 1
        key = problem.key_hash()
        entry = rt.cache.get(problem, rt.hardware)
        # A cached winner alone has no ranking: a shortlist of several asks the fleet for it.
        if entry is None or (self.shortlist > 1 and key not in self._rankings):
            asked = self._ask_fleet(problem)
            if entry is None and asked is not None:
                entry = asked
                self.stats.fleet_hits += 1
        if entry is None:
            return self.likely_configs(problem)
        if entry.winner.backend != BACKEND:
            return None
        self.stats.hits += 1
        shortlist = self.shortlisted(problem, entry.winner)
        self.stats.served += len(shortlist)
        return [dict(c.params) for c in shortlist]  # each a template id and its parameters

    def shortlisted(self, problem: ProblemKey, winner: Candidate) -> list[Candidate]:
        """The winner, then the next fastest up to `shortlist`, plus the fastest extern choice.

        Where the recorded ranking's extern choice (cuBLAS through ATen) falls outside a
        shortlist of several it still joins it: inductor then weighs a library kernel with its
        epilogue apart against the Triton templates with theirs fused, as max-autotune does.
        A shortlist of one is the winner alone: nothing is timed.
        """
        ranking = [c for c in self._rankings.get(problem.key_hash(), []) if c.id != winner.id]
        shortlist = [winner, *ranking][: self.shortlist]
        if self.shortlist > 1 and not any(_is_extern(c) for c in shortlist):
            shortlist += [c for c in ranking if _is_extern(c)][:1]
        return shortlist

    def likely_configs(self, problem: ProblemKey) -> list[dict[str, Any]] | None:
        """The configurations a search of `problem` times where the most similar hardware
        ranked it: its `likely` fastest, plus its fastest extern choice; None: every one.

        The search is this hardware's own (timed here, its finalists again, recorded).
        """
        key = problem.key_hash()
        nearest = self._nearest.get(key, [])
        if self.likely < 2 or not self.searching(problem):
            return None
        picks = nearest[: self.likely]
        if not any(_is_extern(c) for c in picks):
            picks += [c for c in nearest if _is_extern(c)][:1]
        if len(picks) < 2:
            return None
        if key not in self._likely:
            log.debug(
                "%s: searching the nearest hardware's %d fastest", problem.canonical(), len(picks)
            )
        self._likely.add(key)
        self.stats.likely = len(self._likely)
        return [dict(c.params) for c in picks]

    def learn(self, run: ProbeRun, *, nearest: bool = False) -> None:
        """Keep the ranking of a search: its valid configurations, fastest first.

        With `nearest`, the search is another hardware's (the most similar one that ran
        the product): a search of the product here times its fastest `likely` only.
        """
        valid = [m for m in run.measurements if m.valid and m.median_us is not None]
        valid.sort(key=lambda m: m.median_us or math.inf)
        ranking = [m.candidate for m in valid if m.candidate.backend == BACKEND]
        if ranking:
            (self._nearest if nearest else self._rankings)[run.problem.key_hash()] = ranking
            self._problems.setdefault(run.problem.key_hash(), run.problem)

    def searching(self, problem: ProblemKey) -> bool:
        """Whether inductor searches `problem` here: no winner was served for it."""
        rt = self.session.runtime
        return (
            problem.key_hash() not in self._rankings and rt.cache.get(problem, rt.hardware) is None
        )

    def _ask_fleet(self, problem: ProblemKey) -> Any:
        """The fleet's observed winner of `problem` and its ranking (asked once).

        The winner is merged into the cache where the cache has none of its own.
        """
        from agents.runtime.fleet import FleetError

        fleet, rt = self.session.fleet, self.session.runtime
        key = problem.key_hash()
        if key in self._asked or fleet is None:
            return None
        self._asked.add(key)
        try:
            priors = fleet.fetch(rt.hardware, [problem])
        except FleetError as exc:
            log.warning("no fleet answer for %s; inductor searches: %s", problem.canonical(), exc)
            return None
        for prior in priors:
            ranked = sorted(prior.candidates, key=lambda c: c.rank)
            ranking = [c.candidate for c in ranked if c.candidate.backend == BACKEND]
            if ranking and prior.source == "observed":
                self._rankings[key] = ranking
            elif ranking and prior.source == "nearest":
                self._nearest[key] = ranking
        entries = fleet.entries(rt.hardware, [problem], priors)
        if rt.cache.get(problem, rt.hardware) is None:
            rt.cache.merge(entries)
        return entries[0] if entries else None

    # -- recording: what inductor timed when it had to search -----------------------------
    def record(
        self,
        problem: ProblemKey,
        timed: Sequence[tuple[Candidate, float]],
        *,
        winner: Candidate | None = None,
        samples: dict[str, int] | None = None,
        rationale: str = "inductor's GEMM search under max-autotune, recorded by TPS",
    ) -> ProbeRun | None:
        """Turn one search's timings (milliseconds) into a probe run: cached, then pushed.

        The winner is the fastest valid timing unless `winner` names the one inductor chose.
        `samples` counts the timings behind a candidate's figure (1 where it is not given).
        """
        measurements: dict[str, Measurement] = {}
        for candidate, ms in timed:
            if candidate.id in measurements:
                continue
            if math.isfinite(ms) and ms > 0:
                measurements[candidate.id] = Measurement(
                    candidate=candidate,
                    median_us=ms * 1000.0,
                    samples=(samples or {}).get(candidate.id, 1),
                )
            else:
                measurements[candidate.id] = Measurement(
                    candidate=candidate, valid=False, error="inductor could not run it"
                )
        if not measurements:
            return None
        valid = [m for m in measurements.values() if m.valid and m.median_us is not None]
        best = min(valid, key=lambda m: m.median_us or math.inf) if valid else None
        chosen = measurements.get(winner.id) if winner is not None else None
        if chosen is not None and chosen.valid:
            best = chosen
        rt = self.session.runtime
        run = ProbeRun(
            run_id=uuid.uuid4(),
            host_id=self.session.host_id,
            hardware=rt.hardware,
            problem=problem,
            measurements=list(measurements.values())[:MAX_MEASUREMENTS_PER_RUN],
            winner_id=best.candidate.id if best is not None else None,
            source=BACKEND,
            rationale=rationale,
        )
        rt.cache.put(run)
        self.learn(run)
        if rt.on_probe is not None:
            rt.on_probe(run)
        return run

    # -- kernels: inductor's coordinate-descent tuning, once per fleet --------------------
    def kernel_config(self, problem: ProblemKey) -> dict[str, Any] | None:
        """The launch configuration this host's cache or the fleet knows for a kernel."""
        rt = self.session.runtime
        self.stats.kernel_lookups += 1
        entry = rt.cache.get(problem, rt.hardware)
        if entry is None:
            entry = self._ask_fleet(problem)
            if entry is not None:
                self.stats.fleet_hits += 1
        if entry is None:
            return None
        return _launch_params(entry.winner)

    def likely_kernel_configs(self, problem: ProblemKey) -> list[dict[str, Any]]:
        """The most similar hardware's `kernel_likely` fastest launch configurations of a
        kernel (none where it has not tuned it, or `kernel_likely` is 0)."""
        picks: list[dict[str, Any]] = []
        for candidate in self._nearest.get(problem.key_hash(), []):
            if len(picks) >= self.kernel_likely:
                break
            params = _launch_params(candidate)
            if params is not None and params not in picks:
                picks.append(params)
        return picks

    def tune_kernel(
        self, tune: Any, autotuner: Any, launcher: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """Run inductor's tuning of one kernel (`tune`), or the configuration already known.

        A known configuration that does not build here falls back to tuning, logged once.
        """
        if not _coordesc_tunes(autotuner):
            return tune(autotuner, launcher, *args, **kwargs)
        problem = kernel_problem(autotuner)
        if problem is None:
            return tune(autotuner, launcher, *args, **kwargs)
        params = self.kernel_config(problem)
        if params is not None:
            served = _launcher_of(autotuner, params)
            if served is not None:
                self.stats.kernel_hits += 1
                return served
        start = time.perf_counter()
        searched = self.search_kernel(problem, autotuner, launcher, *args, **kwargs)
        if searched is None:
            with self._ahead(autotuner, launcher):
                winner = tune(autotuner, launcher, *args, **kwargs)
        else:
            winner, fastest_us = searched
            if self.descends(autotuner, fastest_us):
                # the descent starts from the fastest likely configuration
                self.stats.kernels_descended += 1
                descent = time.perf_counter()
                with self._ahead(autotuner, winner):
                    winner = tune(autotuner, winner, *args, **kwargs)
                self.stats.kernel_descents.append(
                    [
                        round(fastest_us, 3),
                        round(_fastest_timed_us(autotuner, fastest_us), 3),
                        round(time.perf_counter() - descent, 3),
                    ]
                )
                self.stats.kernel_descent_names.append(_kernel_name(autotuner))
        self.stats.kernel_tune_s += time.perf_counter() - start
        self.record_kernel(problem, autotuner, winner)
        return winner

    def _ahead(self, autotuner: Any, start: Any) -> Any:
        """A descent from launcher `start` with its next configurations compiled ahead."""
        if not self.kernel_ahead:
            return nullcontext()
        if not self._pool_looked_up:
            self.compile_pool, self._pool_looked_up = inductor_pool(), True
        if self.compile_pool is not None:
            _load_here(autotuner)  # its source is read from the module inductor loads
        return compiled_ahead(
            autotuner,
            getattr(start, "config", None),
            pool=self.compile_pool,
            stats=self.stats.ahead,
        )

    def descends(self, autotuner: Any, fastest_us: float) -> bool:
        """Whether coordinate descent tunes a kernel further from its fastest likely
        configuration (`fastest_us` a launch): with `kernel_descend`, one of at least
        `kernel_descend_min_us`, pointwise or fusing a matrix product, or any kind with
        `kernel_descend_reductions`."""
        if not self.kernel_descend or fastest_us < self.kernel_descend_min_us:
            return False
        return self.kernel_descend_reductions or not _plain_reduction(_kernel_name(autotuner))

    def search_kernel(
        self, problem: ProblemKey, autotuner: Any, launcher: Any, *args: Any, **kwargs: Any
    ) -> tuple[Any, float] | None:
        """Time `launcher` (inductor's own configuration) and the most similar hardware's
        fastest configurations of the kernel; return the fastest one's launcher and its
        time (µs a launch).

        None where that hardware has not tuned the kernel, or fewer than two of them build
        and run here: inductor's coordinate descent then tunes it. The timings go to
        inductor's tuner cache, where the record reads them, as coordinate descent's do.
        """
        picks = self.likely_kernel_configs(problem)
        if not picks:
            return None
        tuner = autotuner.coordesc_tuner
        timed: list[tuple[float, int, Any]] = []
        for i, params in enumerate([None, *picks]):
            built = launcher if params is None else _launcher_of(autotuner, params, quiet=True)
            if built is None:
                continue
            ms = tuner.call_func(
                lambda _config, b=built: autotuner.bench(b, *args, **kwargs), built.config
            )
            if isinstance(ms, int | float) and math.isfinite(ms) and ms > 0:
                timed.append((float(ms), i, built))
        if len(timed) < 2:
            log.debug(
                "%s: the nearest hardware's configurations did not run here", problem.canonical()
            )
            return None
        ms, _, fastest = min(timed, key=lambda t: t[:2])
        fastest.config.found_by_coordesc = True  # inductor tunes it no further
        self.stats.kernels_likely += 1
        self.stats.kernel_likely_us.append(round(ms * 1e3, 3))
        self.stats.kernel_likely_spread.append(round(max(t[0] for t in timed) / ms, 4))
        return fastest, ms * 1e3

    def record_kernel(self, problem: ProblemKey, autotuner: Any, winner: Any) -> None:
        """Record the configurations one kernel's tuning timed, and the one it chose."""
        tuner = getattr(autotuner, "coordesc_tuner", None)
        results = dict(getattr(tuner, "cached_benchmark_results", None) or {})
        timed = []
        for items, ms in results.items():
            candidate = config_candidate(KERNEL_CONFIG, dict(items))
            if candidate is not None and isinstance(ms, int | float):
                timed.append((candidate, float(ms)))
        chosen = config_candidate(KERNEL_CONFIG, _config_params(getattr(winner, "config", None)))
        run = self.record(
            problem,
            timed,
            winner=chosen,
            rationale="inductor's coordinate-descent tuning of a kernel, recorded by TPS",
        )
        if run is not None:
            self.stats.kernels_tuned += 1

    # -- the hooks inductor calls --------------------------------------------------------
    def problem_of(self, kernel_inputs: Any, op_name: str) -> ProblemKey | None:
        try:
            problem = inductor_problem(
                op_name,
                kernel_inputs.dtypes(),
                kernel_inputs.shapes_hinted(),
                kernel_inputs.strides_hinted(),
                dict(getattr(kernel_inputs, "_scalars", None) or {}),
            )
        except (TypeError, ValueError) as exc:  # symbolic sizes, an unknown layout
            log.debug("inductor product %s not tuned: %s", op_name, exc)
            return None
        if problem is not None:
            self._problems.setdefault(problem.key_hash(), problem)
        return problem

    def feedback(
        self,
        timings: dict[Any, float],
        name: str,
        input_nodes: Any,
        choices: Any,
        bench: Callable[..., dict[Any, float]] | None = None,
        *_: Any,
    ) -> None:
        """Inductor's feedback after a search: the timings of the choices TPS tagged.

        Before a product's first search is recorded, its finalists are timed again
        (`bench`, inductor's profiler-timed benchmark). Inductor chooses from `timings`
        after this call returns, so the finalists' medians choose on this host as they do
        for the fleet; a product the graph repeats gets the same medians again.
        """
        by_problem: dict[str, dict[Any, Candidate]] = {}
        for choice in timings:
            tag = (getattr(choice, "annotations", None) or {}).get("tps")
            if tag is not None:
                problem_hash, candidate = tag
                by_problem.setdefault(problem_hash, {})[choice] = candidate
        for problem_hash, tagged in by_problem.items():
            problem = self._problems.get(problem_hash)
            if problem is None:
                continue
            # inductor reports a product again wherever the graph repeats it: record it once
            if problem_hash not in self._recorded:
                self._recorded.add(problem_hash)
                self._record_search(problem, tagged, timings, bench)
            _prefer(timings, tagged, self._retimed.get(problem_hash, {}))

    def _record_search(
        self,
        problem: ProblemKey,
        tagged: dict[Any, Candidate],
        timings: dict[Any, float],
        bench: Callable[..., dict[Any, float]] | None,
    ) -> None:
        searched = {choice: float(timings[choice]) for choice in tagged}
        medians: dict[str, float] = {}
        likely = problem.key_hash() in self._likely
        finalists = self.likely_finalists if likely else self.finalists
        if bench is not None and finalists:
            start = time.perf_counter()
            medians = self.retime(tagged, searched, bench, finalists=finalists)
            self.stats.retime_s += time.perf_counter() - start
        if medians:
            self._retimed[problem.key_hash()] = medians
            self.stats.retimed += 1
        timed = [(c, medians.get(c.id, searched[choice])) for choice, c in tagged.items()]
        fastest = min(medians, key=medians.__getitem__, default=None)
        winner = next((c for c in tagged.values() if c.id == fastest), None)
        again = dict.fromkeys(medians, self.rounds)
        if self.record(problem, timed, winner=winner, samples=again) is not None:
            self.stats.searched += 1

    def retime(
        self,
        tagged: dict[Any, Candidate],
        searched: dict[Any, float],
        bench: Callable[..., dict[Any, float]],
        *,
        finalists: int | None = None,
    ) -> dict[str, float]:
        """Time a search's finalists again; return each one's median by candidate id.

        The finalists are the configurations within FINALIST_SPREAD of the search's
        fastest, at most `finalists` (the fleet's `finalists` where not given); each round
        times them all, starting one further along. One search of a 5 µs product ranked its
        configurations differently from the next search on the same H200 (BENCHMARKS.md),
        and the fleet serves what is recorded here to every other host, which never searches
        it again. An empty answer (fewer than two finalists, or a failed benchmark) leaves
        the search's timings.
        """
        ranked = sorted(
            (ms, i, choice)
            for i, (choice, ms) in enumerate(searched.items())
            if math.isfinite(ms) and ms > 0
        )
        if not ranked:
            return {}
        limit = ranked[0][0] * (1 + FINALIST_SPREAD)
        most = self.finalists if finalists is None else finalists
        chosen = [choice for ms, _, choice in ranked if ms <= limit][:most]
        if len(chosen) < 2:
            return {}
        takes_choices = _takes_choices(bench)
        samples: dict[Any, list[float]] = {choice: [] for choice in chosen}
        for round_ in range(self.rounds):
            turn = round_ % len(chosen)
            order = chosen[turn:] + chosen[:turn]
            try:
                # an older inductor's benchmark takes no choices: it times them all
                got = bench(order) if takes_choices else bench()
            except Exception as exc:  # inductor's benchmark of a choice that will not run
                log.warning(
                    "timing the finalists of %s again failed; its search decides: %s",
                    tagged[chosen[0]].id,
                    exc,
                )
                return {}
            for choice in chosen:
                ms = got.get(choice)
                if isinstance(ms, int | float) and math.isfinite(ms) and ms > 0:
                    samples[choice].append(float(ms))
        return {
            tagged[choice].id: statistics.median(times)
            for choice, times in samples.items()
            if len(times) == self.rounds
        }


def _takes_choices(bench: Callable[..., Any]) -> bool:
    try:
        return bool(inspect.signature(bench).parameters)
    except (TypeError, ValueError):
        return False


def _prefer(
    timings: dict[Any, float], tagged: dict[Any, Candidate], medians: dict[str, float]
) -> None:
    """Have inductor choose among the finalists by their medians.

    Each finalist's timing becomes its median; every other configuration of the search is
    put no faster than the slowest finalist, as its one timing there was slower than theirs.
    """
    if not medians:
        return
    floor = math.nextafter(max(medians.values()), math.inf)
    for choice, candidate in tagged.items():
        ms = timings[choice]
        if candidate.id in medians:
            timings[choice] = medians[candidate.id]
        elif math.isfinite(ms):
            timings[choice] = max(ms, floor)


NOT_TUNED = frozenset({"TEMPLATE", "USER_AUTOTUNE", "FIXED"})  # inductor tunes these no further
ORDER_SENSITIVE = frozenset({"REDUCTION", "PERSISTENT_REDUCTION", "SPLIT_SCAN"})


def _coordesc_tunes(autotuner: Any) -> bool:
    """Whether inductor would tune this kernel one knob at a time (as its own check says).

    torch 2.13 asks `_should_coordesc_tune`; torch 2.11 checks the same inline: templates,
    a user's own `@triton.autotune` and fixed configurations are not tuned, nor reductions
    in deterministic mode.
    """
    if hasattr(type(autotuner), "_should_coordesc_tune"):
        return bool(autotuner._should_coordesc_tune)
    kind = getattr(autotuner, "heuristic_type", None)
    name = str(getattr(kind, "name", kind))
    if name in NOT_TUNED:
        return False
    return not (getattr(autotuner, "deterministic_mode", False) and name in ORDER_SENSITIVE)


def _config_params(config: Any) -> dict[str, Any]:
    """A Triton config's kwargs and launch fields, as the tuner's cache keys them."""
    if config is None:
        return {}
    params = dict(getattr(config, "kwargs", None) or {})
    for name in LAUNCH_FIELDS:
        params[name] = getattr(config, name, None)
    return params


def _triton_config(params: dict[str, Any]) -> Any:
    from triton import Config

    kwargs = {k: v for k, v in params.items() if k not in LAUNCH_FIELDS}
    return Config(kwargs, num_warps=params["num_warps"], num_stages=params["num_stages"])


def _launch_params(candidate: Candidate) -> dict[str, Any] | None:
    """A kernel candidate's launch configuration (kwargs and launch fields); None if not one."""
    if candidate.backend != BACKEND:
        return None
    params = dict(candidate.params)
    if params.pop(TEMPLATE_ID, None) != KERNEL_CONFIG or not all(
        isinstance(params.get(f), int) for f in LAUNCH_FIELDS
    ):
        return None
    return params


def _launcher_of(autotuner: Any, params: dict[str, Any], *, quiet: bool = False) -> Any:
    """A launcher of `autotuner`'s kernel with a known configuration; None if it will not build.

    A served configuration that will not build is logged as a warning; a `quiet` one (a
    likely configuration, one of several) at debug level.
    """
    try:
        config = _triton_config(params)
        config.found_by_coordesc = True  # inductor tunes it no further
        _load_here(autotuner)
        lock = getattr(autotuner, "lock", None) or nullcontext()
        with lock:
            return autotuner._precompile_config(config).make_launcher()
    except Exception as exc:  # a configuration from another build of the kernel
        (log.debug if quiet else log.warning)(
            "the fleet's configuration %s of %s did not build here; inductor tunes it: %s",
            params,
            getattr(getattr(autotuner, "fn", None), "__name__", "a kernel"),
            exc,
        )
        return None


def _load_here(autotuner: Any) -> None:
    """Load `autotuner`'s kernel function in this process, where a worker compiled it."""
    ensure = getattr(autotuner, "_ensure_kernel_loaded", None)
    if ensure is not None:
        ensure()
    elif getattr(autotuner.fn, "fn", True) is None and hasattr(autotuner, "_reload_kernel"):
        # compiled in a worker, which dropped the function: load it here, as inductor does
        autotuner.fn = autotuner._reload_kernel().fn


@contextmanager
def _kernel_tuning(fleet: InductorFleet) -> Iterator[None]:
    """Route inductor's coordinate-descent tuning of each kernel through `fleet`."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    original = CachingAutotuner.coordinate_descent_tuning

    def coordinate_descent_tuning(autotuner: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        return fleet.tune_kernel(original, autotuner, launcher, *args, **kwargs)

    CachingAutotuner.coordinate_descent_tuning = coordinate_descent_tuning  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        CachingAutotuner.coordinate_descent_tuning = original  # type: ignore[method-assign]


class CompiledRuntimeError(AgentError):
    """This torch cannot compile with the fleet's winners."""


def _choices_class() -> type:
    """A subclass of inductor's lookup-table choices that asks TPS (built on first use)."""
    try:
        from torch._inductor.lookup_table import LookupTableChoices
    except ImportError as exc:
        import torch

        raise CompiledRuntimeError(
            "tps_runtime.compiled needs inductor's template lookup table (torch 2.11 and "
            f"2.13 have it); this is torch {torch.__version__}: {exc}"
        ) from exc

    class TpsChoices(LookupTableChoices):
        def __init__(self, fleet: InductorFleet) -> None:
            super().__init__()
            self.fleet = fleet

        def lookup_template_configs(
            self,
            kernel_inputs: Any,
            op_name: str,
            template_uids: list[str],
            template_hash_map: Any = None,
        ) -> dict[str, list[dict[str, Any]]]:
            problem = self.fleet.problem_of(kernel_inputs, op_name)
            if problem is None:
                return {}
            configs = self.fleet.configs(problem)
            if not configs:
                return {}
            grouped: dict[str, list[dict[str, Any]]] = {}
            for config in configs:
                template_id = config[TEMPLATE_ID]
                if template_id in template_uids:
                    kwargs = {k: v for k, v in config.items() if k != TEMPLATE_ID}
                    grouped.setdefault(template_id, []).append(kwargs)
            # A search among another hardware's fastest needs two choices here to time: with
            # fewer (templates this inductor lacks), inductor searches them all.
            if self.fleet.searching(problem) and sum(map(len, grouped.values())) < 2:
                return {}
            return grouped

        def _finalize_template_configs(
            self,
            template_choices: Any,
            kernel_inputs: Any,
            templates: Any,
            op_name: str,
            *rest: Any,  # kwarg_overrides (and max_autotune, in an older inductor)
            **more: Any,
        ) -> Any:
            chosen = super()._finalize_template_configs(
                template_choices, kernel_inputs, templates, op_name, *rest, **more
            )
            problem = self.fleet.problem_of(kernel_inputs, op_name)
            # A served product is not searched: templates its configurations do not name
            # (ATen's, which torch 2.13 asks for apart in addmm) join it unrecorded. A
            # search is tagged for recording, whether it times inductor's whole space (a
            # lookup miss) or the most similar hardware's fastest (`likely`, a lookup hit).
            if problem is None or not self.fleet.searching(problem):
                return chosen
            for ktc in chosen:
                annotations = getattr(ktc, "annotations", None)
                candidate = config_candidate(ktc.template.uid, ktc.params.to_kwargs())
                if isinstance(annotations, dict) and candidate is not None:
                    annotations["tps"] = (problem.key_hash(), candidate)
            return chosen

    return TpsChoices


@contextmanager
def compiled(
    session: RuntimeSession | None = None,
    *,
    shortlist: int = SHORTLIST,
    tune_kernels: bool = True,
    device_time: bool = True,
    finalists: int = FINALISTS,
    likely: int = LIKELY,
    kernel_likely: int = KERNEL_LIKELY,
    kernel_descend: bool = KERNEL_DESCEND,
    kernel_descend_min_us: float = KERNEL_DESCEND_MIN_US,
    kernel_descend_reductions: bool = KERNEL_DESCEND_REDUCTIONS,
    likely_finalists: int = LIKELY_FINALISTS,
    epilogues: bool = EPILOGUES,
    kernel_ahead: bool = KERNEL_AHEAD,
    **options: Any,
) -> Iterator[InductorFleet]:
    """Compile inside the block with the fleet's GEMM winners; search and record the rest.

    Give an open `session` or the options of `open_session`. The first call of a
    compiled model compiles it and tunes its kernels, so that call belongs inside the
    block. `shortlist` is how many of each product's fastest configurations inductor times
    (see `InductorFleet`); `tune_kernels` tunes every other kernel too, through the fleet
    (see the module's docstring). `device_time` (on a GPU) has a search time each
    configuration by its kernels' device time, read from the profiler, as the probe engine
    times candidates: the host's launch costs and its gaps are left out, which moved a 5 µs
    product's timings by 30% from one search to the next (BENCHMARKS.md). The winner is
    recorded once and served to the fleet, so it is worth the profiler's cost.
    On a GPU, `finalists` of each search's fastest configurations (those within 25% of the
    fastest) are timed again in 3 rounds before the winner is chosen and recorded (see
    `InductorFleet.retime`; 0 leaves the search's one timing to decide).
    A product this GPU model never compiled, which the fleet compiled on similar hardware,
    is searched among that hardware's `likely` fastest configurations only (0: inductor's
    whole search), and that search's one timing decides (`likely_finalists` 0); a kernel it
    tuned, among its `kernel_likely` fastest launch configurations and inductor's own (0:
    coordinate descent; `kernel_descend`: coordinate descent from the fastest of them, for
    a kernel whose fastest takes at least `kernel_descend_min_us` a launch, pointwise or
    fusing a matrix product unless `kernel_descend_reductions`; `kernel_ahead`: the
    configurations a descent tries next compiled ahead in inductor's compile workers).
    `epilogues` has a search with several configurations time each one again with its
    neighbours fused (inductor's `benchmark_epilogue_fusion`, on under
    max-autotune); off, inductor fuses them by its rules, as it does the one configuration
    of a product the fleet knows.
    """
    import torch._inductor.config as inductor_config
    from torch._inductor import select_algorithm
    from torch._inductor.virtualized import V

    from agents.runtime.session import open_session

    own = session is None
    session = session or open_session(**options)
    gpu = session.runtime.device.is_gpu
    fleet = InductorFleet(
        session,
        shortlist=shortlist,
        finalists=finalists if gpu else 0,
        likely=likely,
        kernel_likely=kernel_likely,
        kernel_descend=kernel_descend,
        kernel_descend_min_us=kernel_descend_min_us,
        kernel_descend_reductions=kernel_descend_reductions,
        likely_finalists=likely_finalists if gpu else 0,
        kernel_ahead=kernel_ahead,
    )
    handler = _choices_class()(fleet)
    saver = select_algorithm.get_algorithm_selector_cache()  # the one that searches
    with ExitStack() as stack:
        # inductor's caches would hand back a program compiled without the fleet's choices
        stack.enter_context(
            inductor_config.patch(max_autotune_gemm=True, force_disable_caches=True)
        )
        if device_time and gpu:
            stack.enter_context(
                inductor_config.patch(profile_bandwidth_with_do_bench_using_profiling=True)
            )
        if not epilogues:
            stack.enter_context(inductor_config.patch(benchmark_epilogue_fusion=False))
        if tune_kernels:
            stack.enter_context(inductor_config.patch(coordinate_descent_tuning=True))
            stack.enter_context(_kernel_tuning(fleet))
        stack.enter_context(V.set_choices_handler(handler))
        saver.add_feedback_saver(fleet.feedback)
        try:
            yield fleet
        finally:
            if fleet.feedback in saver.feedback_saver_fns:
                saver.feedback_saver_fns.remove(fleet.feedback)
            rt = session.runtime
            if rt.cache.path is not None:
                rt.cache.save()
            if own:
                session.close()


# What `compile` adds to its second compile's options: a default value, so the program is
# unchanged, but another options dict, so dynamo compiles the model again rather than serve
# the first compile's frame (the first of these that the caller's options do not name).
RECOMPILE_MARKERS = ({"trace.enabled": False}, {"trace.graph_diagram": False})


def compile(
    model: Any,
    example: Sequence[Any] = (),
    *,
    session: RuntimeSession | None = None,
    recompile: bool = True,
    options: dict[str, Any] | None = None,
    **how: Any,
) -> Callable[..., Any]:
    """Return `model` compiled with the fleet's GEMM winners, compiling it now.

    The model is called once with `example` (its positional arguments, or one tensor)
    inside `compiled` (`how`: shortlist, tune_kernels, device_time, finalists, likely,
    kernel_likely, kernel_descend, kernel_descend_min_us, kernel_descend_reductions,
    likely_finalists, epilogues),
    which searches and records what nobody measured yet. Where that compile searched, the
    model is compiled and called once more, from the winners just recorded (`recompile`):
    the program every other host of the fleet compiles. `options` are inductor's, for both compiles.
    """
    import torch

    from agents.runtime.session import open_session

    if isinstance(example, torch.Tensor):
        example = (example,)  # not its rows as arguments
    own = session is None
    session = session or open_session()
    gemm_search = {"max_autotune_gemm": True, **(options or {})}
    marker = next((m for m in RECOMPILE_MARKERS if not m.keys() & gemm_search.keys()), None)
    if recompile and marker is None:
        names = [key for m in RECOMPILE_MARKERS for key in m]
        raise ValueError(
            f"options name {names}, which compile needs to tell its second compile from the "
            "first: leave one of them out, or pass recompile=False"
        )
    try:
        program: Callable[..., Any] = torch.compile(model, options=gemm_search)
        with compiled(session, **how) as fleet:
            program(*example)
        if not (recompile and fleet.stats.searched):
            return program
        log.info(
            "compiling again from the %d searched products' winners, as the fleet will",
            fleet.stats.searched,
        )
        assert marker is not None
        again: Callable[..., Any] = torch.compile(model, options={**gemm_search, **marker})
        with compiled(session, **how):
            again(*example)
        return again
    finally:
        if own:
            session.close()
