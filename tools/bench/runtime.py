"""The runtime's benchmark: real model shapes, eager and compiled, with and without TPS.

Models are built from `transformers` configs with random weights (nothing is
downloaded). Each case times eager, eager with TPS, PyTorch TunableOp, torch.compile
with and without TPS, and max-autotune, side by side in one process, and then a second
host with an empty cache that warm-starts from the fleet (the service) with no probes.
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("tools.bench.runtime")

MODELS = ("gpt2-medium", "llama3-8b-8l", "opt-350m")
# name -> (batch, tokens) of one forward without a KV cache.
CASES: dict[str, tuple[int, int]] = {
    "decode-b1": (1, 1),
    "decode-b32": (32, 1),
    "prefill": (4, 511),
}


_ROPE_THETA: dict[str, Any] = {"rope_theta": 500000.0}


def build_model(name: str, *, device: str = "cpu") -> Any:
    """Return the model `name` from its config, random weights on `device`, in eval mode."""
    import torch
    import transformers as tf

    configs: dict[str, Callable[[], Any]] = {
        "gpt2-medium": lambda: tf.GPT2LMHeadModel(
            tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024)
        ),
        "llama3-8b-8l": lambda: tf.LlamaForCausalLM(
            tf.LlamaConfig(
                hidden_size=4096,
                intermediate_size=14336,
                num_attention_heads=32,
                num_key_value_heads=8,
                num_hidden_layers=8,
                vocab_size=128256,
                max_position_embeddings=8192,
                # a keyword some transformers versions declare and others take as **kwargs
                **_ROPE_THETA,
            )
        ),
        # OPT-350m: a vocabulary of 50272, not a multiple of 64; 512-wide embeddings.
        "opt-350m": lambda: tf.OPTForCausalLM(
            tf.OPTConfig(
                hidden_size=1024,
                ffn_dim=4096,
                num_hidden_layers=24,
                num_attention_heads=16,
                vocab_size=50272,
                word_embed_proj_dim=512,
                max_position_embeddings=2048,
                do_layer_norm_before=False,
            )
        ),
    }
    if name not in configs:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(configs)}")
    with torch.device(device):  # initialise on the device: billions of weights, quickly
        return configs[name]().eval()


# The compiled ratios, each a field of CaseResult: (field, numerator, denominator) variants.
COMPILED_RATIOS = (
    ("compile_tps_speedup", "compile", "compile_tps"),
    ("tps_vs_max_autotune", "max_autotune", "compile_tps"),
    ("second_host_vs_max_autotune", "max_autotune", "second_host_compile_tps"),
    ("second_host_gemm_only_vs_max_autotune", "max_autotune", "second_host_gemm_only"),
    ("host_timed_vs_max_autotune", "max_autotune", "host_timed_compile_tps"),
    ("compile_tps_vs_host_timed", "host_timed_compile_tps", "compile_tps"),
    ("single_search_vs_max_autotune", "max_autotune", "single_search_compile_tps"),
    ("compile_tps_vs_single_search", "single_search_compile_tps", "compile_tps"),
    ("restart_vs_max_autotune", "max_autotune", "restart_compile_tps"),
    ("restart_vs_compile_tps", "compile_tps", "restart_compile_tps"),
    ("single_search_restart_vs_max_autotune", "max_autotune", "single_search_restart_compile_tps"),
    (
        "single_search_restart_vs_restart",
        "restart_compile_tps",
        "single_search_restart_compile_tps",
    ),
)


@dataclass
class CaseResult:
    """One model and case, every figure side by side (ms are medians of one forward)."""

    model: str
    case: str
    device: str
    eager_ms: float = 0.0
    tps_ms: float = 0.0
    speedup: float = 0.0
    # eager over an identical untouched copy, timed alongside: 1.0 but for noise
    control_ratio: float = 0.0
    # 95% intervals of the ratios above and of the second host's (round-by-round ratios,
    # bootstrapped): where nothing is routed both sides run the same kernels
    speedup_ci: list[float] | None = None
    control_ci: list[float] | None = None
    second_host_speedup_ci: list[float] | None = None
    # the medians of those round-by-round ratios: what the intervals are around (the ratios
    # above are of the medians of all forwards, which drift between rounds moves more)
    speedup_paired: float | None = None
    control_paired: float | None = None
    second_host_speedup_paired: float | None = None
    # the compiled ratios' [paired median, low, high], by the ratio's field name
    intervals: dict[str, list[float]] = field(default_factory=dict)
    probes: int = 0
    tuning_s: float = 0.0
    routed: int = 0
    # layers that still route after warm-up, and those given their own forward back
    routing_layers: int = 0
    settled_layers: int = 0
    near_ties: int = 0
    # cached winners slower than the default head to head, by the margin or more
    lost_head_to_head: int = 0
    # winners admitted head to head that lost when timed on the program's own calls
    lost_in_program: int = 0
    lost_in_steps: int = 0
    problems: int = 0
    tunableop_ms: float | None = None
    tunableop_tuning_s: float | None = None
    # the products TunableOp tuned, and those where it chose other than the default solution
    tunableop_tuned: int | None = None
    tunableop_changed: int | None = None
    compile_ms: float | None = None
    compile_s: float | None = None  # the default compile's first call, cold
    # host 1 under tps_runtime.compiled: inductor searches each GEMM once, TPS records it
    compile_tps_ms: float | None = None
    compile_tps_speedup: float | None = None
    compile_tps_tuning_s: float | None = None
    compile_tps_searched: int | None = None
    max_autotune_ms: float | None = None
    max_autotune_tuning_s: float | None = None
    tps_vs_max_autotune: float | None = None
    # host 2, empty cache, same GPU: the fleet's GEMM winners, compiled with no search
    second_host_compile_tps_ms: float | None = None
    second_host_compile_s: float | None = None
    second_host_compile_searched: int | None = None
    second_host_compile_hits: int | None = None
    # inductor's lookups (a product asks once per group of templates) and configurations served
    second_host_compile_lookups: int | None = None
    second_host_compile_served: int | None = None
    second_host_vs_max_autotune: float | None = None
    # kernels (pointwise, reduction) tuned by host 1, and served to host 2 untuned
    compile_tps_kernels_tuned: int | None = None
    second_host_kernel_hits: int | None = None
    second_host_kernel_lookups: int | None = None
    # host 2 with the fleet's GEMMs alone (`tune_kernels=False`): no kernel tuning
    second_host_gemm_only_ms: float | None = None
    second_host_gemm_only_compile_s: float | None = None
    second_host_gemm_only_vs_max_autotune: float | None = None
    # a host of its own whose GEMM search timed host launches (`device_time=False`)
    host_timed_compile_tps_ms: float | None = None
    host_timed_vs_max_autotune: float | None = None
    compile_tps_vs_host_timed: float | None = None
    # a host of its own whose search's one timing decides (no finalists timed again)
    single_search_compile_tps_ms: float | None = None
    single_search_vs_max_autotune: float | None = None
    compile_tps_vs_single_search: float | None = None
    # host 1 compiling again at its next start, from its own cache of what it searched
    restart_compile_tps_ms: float | None = None
    restart_compile_s: float | None = None
    restart_compile_searched: int | None = None
    restart_vs_max_autotune: float | None = None
    restart_vs_compile_tps: float | None = None
    compile_tps_retimed: int | None = None
    # of host 1's compile, the seconds spent timing finalists again and tuning kernels
    compile_tps_retime_s: float | None = None
    compile_tps_kernel_tune_s: float | None = None
    # the other hosts' compiles, cold (seconds of their first call)
    host_timed_compile_s: float | None = None
    single_search_compile_s: float | None = None
    # with restart: the single-search host compiling again from its own records
    single_search_restart_compile_tps_ms: float | None = None
    single_search_restart_compile_s: float | None = None
    single_search_restart_vs_max_autotune: float | None = None
    single_search_restart_vs_restart: float | None = None
    second_host_probes: int | None = None
    second_host_speedup: float | None = None
    second_host_warm_start_s: float | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    # host 2's routes after its warm start, as `decisions` gives host 1's
    second_host_routed: int | None = None
    second_host_settled_layers: int | None = None
    second_host_decisions: list[dict[str, Any]] = field(default_factory=list)
    # with `profile`: each compiled variant's kernels (device time per forward)
    kernels: dict[str, Any] = field(default_factory=dict)
    # with `autotune`: every GEMM search inductor ran while compiling, by variant
    autotune: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Clock:
    """Time one forward on the device: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        # the last side-by-side's per-round medians, by variant (`interval`)
        self.rounds: dict[str, list[float]] = {}

    def once_ms(self, fn: Callable[[], Any]) -> float:
        import torch

        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def side_by_side(
        self,
        fns: dict[str, Callable[[], Any]],
        *,
        setups: dict[str, Callable[[], Any]] | None = None,
        rounds: int = 60,
        per_round: int = 3,
    ) -> dict[str, float]:
        """Return each function's median forward time, timed in alternating rounds.

        Rounds follow a balanced order (each function precedes each other equally
        often), so clock drift and what ran just before fall on every side alike.
        """
        from agents.probe.sampling import interleaved

        setups = setups or {}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        self.rounds = {name: [] for name in fns}
        for name, fn in fns.items():
            setups.get(name, _nothing)()
            for _ in range(3):
                fn()
        names = list(fns)
        for r in range(rounds):
            for i in interleaved(list(range(len(names))), r):
                name = names[i]
                setups.get(name, _nothing)()  # before the clock starts
                times = [self.once_ms(fns[name]) for _ in range(per_round)]
                samples[name] += times
                self.rounds[name].append(statistics.median(times))
        return {name: statistics.median(v) for name, v in samples.items()}

    def interval(self, numerator: str, denominator: str) -> list[float]:
        """The 95% interval of the last side-by-side's ratio numerator / denominator."""
        return ratio_interval(self.rounds[numerator], self.rounds[denominator])

    def paired(self, numerator: str, denominator: str) -> float:
        """The median of the last side-by-side's round-by-round ratios (the interval's centre)."""
        pairs = zip(self.rounds[numerator], self.rounds[denominator], strict=True)
        return statistics.median(n / d for n, d in pairs)


def ratio_interval(
    numerator: list[float],
    denominator: list[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> list[float]:
    """Return a bootstrap interval of the median of round-by-round ratios, [low, high].

    Each round timed every variant back to back, so a round's ratio cancels what drifts
    between rounds (clocks, the host's other work); resampling the rounds gives how far
    the median ratio could move in another run of as many rounds.
    """
    import numpy as np

    ratios = np.asarray(numerator, dtype=float) / np.asarray(denominator, dtype=float)
    if ratios.size == 0:
        raise ValueError("no rounds to compare")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, ratios.size, size=(resamples, ratios.size))
    medians = np.median(ratios[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return [float(low), float(high)]


def _nothing() -> None:
    return None


def _forwards(model: Any) -> dict[str, Any]:
    """Return the forwards TPS installed on `model`'s layers, by layer name."""
    return {name: vars(m)["forward"] for name, m in model.named_modules() if "forward" in vars(m)}


def _install(model: Any, forwards: dict[str, Any]) -> Callable[[], None]:
    """Return a setup that gives `model`'s layers exactly these forwards (none: their own)."""
    layers = [(name, m) for name, m in model.named_modules()]

    def setup() -> None:
        for name, m in layers:
            if name in forwards:
                m.forward = forwards[name]
            elif "forward" in vars(m):
                del m.forward

    return setup


def run_case(
    model_name: str,
    case: str,
    *,
    device: str,
    workdir: Path,
    service: str | None = None,
    token: str | None = None,
    compile_modes: tuple[str, ...] = ("default", "max-autotune", "gemm-only"),
    eager: bool = True,
    profile: bool = False,
    autotune: bool = False,
) -> CaseResult:
    """Measure one model and case; `service` enables the second-host warm start.

    `eager=False` measures the compiled variants alone (no eager probing, no TunableOp).
    `profile` adds each compiled variant's kernel table, `autotune` every GEMM search
    inductor timed while compiling (the diagnosis of `benchmarks/diag_compiled.py`).
    """
    import torch

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = build_model(model_name, device=device).to(dtype=dtype)
    batch, tokens = CASES[case]
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, tokens), device=device)
    clock = Clock(device)
    result = CaseResult(model=model_name, case=case, device=device)

    def forward(m: Any) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return m(input_ids=ids, use_cache=False).logits

        return run

    first = _host(device, workdir, "host1", service, token)
    first.runtime.defer_probes = False  # host 1 is the first of the fleet: it probes
    if eager:
        _eager(model, forward, clock, result, first, device)
    rt = first.runtime
    with _noted(result, "torch.compile"):
        hosts = FleetHosts(first=first, workdir=workdir, service=service, token=token)
        searches = AutotuneLog() if autotune else None
        _compiled(model, forward, clock, result, compile_modes, hosts, searches, profile)
        result.autotune = searches.entries if searches is not None else []
    if eager:
        with _noted(result, "TunableOp"):
            _tunableop(model, forward, clock, result, device, workdir)
    decisions = rt.decisions()
    result.problems = len(decisions)
    result.routed = sum(1 for r in decisions if r.runner is not None)
    result.settled_layers = len(rt.settled)
    result.decisions = _decisions(decisions)
    first.close()  # saves host 1's cache and pushes its probe runs to the service
    if service is not None and eager:
        with _noted(result, "second host"):
            _second_host(model, forward, clock, result, device, workdir, service, token)
    return result


def _eager(
    model: Any,
    forward: Callable[[Any], Callable[[], Any]],
    clock: Clock,
    result: CaseResult,
    first: Any,
    device: str,
) -> None:
    """Host 1 tunes its misses, then eager runs with and without TPS side by side.

    One model: each timed call first gets its layers' forwards, before the clock starts.
    """
    from agents import runtime as tps_runtime

    plain = forward(model)()
    start = time.perf_counter()
    tps_runtime.tune(model, first)
    forward(model)()
    _sync(device)
    result.tuning_s = time.perf_counter() - start
    _steady(forward(model), first.runtime)
    host1 = _forwards(model)
    _check_close(plain, forward(model)(), result, "eager TPS output")
    run = forward(model)
    # "control" is eager again: its ratio to eager is the measurement's own noise.
    times = clock.side_by_side(
        {"eager": run, "tps": run, "control": run},
        setups={
            "eager": _install(model, {}),
            "tps": _install(model, host1),
            "control": _install(model, {}),
        },
    )
    result.eager_ms, result.tps_ms = times["eager"], times["tps"]
    result.speedup = result.eager_ms / result.tps_ms
    result.control_ratio = result.eager_ms / times["control"]
    result.speedup_ci = clock.interval("eager", "tps")
    result.control_ci = clock.interval("eager", "control")
    result.speedup_paired = clock.paired("eager", "tps")
    result.control_paired = clock.paired("eager", "control")
    _install(model, {})()
    result.probes = first.runtime.stats.probes
    result.near_ties = first.runtime.stats.near_ties
    result.lost_head_to_head = first.runtime.stats.lost_head_to_head
    result.lost_in_program = first.runtime.stats.lost_in_program
    result.lost_in_steps = first.runtime.stats.lost_in_steps
    result.routing_layers = len(host1)


def _compiled(
    model: Any,
    forward: Callable[[Any], Callable[[], Any]],
    clock: Clock,
    result: CaseResult,
    compile_modes: tuple[str, ...],
    fleet: FleetHosts,
    searches: AutotuneLog | None = None,
    profile: bool = False,
) -> None:
    """Compile cold (no inductor caches), in this order: default, max-autotune, TPS, TPS host 2.

    Host 1 compiles a copy inside `tps_runtime.compiled`: inductor searches each GEMM as
    max-autotune does, tunes every other kernel, and TPS records both, which go to the
    service. Host 2, with an empty cache and none of host 1's kernels in memory, compiles
    another copy with the fleet's GEMM winners and kernel configurations, and once more with
    the GEMM winners alone (`tune_kernels=False`). (The eager routes under torch.compile, the
    custom op, have their own tests and `compiled_gain`.)
    """
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor import select_algorithm

    from agents import runtime as tps_runtime

    device = str(next(model.parameters()).device)

    def first_call(run: Callable[[], Any], variant: str) -> float:
        if searches is not None:
            searches.variant = variant
        start = time.perf_counter()
        run()
        _sync(device)
        return time.perf_counter() - start

    torch._dynamo.reset()
    variants: dict[str, Callable[[], Any]] = {}
    saver = select_algorithm.get_algorithm_selector_cache()
    if searches is not None:
        saver.add_feedback_saver(searches)
    with inductor_config.patch(force_disable_caches=True):
        if "default" in compile_modes:
            variants["compile"] = forward(torch.compile(model))
            result.compile_s = first_call(variants["compile"], "compile")
        if "max-autotune" in compile_modes:
            # A copy of its own: one module compiled in two modes would share cached frames.
            autotuned = copy.deepcopy(model)
            variants["max_autotune"] = forward(
                torch.compile(autotuned, mode="max-autotune-no-cudagraphs")
            )
            result.max_autotune_tuning_s = first_call(variants["max_autotune"], "max_autotune")
        if "default" in compile_modes:
            # Each compile call differs from the others (options, dynamic): dynamo would
            # otherwise serve one model's copy with the graph compiled for another.
            gemm_search: dict[str, Any] = {"max_autotune_gemm": True}  # as tps_runtime.compiled
            variants["compile_tps"] = forward(
                torch.compile(copy.deepcopy(model), options=gemm_search)
            )
            with tps_runtime.compiled(fleet.first) as searched:
                result.compile_tps_tuning_s = first_call(variants["compile_tps"], "compile_tps")
            result.compile_tps_searched = searched.stats.searched
            result.compile_tps_retimed = searched.stats.retimed
            result.compile_tps_retime_s = searched.stats.retime_s
            result.compile_tps_kernel_tune_s = searched.stats.kernel_tune_s
            result.compile_tps_kernels_tuned = searched.stats.kernels_tuned
            fleet.first.flush()  # host 1's searches go to the service
            if "restart" in compile_modes:
                # host 1's next start: no kernels in memory, its own cache of the searches
                _new_process_kernels()
                variants["restart_compile_tps"] = forward(
                    torch.compile(
                        copy.deepcopy(model), options={**gemm_search, "trace.ir_post_fusion": False}
                    )
                )
                with tps_runtime.compiled(fleet.first) as again:
                    result.restart_compile_s = first_call(
                        variants["restart_compile_tps"], "restart_compile_tps"
                    )
                result.restart_compile_searched = again.stats.searched
            if fleet.service is not None:
                _new_process_kernels()
                second = _host(device, fleet.workdir, "host2-compiled", fleet.service, fleet.token)
                variants["second_host_compile_tps"] = forward(
                    torch.compile(copy.deepcopy(model), options=gemm_search, dynamic=False)
                )
                with tps_runtime.compiled(second) as served:
                    result.second_host_compile_s = first_call(
                        variants["second_host_compile_tps"], "second_host_compile_tps"
                    )
                result.second_host_compile_searched = served.stats.searched
                result.second_host_compile_hits = served.stats.hits
                result.second_host_compile_lookups = served.stats.lookups
                result.second_host_compile_served = served.stats.served
                result.second_host_kernel_hits = served.stats.kernel_hits
                result.second_host_kernel_lookups = served.stats.kernel_lookups
                second.close()
            if fleet.service is not None and "gemm-only" in compile_modes:
                # The same fleet's GEMM winners, with no kernel tuning (inductor's defaults).
                _new_process_kernels()
                alone = _host(device, fleet.workdir, "host2-gemm", fleet.service, fleet.token)
                variants["second_host_gemm_only"] = forward(
                    torch.compile(copy.deepcopy(model), options={**gemm_search, "debug": False})
                )
                with tps_runtime.compiled(alone, tune_kernels=False):
                    result.second_host_gemm_only_compile_s = first_call(
                        variants["second_host_gemm_only"], "second_host_gemm_only"
                    )
                alone.close()
            # Hosts of their own, outside the fleet, each compiled one other way: a search
            # that times host launches, and a search whose one timing decides (no finalists
            # timed again). Each compile's options differ, so dynamo shares no frame.
            own_hosts = (
                ("host-timed", {"trace.enabled": False}, {"device_time": False}),
                ("single-search", {"trace.graph_diagram": False}, {"finalists": 0}),
            )
            for mode, marker, how in own_hosts:
                if mode not in compile_modes:
                    continue
                _new_process_kernels()
                own = _host(device, fleet.workdir, mode, None, None)
                variant = f"{mode.replace('-', '_')}_compile_tps"
                variants[variant] = forward(
                    torch.compile(copy.deepcopy(model), options={**gemm_search, **marker})
                )
                with tps_runtime.compiled(own, **how):
                    compile_s = first_call(variants[variant], variant)
                setattr(result, f"{mode.replace('-', '_')}_compile_s", compile_s)
                if mode == "single-search" and "restart" in compile_modes:
                    # its next start, as host 1's restart: no kernels in memory, its own cache
                    _new_process_kernels()
                    restarted = "single_search_restart_compile_tps"
                    variants[restarted] = forward(
                        torch.compile(
                            copy.deepcopy(model),
                            options={**gemm_search, **marker, "trace.ir_pre_fusion": False},
                        )
                    )
                    with tps_runtime.compiled(own, **how):
                        result.single_search_restart_compile_s = first_call(
                            variants[restarted], restarted
                        )
                own.close()
    if searches is not None:
        saver.feedback_saver_fns.remove(searches)
    if not variants:
        return
    times = clock.side_by_side(variants)
    if profile:
        result.kernels = {name: kernel_table(run, device) for name, run in variants.items()}
    result.compile_ms = times.get("compile")
    result.compile_tps_ms = times.get("compile_tps")
    result.max_autotune_ms = times.get("max_autotune")
    result.second_host_compile_tps_ms = times.get("second_host_compile_tps")
    # each ratio's 95% interval and paired median, as the eager ones (`Clock.interval`)
    for name, numerator, denominator in COMPILED_RATIOS:
        if times.get(numerator) and times.get(denominator):
            setattr(result, name, times[numerator] / times[denominator])
            paired = clock.paired(numerator, denominator)
            result.intervals[name] = [paired, *clock.interval(numerator, denominator)]
    result.second_host_gemm_only_ms = times.get("second_host_gemm_only")
    result.host_timed_compile_tps_ms = times.get("host_timed_compile_tps")
    result.single_search_compile_tps_ms = times.get("single_search_compile_tps")
    result.restart_compile_tps_ms = times.get("restart_compile_tps")
    result.single_search_restart_compile_tps_ms = times.get("single_search_restart_compile_tps")


def _new_process_kernels() -> None:
    """Forget the kernels this process loaded, as a host of its own would have none.

    Inductor keeps each generated kernel, tuned, by its source: without this a second
    host's compile would be handed host 1's tuned kernels in memory.
    """
    from torch._inductor import async_compile, codecache

    async_compile.CompiledTritonKernels.cache_clear()  # type: ignore[no-untyped-call]
    codecache.PyCodeCache.cache_clear()


class AutotuneLog:
    """Inductor's feedback, kept: each GEMM search's choices and their times, by variant."""

    def __init__(self) -> None:
        self.variant = ""
        self.entries: list[dict[str, Any]] = []

    def __call__(self, timings: dict[Any, float], name: str, input_nodes: Any, *_: Any) -> None:
        ranked = sorted(timings.items(), key=lambda item: item[1])
        self.entries.append(
            {
                "variant": self.variant,
                "op": name,
                "inputs": [_layout(node) for node in input_nodes],
                "choices": [_choice(choice, ms) for choice, ms in ranked],
            }
        )


def _layout(node: Any) -> str:
    try:
        return f"{node.get_dtype()}{list(node.get_size())}/{list(node.get_stride())}"
    except Exception:  # a node inductor sizes symbolically
        return type(node).__name__


def _choice(choice: Any, ms: float) -> dict[str, Any]:
    annotations = getattr(choice, "annotations", None) or {}
    ktc = annotations.get("ktc")
    return {
        "ms": ms,
        "template": getattr(getattr(ktc, "template", None), "uid", None),
        "kind": type(choice).__name__,
        "name": str(getattr(choice, "name", "")),
        "description": str(getattr(choice, "description", ""))[:200],
        "tagged": "tps" in annotations,
    }


def kernel_table(run: Callable[[], Any], device: str, *, forwards: int = 10) -> dict[str, Any]:
    """Profile `forwards` forwards: each kernel's device time and launches per forward."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    activities = [ProfilerActivity.CUDA] if device.startswith("cuda") else [ProfilerActivity.CPU]
    run()
    _sync(device)
    with profiler(activities=activities) as prof:
        for _ in range(forwards):
            run()
        _sync(device)
    rows = []
    for event in prof.key_averages():
        us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        if us > 0:
            rows.append(
                {
                    "kernel": event.key[:160],
                    "us": round(us / forwards, 2),
                    "calls": event.count / forwards,
                }
            )
    rows.sort(key=lambda row: -float(row["us"]))
    return {
        "device_us_per_forward": round(sum(float(row["us"]) for row in rows), 1),
        "launches_per_forward": round(sum(float(row["calls"]) for row in rows), 1),
        "kernels": rows[:40],
    }


@dataclass
class FleetHosts:
    """Host 1's open session and where a second host of the fleet would find the service."""

    first: Any
    workdir: Path
    service: str | None
    token: str | None


def _tunableop(
    model: Any,
    forward: Callable[[Any], Callable[[], Any]],
    clock: Clock,
    result: CaseResult,
    device: str,
    workdir: Path,
) -> None:
    import torch

    if device.startswith("cuda"):
        tunable = torch.cuda.tunable
        tunable.set_filename(str(workdir / "tunableop-results.csv"))
        tunable.enable(True)
        tunable.tuning_enable(True)
        earlier = _tunableop_results(tunable)
        start = time.perf_counter()
        forward(model)()
        _sync(device)
        result.tunableop_tuning_s = time.perf_counter() - start
        counts = tunableop_counts(_tunableop_results(tunable), earlier=earlier)
        result.tunableop_tuned, result.tunableop_changed = counts
        tunable.tuning_enable(False)
        run = forward(model)
        times = clock.side_by_side(
            {"eager": run, "tunableop": run},
            setups={
                "eager": lambda: tunable.enable(False),
                "tunableop": lambda: tunable.enable(True),
            },
        )
        result.tunableop_ms = times["tunableop"]
        tunable.enable(False)


def _tunableop_results(tunable: Any) -> list[Any]:
    return list(tunable.get_results())  # typed as one tuple, returns one per tuned product


def tunableop_counts(results: list[Any], *, earlier: list[Any]) -> tuple[int, int]:
    """How many products a case had TunableOp tune, and in how many it left the BLAS default.

    Each result is (op, shape, solution, ms); the default solution is named "Default".
    TunableOp keeps every result of the process, so a case's are those not in `earlier`.
    """
    seen = {(str(r[0]), str(r[1])) for r in earlier}
    tuned = [r for r in results if (str(r[0]), str(r[1])) not in seen]
    changed = [r for r in tuned if not str(r[2]).startswith("Default")]
    return len(tuned), len(changed)


def _decisions(routes: Sequence[Any]) -> list[dict[str, Any]]:
    """Each problem's route as the JSON reports it: what ran, and why."""
    return [
        {
            "problem": r.problem.canonical() if r.problem else None,
            "calls": r.calls,
            "candidate": r.candidate.label() if r.candidate else None,
            "routed": r.runner is not None,
            "gain": r.gain,
            "program_gain": r.program_gain,
            "host_bound": r.host_bound,
            "head_to_head": asdict(r.head_to_head) if r.head_to_head else None,
            "compiled_gain": r.compiled_gain,
            "step_gain": r.step_gain,
            "reason": r.reason,
        }
        for r in routes
    ]


def _second_host(
    model: Any,
    forward: Callable[[Any], Callable[[], Any]],
    clock: Clock,
    result: CaseResult,
    device: str,
    workdir: Path,
    service: str,
    token: str | None,
) -> None:
    """A host with an empty cache and the same GPU: warm start from the fleet, no probes."""
    from agents import runtime as tps_runtime

    _install(model, {})()
    second = _host(device, workdir, "host2", service, token)
    start = time.perf_counter()
    tps_runtime.tune(model, second)
    forward(model)()  # misses run the default, then one request to the fleet
    forward(model)()  # the fleet's winners are admitted on this host
    _sync(device)
    result.second_host_warm_start_s = time.perf_counter() - start
    _steady(forward(model), second.runtime)
    host2 = _forwards(model)
    run = forward(model)
    times = clock.side_by_side(
        {"eager": run, "second": run},
        setups={"eager": _install(model, {}), "second": _install(model, host2)},
    )
    result.second_host_speedup = times["eager"] / times["second"]
    result.second_host_speedup_ci = clock.interval("eager", "second")
    result.second_host_speedup_paired = clock.paired("eager", "second")
    result.second_host_probes = second.runtime.stats.probes
    routes = second.runtime.decisions()
    result.second_host_routed = sum(1 for r in routes if r.runner is not None)
    result.second_host_settled_layers = len(second.runtime.settled)
    result.second_host_decisions = _decisions(routes)
    second.close()
    _install(model, {})()


def _host(device: str, workdir: Path, name: str, service: str | None, token: str | None) -> Any:
    """Open a tune-mode session with a cache and bans of its own, as one host of the fleet."""
    from agents import runtime as tps_runtime
    from agents.runtime import Mode

    return tps_runtime.open_session(
        device=device,
        cache=workdir / f"{name}-cache.json",
        bans=workdir / f"{name}-bans.json",
        mode=Mode.TUNE,
        service=service,
        token=token,
    )


def cuda_forwards(model_name: str, case: str) -> tuple[Any, Callable[[Any], Callable[[], Any]]]:
    """Build `model_name` in bf16 on the GPU, seeded, and return it with a function that
    makes one forward of `case` (no grad, no KV cache) for a module: the model or a compiled
    copy, as the diagnosis scripts of benchmarks/ compare them."""
    import torch

    torch.manual_seed(0)
    model = build_model(model_name, device="cuda").to(dtype=torch.bfloat16)
    batch, tokens = CASES[case]
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), device="cuda")

    def forward(m: Any) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return m(input_ids=ids, use_cache=False).logits

        return run

    return model, forward


def cuda_case(model_name: str, case: str) -> tuple[Any, Callable[[], Any]]:
    """`cuda_forwards`'s model, with its own forward."""
    model, forward = cuda_forwards(model_name, case)
    return model, forward(model)


def tuned_host(model: Any, run: Callable[[], Any], workdir: Path) -> tuple[Any, dict[str, Any]]:
    """Tune `model` as host 1 of a fleet does (it probes its misses), run it until its layers
    settle, and return the session with the forwards TPS left on the layers that route."""
    from agents import runtime as tps_runtime

    host = _host("cuda", workdir, "host1", None, None)
    host.runtime.defer_probes = False
    run()
    tps_runtime.tune(model, host)
    run()
    _steady(run, host.runtime)
    return host, _forwards(model)


def _steady(run: Callable[[], Any], rt: Any) -> None:
    """Run forwards until the winners' trials and their step check have ended, and the
    layers that route nothing have their own forward back."""
    trials = rt.admission.verify_calls + rt.admission.trial_calls
    for _ in range(trials):
        run()
    # one step check per problem with a new winner, each 2 * step_pairs forwards
    for _ in range(64 * rt.admission.step_pairs):
        if not any(r.runner is not None and r.step_gain is None for r in rt.routes.values()):
            break
        run()
    for _ in range(rt.settle_after + 1):
        run()


@contextmanager
def _noted(result: CaseResult, what: str) -> Iterator[None]:
    """Note a part of the case that failed, and go on with the rest."""
    try:
        yield
    except Exception as exc:
        log.exception("%s failed", what)
        result.notes.append(f"{what} failed: {type(exc).__name__}: {str(exc)[:300]}")


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _check_close(reference: Any, other: Any, result: CaseResult, what: str) -> None:
    """Note how far `other` is from `reference` (logits), relative to the logits' scale."""
    import torch

    ref = reference.float()
    err = float(torch.linalg.vector_norm(other.float() - ref) / torch.linalg.vector_norm(ref))
    result.notes.append(f"{what}: relative difference {err:.2e}")


def as_json(result: CaseResult) -> dict[str, Any]:
    return asdict(result)


def measure_overhead(device: str, *, calls: int = 4_000, rounds: int = 31) -> dict[str, Any]:
    """Host time per call of torch.mm, F.linear and nn.Linear: plain, a miss, and a hit, in µs.

    The hit's winner launches the very kernel the default does, so what is left over is
    the runtime's own cost: the signature, the lookup and the call through the runner.
    On CUDA the same hit replayed from a CUDA graph costs what the plain graph does.
    """
    import torch

    from agents.cache import ProbeCache
    from agents.runtime import AdmissionSettings, RuntimeSession, open_session, tune, tuned
    from agents.runtime.dispatch import Route
    from agents.runtime.keys import gemm_problem
    from agents.runtime.patching import ORIGINAL, suspended

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    size = 64 if device.startswith("cuda") else 8
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    mm = ORIGINAL["mm"]
    # Layers never settle here: what is measured is the cost of a layer that routes.
    session: RuntimeSession = open_session(
        device=device, cache=ProbeCache(None), admission=AdmissionSettings(settle_after=0)
    )
    rt = session.runtime
    calls_n = calls if not device.startswith("cuda") else calls // 4

    def per_call_us(fn: Callable[[], Any]) -> float:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(calls_n):
            fn()
        _sync(device)
        return (time.perf_counter() - t0) / calls_n * 1e6

    def hit_route() -> Route:
        problem = gemm_problem(a, b, tf32=False)
        return Route(problem=problem, runner=lambda x, y: mm(x, y), reason="hit (overhead)")

    results: dict[str, list[float]] = {k: [] for k in ("plain", "miss", "hit")}
    linear: dict[str, list[float]] = {k: [] for k in ("plain", "miss", "hit")}
    with torch.no_grad(), tuned(session):
        torch.mm(a, b)  # decide the miss
        misses = dict(rt.routes)
        hits = {sig: hit_route() for sig in misses}
        for _ in range(rounds):
            # torch's own function: `torch.mm` is the routing one while the block is open
            results["plain"].append(per_call_us(lambda: mm(a, b)))
            rt.routes.clear()
            rt.routes.update(misses)
            results["miss"].append(per_call_us(lambda: torch.mm(a, b)))
            rt.routes.clear()
            rt.routes.update(hits)
            results["hit"].append(per_call_us(lambda: torch.mm(a, b)))
        # F.linear as a model's nn.Linear calls it under tuned(); no bias, whose add a hit
        # would launch apart from the winner (the winner's cost, which its trial weighs)
        functional: dict[str, list[float]] = {k: [] for k in ("plain", "miss", "hit")}
        bias = None
        own_linear, F = ORIGINAL["linear"], torch.nn.functional
        rt.routes.clear()
        F.linear(a, b, bias)  # decide its miss
        linear_misses = dict(rt.routes)
        linear_hits = {sig: hit_route() for sig in linear_misses}
        for _ in range(rounds):
            functional["plain"].append(per_call_us(lambda: own_linear(a, b, bias)))
            rt.routes.clear()
            rt.routes.update(linear_misses)
            functional["miss"].append(per_call_us(lambda: F.linear(a, b, bias)))
            rt.routes.clear()
            rt.routes.update(linear_hits)
            functional["hit"].append(per_call_us(lambda: F.linear(a, b, bias)))
        rt.routes.clear()
        rt.routes.update(hits)  # the graph section replays hits
    # nn.Linear through tune(model): the module form (no bias: the bias add is the winner's)
    untouched = torch.nn.Linear(size, size, bias=False, device=device, dtype=dtype)
    layer = torch.nn.Linear(size, size, bias=False, device=device, dtype=dtype)
    layer.load_state_dict(untouched.state_dict())
    tune(layer, session)
    x = torch.randn(size, size, device=device, dtype=dtype)
    table = rt.layer_routes[-1]
    with torch.no_grad():
        layer(x)  # decide the miss
        misses = dict(table)
        hits = {
            shape: Route(problem=r.problem, runner=lambda p, q: mm(p, q), reason="hit (overhead)")
            for shape, r in misses.items()
        }
        for _ in range(rounds):
            linear["plain"].append(per_call_us(lambda: untouched(x)))
            table.clear()
            table.update(misses)
            linear["miss"].append(per_call_us(lambda: layer(x)))
            table.clear()
            table.update(hits)
            linear["hit"].append(per_call_us(lambda: layer(x)))
    # A miss once the block settled: every product kept the default `settle_after` calls in
    # a row, so torch's own functions are back (what a program pays after its warm-up).
    settling = open_session(device=device, cache=ProbeCache(None))
    settled: dict[str, list[float]] = {"plain": [], "miss": []}
    with torch.no_grad(), tuned(settling):
        for _ in range(settling.runtime.settle_after + 1):
            torch.mm(a, b)
        for _ in range(rounds):
            with suspended():
                settled["plain"].append(per_call_us(lambda: torch.mm(a, b)))
            settled["miss"].append(per_call_us(lambda: torch.mm(a, b)))
        functions_settled = settling.runtime.functions_settled
    settling.close()
    out: dict[str, Any] = {"device": device, "dtype": str(dtype), "size": size, "calls": calls_n}
    out["mm_functions_settled"] = functions_settled
    out["mm_settled_miss_overhead_us"] = statistics.median(settled["miss"]) - statistics.median(
        settled["plain"]
    )
    for label, series in (("mm", results), ("linear", linear), ("functional_linear", functional)):
        med = {k: statistics.median(v) for k, v in series.items()}
        out[f"{label}_plain_us"] = med["plain"]
        out[f"{label}_miss_us"] = med["miss"]
        out[f"{label}_hit_us"] = med["hit"]
        out[f"{label}_miss_overhead_us"] = med["miss"] - med["plain"]
        out[f"{label}_hit_overhead_us"] = med["hit"] - med["plain"]
    if device.startswith("cuda"):
        out.update(_graph_overhead(a, b, session))
    session.close()
    return out


def _graph_overhead(a: Any, b: Any, session: Any) -> dict[str, float]:
    """Replay a graph of 100 plain products and one of 100 routed hits; µs per product."""
    import torch

    from agents.runtime import tuned
    from agents.runtime.patching import ORIGINAL, suspended

    graphs = {}
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    with tuned(session):
        torch.mm(a, b)
        for name in ("plain", "hit"):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(100):
                    if name == "plain":
                        with suspended():
                            ORIGINAL["mm"](a, b)
                    else:
                        torch.mm(a, b)
            graphs[name] = graph
    clock = Clock("cuda")
    times = clock.side_by_side({n: g.replay for n, g in graphs.items()}, rounds=7, per_round=5)
    return {"graph_plain_us": times["plain"] * 10, "graph_hit_us": times["hit"] * 10}
