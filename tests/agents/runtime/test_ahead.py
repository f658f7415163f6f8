"""A descent's next configurations compiled ahead, against inductor's own coordinate descent.

The tuner is inductor's `CoordescTuner`, real; what runs in a compile worker here is a thread
that records what it was handed (this CPU build has no Triton to compile with). The real
compile, in inductor's workers on a GPU, is tested in `tests/gpu/test_gpu_runtime.py`.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.runtime.ahead import AheadStats, compiled_ahead, config_key, neighbours

pytest.importorskip("torch._inductor.runtime.coordinate_descent_tuner")

# each (R0_BLOCK, XBLOCK, num_warps): ms, the rest slow; a descent from (64, 1, 4) walks
# to (256, 2, 8) through several bests
SPEEDS = {
    (64, 1, 4): 0.050,
    (128, 1, 4): 0.040,
    (256, 1, 4): 0.030,
    (256, 2, 4): 0.025,
    (256, 2, 8): 0.020,
}


@dataclass
class Config:
    """Triton's Config where Triton is absent: what inductor's tuner reads and writes."""

    kwargs: dict[str, Any]
    num_warps: int = 4
    num_stages: int = 1


@dataclass
class Autotuner:
    """What a descent asks of inductor's CachingAutotuner: its kernel, tuner and compile."""

    fn: Any
    coordesc_tuner: Any
    compiled: list[tuple[Any, ...]] = field(default_factory=list)
    handed_out_before: list[bool] = field(default_factory=list)
    handed: set[tuple[Any, ...]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _precompile_config(self, config: Any) -> Any:
        key = config_key(config)
        self.compiled.append(key)
        with self.lock:
            self.handed_out_before.append(key in self.handed)
        return config

    def descend(self, start: Config) -> Config:
        """Inductor's coordinate descent, as `CachingAutotuner` runs it: compile, then time."""

        def benchmark_one_config(config: Any) -> float:
            self._precompile_config(config)
            kw = config.kwargs
            return SPEEDS.get((kw["R0_BLOCK"], kw["XBLOCK"], config.num_warps), 1.0)

        best: Config = self.coordesc_tuner.autotune(benchmark_one_config, start, None)
        return best


def kernel(tmp_path: Path) -> Autotuner:
    """A kernel whose module inductor wrote to disk, with inductor's own tuner."""
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    path = tmp_path / "cxyz.py"
    path.write_text("def triton_red_fused_mm_0(in_ptr0, out_ptr0):\n    pass\n")
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    fn = type("JITFunction", (), {"fn": namespace["triton_red_fused_mm_0"]})()
    tuner = CoordescTuner(
        name="triton_red_fused_mm_0",
        size_hints={"x": 4096, "r0_": 4096},
        inductor_meta={"warp_size": 32, "max_threads_per_block": 1024},
    )
    return Autotuner(fn=fn, coordesc_tuner=tuner)


def recording_job(autotuner: Autotuner, handed: list[Any], *, delay_s: float = 0.0):
    def job(name: str, source: str, config: Any, env: dict[str, str]) -> float:
        assert name == "triton_red_fused_mm_0" and "def triton_red_fused_mm_0" in source
        time.sleep(delay_s)
        with autotuner.lock:
            autotuner.handed.add(config_key(config))
        handed.append(config)
        return 0.25  # seconds of a compile

    return job


def start() -> Config:
    return Config({"XBLOCK": 1, "R0_BLOCK": 64}, num_warps=4)


def test_a_descents_next_configurations_are_compiled_ahead_and_its_choice_is_unchanged(
    tmp_path,
):
    alone = kernel(tmp_path)
    chosen_alone = alone.descend(start())
    ahead = kernel(tmp_path)
    handed: list[Any] = []
    stats = AheadStats()
    with ThreadPoolExecutor(4) as pool:
        with compiled_ahead(
            ahead, start(), pool=pool, stats=stats, job=recording_job(ahead, handed)
        ):
            chosen = ahead.descend(start())
    # the same descent: the same configurations compiled and timed, the same choice
    assert config_key(chosen) == config_key(chosen_alone)
    assert config_key(chosen) == config_key(Config({"XBLOCK": 2, "R0_BLOCK": 256}, 8))
    assert ahead.compiled == alone.compiled
    assert ahead.coordesc_tuner.cached_benchmark_results == (
        alone.coordesc_tuner.cached_benchmark_results
    )
    # every configuration the descent compiled after its start had been handed to a worker
    # first, and the workers finished it before the descent compiled it
    assert len(ahead.compiled) > 5 and all(ahead.handed_out_before[1:])
    assert stats.used == len(ahead.compiled) - 1
    assert stats.worker_s == 0.25 * stats.used and stats.own == 1  # the start, compiled here
    # the neighbours of every best (5 of them) were handed out, none twice
    assert stats.submitted == len(handed) == len({config_key(c) for c in handed})
    assert stats.submitted >= stats.used
    # inductor's own methods are back: nothing of the block stays on what it pickles
    assert "_precompile_config" not in vars(ahead)
    assert "compare_config" not in vars(ahead.coordesc_tuner)


def test_the_neighbours_are_those_inductors_tuner_tries(tmp_path):
    tuner = kernel(tmp_path).coordesc_tuner
    found = {config_key(c) for c in neighbours(tuner, start())}
    expected = {
        config_key(Config({"XBLOCK": 2, "R0_BLOCK": 64}, 4)),
        config_key(Config({"XBLOCK": 1, "R0_BLOCK": 32}, 4)),
        config_key(Config({"XBLOCK": 1, "R0_BLOCK": 128}, 4)),
        config_key(Config({"XBLOCK": 1, "R0_BLOCK": 64}, 2)),
        config_key(Config({"XBLOCK": 1, "R0_BLOCK": 64}, 8)),
    }
    assert expected <= found
    assert config_key(start()) not in found


@pytest.mark.parametrize("how", ["fails", "late"])
def test_a_failed_or_late_worker_leaves_the_descent_to_compile_itself(tmp_path, how):
    alone = kernel(tmp_path)
    chosen_alone = alone.descend(start())
    ahead = kernel(tmp_path)
    stats = AheadStats()

    def fails(name: str, source: str, config: Any, env: dict[str, str]) -> float:
        raise RuntimeError("worker gone")

    job = fails if how == "fails" else recording_job(ahead, [], delay_s=0.2)
    with ThreadPoolExecutor(2) as pool:
        with compiled_ahead(ahead, start(), pool=pool, stats=stats, job=job, wait_s=0.01):
            chosen = ahead.descend(start())
    assert config_key(chosen) == config_key(chosen_alone)
    assert ahead.compiled == alone.compiled
    assert stats.submitted > 0 and stats.used == 0


def test_without_a_pool_or_the_kernels_source_nothing_changes(tmp_path):
    stats = AheadStats()
    plain = kernel(tmp_path)
    with compiled_ahead(plain, start(), pool=None, stats=stats):
        assert "_precompile_config" not in vars(plain)
        plain.descend(start())
    sourceless = kernel(tmp_path)
    sourceless.fn = type("JITFunction", (), {"fn": None})()  # compiled in a worker, not loaded
    with ThreadPoolExecutor(1) as pool, compiled_ahead(sourceless, start(), pool=pool, stats=stats):
        assert "_precompile_config" not in vars(sourceless)
    assert stats.submitted == 0


def test_a_pool_that_refuses_work_leaves_the_descent_as_it_was(tmp_path):
    ahead = kernel(tmp_path)
    stats = AheadStats()
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with compiled_ahead(ahead, start(), pool=pool, stats=stats):
        chosen = ahead.descend(start())
    assert config_key(chosen) == config_key(Config({"XBLOCK": 2, "R0_BLOCK": 256}, 8))
    assert stats.submitted == 0


KERNEL_MODULE = """
import os

class Kernel:
    seen = []

    def _precompile_config(self, config):
        if config == "too large":
            raise RuntimeError("out of resources: shared memory")
        Kernel.seen.append({k: v for k, v in os.environ.items() if k.startswith("TRITON_")})

triton_poi_fused_add_0 = Kernel()
"""


def test_a_worker_compiles_in_the_compile_environment_of_the_descents_process(monkeypatch):
    from torch._inductor.codecache import PyCodeCache

    from agents.runtime.ahead import compile_config

    # the worker's own: torch's ptxas, set where it started; the descent's process has none
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/torch/bin/ptxas")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    parent = {"TRITON_CACHE_DIR": "/tmp/triton-new-host"}
    took = compile_config("triton_poi_fused_add_0", KERNEL_MODULE, "XBLOCK=64", parent)
    assert took is not None and took >= 0
    kernel = PyCodeCache.load(KERNEL_MODULE).triton_poi_fused_add_0
    assert kernel.seen[-1] == parent  # Triton saw the descent's environment, only that
    # and the worker's own is back, for inductor's compiles that run in it next
    assert os.environ["TRITON_PTXAS_PATH"] == "/torch/bin/ptxas"
    assert "TRITON_CACHE_DIR" not in os.environ
    assert compile_config("triton_poi_fused_add_0", KERNEL_MODULE, "too large", parent) is None
    assert os.environ["TRITON_PTXAS_PATH"] == "/torch/bin/ptxas"
