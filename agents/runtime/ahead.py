"""A kernel's coordinate descent, its next configurations compiled ahead in worker processes.

Inductor's coordinate descent tries a kernel's launch configurations one at a time: Triton
compiles each in this process, then it is timed. On a GPU model new to the fleet, compiling
was most of a descent's time (BENCHMARKS.md), and threads cannot share it: Triton's compiler
holds the interpreter. But Triton keeps every compiled kernel in its cache on disk, keyed by
the kernel's source and options, so a configuration compiled in another process is found
there. `compiled_ahead` has inductor's own compile workers compile, while the descent runs,
every neighbour of its start and of each configuration that becomes its best: the ones it
tries next. The descent's own compile of each then reads Triton's cache.

What the descent times and chooses is inductor's, unchanged: only where the compiling
happens moves. Where no worker pool runs (one compile thread), the kernel's source cannot be
read, or a worker fails or is late, the descent compiles that configuration itself.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

# How long the descent waits for a worker's compile before it compiles the configuration
# itself: Triton compiles one in well under this; a worker past it is stuck or gone.
WAIT_S = 60.0
# What of this process's environment a compile worker takes on for a compile, so that it
# compiles as this process would (the same cache key, so the descent finds it): Triton's
# variables, and inductor's cache. A worker starts with Triton's ptxas set to torch's own
# (`TRITON_PTXAS_PATH`), which this process sets only where it compiled a kernel itself.
ENV_PREFIXES = ("TRITON_",)
ENV_VARS = ("TORCHINDUCTOR_CACHE_DIR",)


class Pool(Protocol):
    """What this module asks of a pool of compile workers (inductor's, or a test's)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]: ...


@dataclass
class AheadStats:
    """What compiling ahead did over a block's descents."""

    submitted: int = 0  # configurations handed to a worker
    used: int = 0  # of those, compiled by a worker before the descent compiled them
    wait_s: float = 0.0  # seconds the descent waited for a worker's compile
    # seconds the descent then spent compiling those itself: Triton reading its cache
    compile_after_s: float = 0.0
    worker_s: float = 0.0  # seconds the workers' compiles of those took, in the workers
    # of those, how many the descent's own compile still added to Triton's cache (missed it)
    missed: int = 0
    own: int = 0  # configurations the descent compiled with no worker's compile first
    own_s: float = 0.0  # and the seconds it took


def compile_config(name: str, source: str, config: Any, env: dict[str, str]) -> float | None:
    """Compile kernel `name` of module `source` at `config` into Triton's cache (in a worker);
    return the seconds it took.

    None where it does not build (too large for this GPU, say): the descent finds that too,
    when it tries the configuration itself.
    """
    start = time.perf_counter()
    from torch._inductor.codecache import PyCodeCache

    with _environment(env):
        kernel = getattr(PyCodeCache.load(source), name)
        try:
            kernel._precompile_config(config)
        except Exception as exc:  # the descent's own compile reports it, if it tries it
            log.debug("%s did not compile at %s: %s", name, config, exc)
            return None
    return time.perf_counter() - start


def _compile_environment() -> dict[str, str]:
    """What of this process's environment decides how Triton compiles, and where it keeps it."""
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) or k in ENV_VARS}


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """Take on `env` as the whole of the compile environment, then put the worker's back
    (inductor's own compiles run in the same worker)."""
    own = _compile_environment()
    for k in own.keys() - env.keys():
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env.keys() - own.keys():
            os.environ.pop(k, None)
        os.environ.update(own)


def inductor_pool() -> Pool | None:
    """Inductor's pool of compile workers, where it runs one (more than one compile thread)."""
    try:
        from torch._inductor import async_compile

        if async_compile.get_compile_threads() <= 1:
            return None
        pool: Pool = async_compile.AsyncCompile.process_pool()
    except Exception as exc:  # another torch's inductor: the descent compiles everything itself
        log.debug("no compile workers to compile a descent's configurations ahead: %s", exc)
        return None
    return pool


def kernel_source(autotuner: Any) -> tuple[str, str] | None:
    """The name of `autotuner`'s kernel and its module's source, as inductor wrote it to disk."""
    fn = getattr(getattr(autotuner, "fn", None), "fn", None)
    name = getattr(fn, "__name__", None)
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not isinstance(name, str) or not isinstance(path, str) or not os.path.isfile(path):
        return None
    try:
        return name, Path(path).read_text()
    except OSError:
        return None


def _cache_entries() -> int:
    """How many kernels Triton's cache on disk holds (one folder each)."""
    folder = os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")
    try:
        return len(os.listdir(folder))
    except OSError:
        return 0


def config_key(config: Any) -> tuple[Any, ...]:
    """A launch configuration as a key: its kwargs and launch fields."""
    fields = ("num_warps", "num_stages", "num_ctas", "maxnreg")
    kwargs = tuple(sorted((getattr(config, "kwargs", None) or {}).items()))
    return (kwargs, *(getattr(config, f, None) for f in fields))


def neighbours(tuner: Any, config: Any) -> list[Any]:
    """Every configuration one step from `config` that `tuner` (inductor's) would try."""
    own = getattr(tuner, "get_neighbour_configs", None)  # torch 2.13
    from torch._inductor.runtime.coordinate_descent_tuner import get_field, set_field

    found: list[Any] = []
    for name in tuner.tunable_fields:
        value = get_field(config, name)  # type: ignore[no-untyped-call]
        if value is None:
            continue
        if own is not None:
            found.extend(own(config, name))
            continue
        for next_value in tuner.get_neighbour_values(name, value):
            candidate = copy.deepcopy(config)
            set_field(candidate, name, next_value)  # type: ignore[no-untyped-call]
            valid = getattr(tuner, "is_valid_config", None)
            if valid is None or valid(candidate):
                found.append(candidate)
    return found


class Ahead:
    """One kernel's configurations compiled ahead: what was handed out, and the waiting."""

    def __init__(
        self,
        pool: Pool,
        *,
        name: str,
        source: str,
        stats: AheadStats,
        wait_s: float = WAIT_S,
        job: Callable[..., Any] = compile_config,
    ) -> None:
        self.pool = pool
        self.name = name
        self.source = source
        self.stats = stats
        self.wait_s = wait_s
        self.job = job
        self.env = _compile_environment()
        self._futures: dict[tuple[Any, ...], Future[Any]] = {}  # handed out, not yet waited on
        self._handed: set[tuple[Any, ...]] = set()

    def submit(self, configs: list[Any]) -> None:
        """Hand every configuration not handed out yet to a worker."""
        for config in configs:
            key = config_key(config)
            if key in self._handed:
                continue
            self._handed.add(key)
            try:
                self._futures[key] = self.pool.submit(
                    self.job, self.name, self.source, config, self.env
                )
            except Exception as exc:  # a pool shut down: the descent compiles the rest itself
                log.debug("compile workers refused %s: %s", self.name, exc)
                return
            self.stats.submitted += 1

    def wait(self, config: Any) -> bool:
        """Wait for a worker's compile of `config`, if one was handed out; whether it built."""
        future = self._futures.pop(config_key(config), None)
        if future is None:
            return False
        start = time.perf_counter()
        try:
            took = future.result(timeout=self.wait_s)
        except Exception as exc:  # late or failed: the descent compiles it itself
            log.debug("a worker's compile of %s at %s: %s", self.name, config, exc)
            took = None
        self.stats.wait_s += time.perf_counter() - start
        if not isinstance(took, int | float):
            return False
        self.stats.used += 1
        self.stats.worker_s += float(took)
        return True


@contextmanager
def compiled_ahead(
    autotuner: Any,
    start: Any,
    *,
    pool: Pool | None,
    stats: AheadStats,
    wait_s: float = WAIT_S,
    job: Callable[..., Any] = compile_config,
) -> Iterator[None]:
    """Compile ahead, in `pool`'s workers, the configurations a descent from `start` tries.

    Inside the block, `autotuner` (inductor's CachingAutotuner, its kernel loaded) compiles
    a configuration a worker compiled after waiting for that worker; its tuner hands each
    new best configuration's neighbours to the workers. Nothing changes without a pool or
    the kernel's source.
    """
    tuner = getattr(autotuner, "coordesc_tuner", None)
    source = kernel_source(autotuner)
    if pool is None or tuner is None or source is None or start is None:
        yield
        return
    ahead = Ahead(pool, name=source[0], source=source[1], stats=stats, wait_s=wait_s, job=job)
    compare = tuner.compare_config
    precompile = autotuner._precompile_config

    def untimed_neighbours(config: Any) -> list[Any]:
        # a configuration already timed is not compiled again: the tuner reads its timing
        timed = getattr(tuner, "lookup_in_cache", lambda _config: None)
        return [c for c in neighbours(tuner, config) if timed(c) is None]

    def compare_config(func: Any, candidate: Any, best: Any, best_timing: float) -> Any:
        better, timing = compare(func, candidate, best, best_timing)
        if better:  # the descent goes on from here: its next tries are this one's neighbours
            ahead.submit(untimed_neighbours(candidate))
        return better, timing

    def precompile_config(config: Any) -> Any:
        used = ahead.wait(config)
        entries = _cache_entries() if used else 0
        start = time.perf_counter()
        try:
            return precompile(config)
        finally:
            took = time.perf_counter() - start
            if used:
                stats.compile_after_s += took
                stats.missed += _cache_entries() > entries
            else:
                stats.own += 1
                stats.own_s += took

    try:
        ahead.submit(untimed_neighbours(start))
    except Exception as exc:  # a tuner of another torch: the descent compiles as it would
        log.debug("the neighbours of %s's start: %s", source[0], exc)
        yield
        return
    tuner.compare_config = compare_config
    autotuner._precompile_config = precompile_config
    try:
        yield
    finally:
        # instance attributes only: inductor pickles the autotuner and its tuner later
        del tuner.compare_config
        del autotuner._precompile_config
