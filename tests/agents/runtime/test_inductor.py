"""Inductor's GEMM search once per fleet: problems, recorded searches, lookups, the fleet."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from agents.runtime import RuntimeSession, compiled
from agents.runtime import inductor as inductor_module
from agents.runtime.inductor import (
    BACKEND,
    FINALISTS,
    InductorFleet,
    _choices_class,
    config_candidate,
    inductor_problem,
)

BF16 = torch.bfloat16


def mm_problem(m: int = 4, n: int = 48, k: int = 64, **scalars: Any):
    return inductor_problem("mm", [BF16, BF16], [[m, k], [k, n]], [[k, 1], [n, 1]], scalars)


def test_products_map_to_exact_problems():
    mm = mm_problem()
    assert mm is not None and mm.op == "gemm" and mm.dtype == "bf16"
    assert mm.dims == {"m": 4, "n": 48, "k": 64} and not mm.trans_a and not mm.trans_b
    # nn.Linear's weight is stored [N, K]: B is its transpose, column-major.
    linear = inductor_problem("mm", [BF16, BF16], [[4, 64], [64, 48]], [[64, 1], [1, 64]])
    assert linear is not None and linear.trans_b and linear.key_hash() != mm.key_hash()
    addmm = inductor_problem(
        "addmm", [BF16] * 3, [[4, 48], [4, 64], [64, 48]], [[0, 1], [64, 1], [48, 1]],
        {"alpha": 1, "beta": 1},
    )  # fmt: skip
    assert addmm is not None and addmm.dims == mm.dims and addmm.key_hash() != mm.key_hash()
    assert addmm.variant.startswith(f"{BACKEND}:addmm:")
    bmm = inductor_problem("bmm", [BF16, BF16], [[8, 4, 64], [8, 64, 48]], [[256, 64, 1]] * 2)
    assert bmm is not None and bmm.dims == {"m": 4, "n": 48, "k": 64, "batch": 8}
    # The same product twice is one problem; other scalars are another.
    assert mm_problem().key_hash() == mm.key_hash()
    assert mm_problem(alpha=2).key_hash() != mm.key_hash()


@pytest.mark.parametrize(
    ("op", "dtypes", "shapes"),
    [
        ("scaled_mm", [BF16, BF16], [[4, 64], [64, 48]]),  # not tuned here
        ("mm", [BF16, torch.float16], [[4, 64], [64, 48]]),  # mixed dtypes
        ("mm", [torch.int8, torch.int8], [[4, 64], [64, 48]]),  # no such dtype
        ("mm", [BF16, BF16], [[4, 64], [32, 48]]),  # inner dims disagree
        ("bmm", [BF16, BF16], [[4, 64], [64, 48]]),  # bmm without a batch
    ],
)
def test_products_tps_does_not_tune_are_left_to_inductor(op, dtypes, shapes):
    strides = [[s[-1], 1] for s in shapes]
    assert inductor_problem(op, dtypes, shapes, strides) is None


def test_a_configuration_keeps_its_scalars_only():
    candidate = config_candidate(
        "triton::mm",
        {
            "BLOCK_M": 64, "num_warps": 4, "EVEN_K": True, "ACC_TYPE": "tl.float32",
            "epilogue_fn": lambda x: x, "hint_override": None, "scale": math.inf,
            "bad key!": 1,
        },
    )  # fmt: skip
    assert candidate is not None and candidate.backend == BACKEND
    assert candidate.params == {
        "template_id": "triton::mm", "BLOCK_M": 64, "num_warps": 4, "EVEN_K": True,
        "ACC_TYPE": "tl.float32",
    }  # fmt: skip


@dataclass
class Inputs:
    """Inductor's KernelInputs of an mm (m x 64 by 64 x 48), as far as TPS reads it."""

    m: int
    _scalars: dict[str, Any] = field(default_factory=dict)

    def dtypes(self):
        return [BF16, BF16]

    def shapes_hinted(self):
        return [[self.m, 64], [64, 48]]

    def strides_hinted(self):
        return [[64, 1], [48, 1]]


def inputs_of(m: int) -> Inputs:
    return Inputs(m)


@dataclass(eq=False)
class Choice:
    """What inductor hands a feedback function: a choice with the annotations TPS set."""

    annotations: dict[str, Any] = field(default_factory=dict)


def searched(fleet: InductorFleet, problem, timings_ms: dict[str, float]) -> None:
    """Feed `fleet` one search of `problem`: BLOCK_M values timed in milliseconds."""
    fleet._problems[problem.key_hash()] = problem
    timings: dict[Any, float] = {}
    for block, ms in timings_ms.items():
        candidate = config_candidate("triton::mm", {"BLOCK_M": int(block)})
        timings[Choice({"tps": (problem.key_hash(), candidate)})] = ms
    timings[Choice()] = 0.001  # an untagged choice (another product's) is not TPS's
    fleet.feedback(timings, "mm", [], list(timings))


def test_a_search_becomes_a_probe_run_and_the_cached_winner(make_runtime, cpu_hardware):
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt))
    problem = mm_problem()
    assert fleet.configs(problem) is None  # nothing known: inductor searches
    searched(fleet, problem, {"32": 0.020, "64": 0.012, "128": math.inf})
    (run,) = runs
    assert run.problem == problem and run.source == BACKEND and len(run.measurements) == 3
    by_block = {m.candidate.params["BLOCK_M"]: m for m in run.measurements}
    assert by_block[64].median_us == pytest.approx(12.0)
    assert run.winner_id == by_block[64].candidate.id
    assert not by_block[128].valid and by_block[128].error
    # by default the winner alone: inductor compiles it with no timing
    assert fleet.configs(problem) == [{"template_id": "triton::mm", "BLOCK_M": 64}]
    assert fleet.stats.searched == 1 and fleet.stats.hits == 1 and fleet.stats.served == 1
    # a shortlist: the winner, then the next fastest valid configuration; never the failed one
    fleet.shortlist = 3
    assert fleet.configs(problem) == [
        {"template_id": "triton::mm", "BLOCK_M": 64},
        {"template_id": "triton::mm", "BLOCK_M": 32},
    ]
    assert rt.cache.get(problem, cpu_hardware).winner.params["BLOCK_M"] == 64


def ranked_search(fleet: InductorFleet, problem, timed: list[tuple[str, int, float]]) -> None:
    """Feed `fleet` one search of `problem`: (template id, BLOCK_M, ms) per choice."""
    fleet._problems[problem.key_hash()] = problem
    timings: dict[Any, float] = {}
    for template_id, block, ms in timed:
        params = {"BLOCK_M": block} if block else {}
        candidate = config_candidate(template_id, params)
        timings[Choice({"tps": (problem.key_hash(), candidate)})] = ms
    fleet.feedback(timings, "addmm", [], list(timings))


SEARCH = [
    ("triton::mm", 64, 0.010),
    ("triton::mm", 32, 0.011),
    ("triton::mm", 128, 0.012),
    ("triton::mm", 16, 0.013),
    ("aten::addmm", 0, 0.014),  # cuBLAS, fifth: outside a shortlist of three
]


def test_a_hit_serves_the_fastest_few_and_the_fastest_extern_choice(make_runtime):
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), shortlist=3)
    problem = mm_problem()
    ranked_search(fleet, problem, SEARCH)
    served = fleet.configs(problem)
    assert served == [
        {"template_id": "triton::mm", "BLOCK_M": 64},
        {"template_id": "triton::mm", "BLOCK_M": 32},
        {"template_id": "triton::mm", "BLOCK_M": 128},
        {"template_id": "aten::addmm"},
    ]
    # a shortlist of one is the winner alone (the default): no extern choice joins it
    alone = InductorFleet(RuntimeSession(runtime=make_runtime()))
    ranked_search(alone, problem, SEARCH)
    assert alone.configs(problem) == [{"template_id": "triton::mm", "BLOCK_M": 64}]
    # an extern choice inside the shortlist is served once
    fast_blas = InductorFleet(RuntimeSession(runtime=make_runtime()), shortlist=2)
    ranked_search(fast_blas, problem, [("aten::addmm", 0, 0.009), *SEARCH[:2]])
    assert fast_blas.configs(problem) == [
        {"template_id": "aten::addmm"},
        {"template_id": "triton::mm", "BLOCK_M": 64},
    ]
    with pytest.raises(ValueError, match="shortlist"):
        InductorFleet(RuntimeSession(runtime=make_runtime()), shortlist=0)


class Bench:
    """Inductor's profiler-timed benchmark of chosen choices, as the feedback receives it:
    each call answers the times of `again` (ms by BLOCK_M) for the choices it is given."""

    def __init__(self, again: dict[int, float], *, fail: bool = False) -> None:
        self.again = again
        self.fail = fail
        self.calls: list[list[int]] = []

    def __call__(self, choices_override: list[Any] | None = None) -> dict[Any, float]:
        blocks = [c.annotations["tps"][1].params["BLOCK_M"] for c in choices_override or []]
        self.calls.append(blocks)
        if self.fail:
            raise RuntimeError("CUDA error: an illegal memory access")
        return {c: self.again[b] for c, b in zip(choices_override or [], blocks, strict=True)}


def tagged_search(problem, timings_ms: dict[int, float]) -> dict[Any, float]:
    return {
        Choice({"tps": (problem.key_hash(), config_candidate("triton::mm", {"BLOCK_M": b}))}): ms
        for b, ms in timings_ms.items()
    }


def block_of(choice: Any) -> int:
    return int(choice.annotations["tps"][1].params["BLOCK_M"])


# One search: 32 led by 5%; 64 and 128 within 25% of it are finalists, 16 and 256 are not.
FIRST_SEARCH = {32: 0.0100, 64: 0.0105, 128: 0.0108, 16: 0.0130, 256: math.inf}
AGAIN = {32: 0.0112, 64: 0.0090, 128: 0.0111}


def test_a_searchs_finalists_are_timed_again_and_their_medians_choose(make_runtime):
    """The winner inductor compiles and the fleet records is the finalists' fastest median."""
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt))
    problem = mm_problem()
    fleet._problems[problem.key_hash()] = problem
    timings = tagged_search(problem, FIRST_SEARCH)
    bench = Bench(AGAIN)
    fleet.feedback(timings, "mm", [], list(timings), bench, {})
    # three rounds of the three finalists, each round starting one further along
    assert bench.calls == [[32, 64, 128], [64, 128, 32], [128, 32, 64]]
    # inductor reads the same dict next: the finalists' medians, the rest no faster
    assert block_of(min(timings, key=timings.__getitem__)) == 64
    by_block = {block_of(c): ms for c, ms in timings.items()}
    assert by_block[64] == AGAIN[64] and by_block[32] == AGAIN[32]
    assert by_block[16] == 0.0130 and math.isinf(by_block[256])
    (run,) = runs
    recorded = {m.candidate.params["BLOCK_M"]: m for m in run.measurements}
    assert run.winner_id == recorded[64].candidate.id
    assert recorded[64].median_us == pytest.approx(9.0) and recorded[64].samples == 3
    # its own timing, recorded as measured
    assert recorded[16].median_us == pytest.approx(13.0) and recorded[16].samples == 1
    assert fleet.configs(problem) == [{"template_id": "triton::mm", "BLOCK_M": 64}]
    assert fleet.stats.retimed == 1 and fleet.stats.searched == 1
    assert fleet.stats.retime_s > 0 and fleet.stats.kernel_tune_s == 0
    # the graph repeats the product: inductor's cached single timings get the medians again,
    # and nothing is timed or recorded twice
    repeat = tagged_search(problem, FIRST_SEARCH)
    fleet.feedback(repeat, "mm", [], list(repeat), bench, {})
    assert block_of(min(repeat, key=repeat.__getitem__)) == 64
    assert len(bench.calls) == 3 and len(runs) == 1


def test_a_non_finalist_faster_than_the_finalists_medians_cannot_win(make_runtime):
    """Slower finalists again (a warmer GPU) do not hand the win to an untimed choice."""
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()))
    problem = mm_problem()
    fleet._problems[problem.key_hash()] = problem
    timings = tagged_search(problem, FIRST_SEARCH)
    fleet.feedback(timings, "mm", [], list(timings), Bench({32: 0.0140, 64: 0.0150, 128: 0.0130}))
    assert block_of(min(timings, key=timings.__getitem__)) == 128
    by_block = {block_of(c): ms for c, ms in timings.items()}
    assert by_block[16] > 0.0150 and by_block[16] == pytest.approx(0.0150)


@pytest.mark.parametrize(
    "search, bench, finalists",
    [
        ({32: 0.010, 64: 0.013, 16: 0.014}, Bench({}), 8),  # nothing within 25% of the fastest
        (FIRST_SEARCH, Bench(AGAIN, fail=True), 8),  # a finalist that will not run again
        (FIRST_SEARCH, Bench(AGAIN), 0),  # asked for no finalists
    ],
)
def test_the_searchs_own_timings_decide_where_nothing_is_timed_again(
    make_runtime, search, bench, finalists
):
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt), finalists=finalists)
    problem = mm_problem()
    fleet._problems[problem.key_hash()] = problem
    timings = tagged_search(problem, search)
    before = dict(timings)
    fleet.feedback(timings, "mm", [], list(timings), bench)
    assert timings == before and fleet.stats.retimed == 0
    (run,) = runs
    fastest = min(search, key=search.__getitem__)
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert winner.candidate.params["BLOCK_M"] == fastest
    assert len(bench.calls) == (1 if bench.fail else 0)


def test_an_older_inductors_benchmark_of_every_choice_is_read_for_the_finalists(make_runtime):
    """A benchmark thunk that takes no choices times them all; the finalists' times are read."""
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), rounds=2)
    problem = mm_problem()
    fleet._problems[problem.key_hash()] = problem
    timings = tagged_search(problem, FIRST_SEARCH)
    calls = []

    def bench_all() -> dict[Any, float]:
        calls.append(len(timings))
        return {c: AGAIN.get(block_of(c), 0.5) for c in timings}

    fleet.feedback(timings, "mm", [], list(timings), bench_all)
    assert calls == [5, 5] and block_of(min(timings, key=timings.__getitem__)) == 64
    with pytest.raises(ValueError, match="finalists"):
        InductorFleet(RuntimeSession(runtime=make_runtime()), finalists=1)


def test_finalists_are_timed_again_on_a_gpu_only(make_runtime):
    import dataclasses

    runtime = make_runtime()
    with compiled(RuntimeSession(runtime=runtime)) as on_cpu:
        assert on_cpu.finalists == 0  # inductor's benchmark of a CPU choice has no profiler
    runtime.device = dataclasses.replace(runtime.device, kind="cuda")
    with compiled(RuntimeSession(runtime=runtime)) as on_gpu:
        assert on_gpu.finalists == FINALISTS and on_gpu.rounds == 3
    with compiled(RuntimeSession(runtime=runtime), finalists=0) as asked:
        assert asked.finalists == 0
    with compiled(RuntimeSession(runtime=runtime), likely_finalists=4) as likely:
        assert likely.likely_finalists == 4
    runtime.device = dataclasses.replace(runtime.device, kind="cpu")
    with compiled(RuntimeSession(runtime=runtime), likely_finalists=4) as on_cpu:
        assert on_cpu.likely_finalists == 0


@dataclass
class Template:
    uid: str


@dataclass
class Params:
    kwargs: dict[str, Any]

    def to_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs)


@dataclass(eq=False)
class TemplateChoice:
    """Inductor's KernelTemplateChoice, as far as the fallback reads it."""

    template: Template
    params: Params
    annotations: dict[str, Any] = field(default_factory=dict)


def test_only_a_product_being_searched_is_tagged_for_recording(make_runtime):
    """A served product's other templates (ATen's, asked apart for addmm) join unrecorded."""
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()))
    choices = _choices_class()(fleet)
    searched_problem, served_problem = mm_problem(m=4), mm_problem(m=8)
    ranked_search(fleet, served_problem, SEARCH[:2])

    def fallback(m: int) -> TemplateChoice:
        ktc = TemplateChoice(Template("aten::addmm"), Params({}))
        chosen = choices._finalize_template_configs(
            {"aten::addmm": iter([ktc])}, inputs_of(m), [], "mm"
        )
        assert chosen == [ktc]
        return ktc

    tagged = fallback(4)
    assert tagged.annotations["tps"][0] == searched_problem.key_hash()
    assert tagged.annotations["tps"][1].params == {"template_id": "aten::addmm"}
    assert "tps" not in fallback(8).annotations


def learn_nearest(fleet: InductorFleet, make_runtime, problem) -> None:
    """Give `fleet` another hardware's search of `problem` (SEARCH) as its nearest ranking."""
    nearest = []
    other = make_runtime()
    other.on_probe = nearest.append
    ranked_search(InductorFleet(RuntimeSession(runtime=other)), problem, SEARCH)
    fleet.learn(nearest[0], nearest=True)


def test_a_search_among_the_nearest_hardwares_fastest_is_tagged_for_recording(make_runtime):
    """Inductor builds a likely search's choices from the lookup (a hit), not its fallback."""
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), likely=2)
    problem = mm_problem(m=4)
    learn_nearest(fleet, make_runtime, problem)
    choices = _choices_class()(fleet)
    built: list[Any] = []

    def from_lookup(found: dict[str, list[dict[str, Any]]], *_: Any) -> list[TemplateChoice]:
        for template_id, configs in found.items():
            built.extend(TemplateChoice(Template(template_id), Params(c)) for c in configs)
        return built

    choices._create_lookup_choices = from_lookup  # type: ignore[method-assign]
    templates = [Template("triton::mm"), Template("aten::addmm")]
    chosen = choices._finalize_template_configs({}, inputs_of(4), templates, "mm")
    assert chosen == built and len(built) == 3  # the nearest's two fastest and its extern
    assert [c.annotations["tps"][1].params for c in built] == [
        {"template_id": "triton::mm", "BLOCK_M": 64},
        {"template_id": "triton::mm", "BLOCK_M": 32},
        {"template_id": "aten::addmm"},
    ]
    assert fleet.stats.likely == 1


@pytest.mark.parametrize("likely_finalists, rounds", [(0, 0), (3, 3)])
def test_a_likely_search_is_decided_by_its_own_timing_unless_asked(
    make_runtime, likely_finalists, rounds
):
    """A search among the nearest hardware's fastest times no finalists again by default."""
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt), likely_finalists=likely_finalists)
    problem = mm_problem(m=4)
    learn_nearest(fleet, make_runtime, problem)
    assert fleet.configs(problem) and fleet.stats.likely == 1
    timings = tagged_search(problem, FIRST_SEARCH)
    bench = Bench(AGAIN)
    fleet.feedback(timings, "mm", [], list(timings), bench)
    assert len(bench.calls) == rounds and fleet.stats.retimed == int(rounds > 0)
    (run,) = runs
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert winner.candidate.params["BLOCK_M"] == (64 if rounds else 32)
    with pytest.raises(ValueError, match="likely_finalists must be 0 or at least 2"):
        InductorFleet(RuntimeSession(runtime=rt), likely_finalists=1)


def test_the_lookup_answers_only_templates_in_use(make_runtime):
    rt = make_runtime()
    fleet = InductorFleet(RuntimeSession(runtime=rt))
    problem = mm_problem()
    searched(fleet, problem, {"64": 0.012})

    choices = _choices_class()(fleet)
    found = choices.lookup_template_configs(inputs_of(4), "mm", ["triton::mm", "aten::mm"])
    assert found == {"triton::mm": [{"BLOCK_M": 64}]}
    assert choices.lookup_template_configs(inputs_of(4), "mm", ["aten::mm"]) == {}
    assert choices.lookup_template_configs(inputs_of(4), "bmm", ["triton::bmm"]) == {}


def test_the_lookup_groups_a_shortlist_by_template(make_runtime):
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), shortlist=2)
    ranked_search(fleet, mm_problem(), SEARCH)
    choices = _choices_class()(fleet)
    found = choices.lookup_template_configs(inputs_of(4), "mm", ["triton::mm", "aten::addmm"])
    assert found == {"triton::mm": [{"BLOCK_M": 64}, {"BLOCK_M": 32}], "aten::addmm": [{}]}
    # addmm's ATen choices are asked apart: the shortlist's extern choice answers them
    assert choices.lookup_template_configs(inputs_of(4), "mm", ["aten::addmm"]) == {
        "aten::addmm": [{}]
    }


def test_a_likely_search_with_one_choice_here_searches_everything(make_runtime):
    """The nearest's fastest of templates this inductor lacks leave one choice to time:
    inductor searches the whole space instead, and a served winner alone is still served."""
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), likely=2)
    problem = mm_problem(m=4)
    learn_nearest(fleet, make_runtime, problem)
    choices = _choices_class()(fleet)
    both = choices.lookup_template_configs(inputs_of(4), "mm", ["triton::mm", "aten::addmm"])
    assert both == {"triton::mm": [{"BLOCK_M": 64}, {"BLOCK_M": 32}], "aten::addmm": [{}]}
    assert choices.lookup_template_configs(inputs_of(4), "mm", ["aten::addmm"]) == {}
    assert choices.lookup_template_configs(inputs_of(4), "mm", ["triton::other"]) == {}
    served = InductorFleet(RuntimeSession(runtime=make_runtime()))
    ranked_search(served, problem, SEARCH)
    alone = _choices_class()(served)
    assert alone.lookup_template_configs(inputs_of(4), "mm", ["triton::mm"]) == {
        "triton::mm": [{"BLOCK_M": 64}]
    }


def test_compiling_inside_the_block_leaves_inductor_as_it_was(make_runtime):
    from torch._inductor import select_algorithm
    from torch._inductor.virtualized import V

    before = type(V.choices)
    saver = select_algorithm.get_algorithm_selector_cache()
    session = RuntimeSession(runtime=make_runtime())
    f = torch.compile(lambda a, b: torch.mm(a, b).relu(), fullgraph=True)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with compiled(session) as fleet:
        assert type(V.choices).__name__ == "TpsChoices"
        assert fleet.feedback in saver.feedback_saver_fns
        out = f(a, b)
    assert torch.allclose(out, torch.mm(a, b).relu())
    assert type(V.choices) is before and fleet.feedback not in saver.feedback_saver_fns


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def test_the_block_compiles_through_the_fleet_where_inductor_cached_the_graph(make_runtime):
    """Inductor's caches know nothing of the fleet's choices: inside the block they are off.

    A graph compiled in an earlier block (host 1's search, or its last start) would
    otherwise come back from inductor's cache as it was, with what the fleet learned since
    left out."""

    def f(a, b):
        return torch.mm(a, b).sigmoid()

    a, b = torch.randn(8, 24), torch.randn(24, 6)
    session = RuntimeSession(runtime=make_runtime())
    for _ in range(2):
        torch._dynamo.reset()
        with compiled(session) as fleet:
            out = torch.compile(f, options={"max_autotune_gemm": True})(a, b)
        # lowered here, asking the fleet, the second time too
        assert fleet.stats.lookups >= 1
        assert torch.allclose(out, torch.mm(a, b).sigmoid())


def test_compile_compiles_again_from_the_records_where_its_compile_searched(
    make_runtime, monkeypatch
):
    """Host 1 runs the program its records compile, as every other host does."""
    real = inductor_module.compiled
    blocks: list[InductorFleet] = []

    @contextmanager
    def searching(session: RuntimeSession, **how: Any) -> Iterator[InductorFleet]:
        with real(session, **how) as fleet:
            yield fleet
        if not blocks:
            fleet.stats.searched = 2  # as a GPU's first compile searches its products
        blocks.append(fleet)

    monkeypatch.setattr(inductor_module, "compiled", searching)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 4))
    x = torch.randn(3, 16)
    session = RuntimeSession(runtime=make_runtime())
    before = _graphs()
    with torch.no_grad():
        program = inductor_module.compile(model, (x,), session=session)
        assert torch.allclose(program(x), model(x), atol=1e-5)
    assert len(blocks) == 2 and _graphs() == before + 2
    assert blocks[1].stats.lookups >= 1  # the second compile asked the fleet again
    # options that name the first marker already: the second compile takes another
    blocks.clear()
    torch._dynamo.reset()
    before = _graphs()
    with torch.no_grad():
        named = inductor_module.compile(
            model, (x,), session=session, options=dict(inductor_module.RECOMPILE_MARKERS[0])
        )
        assert torch.allclose(named(x), model(x), atol=1e-5)
    assert len(blocks) == 2 and _graphs() == before + 2
    # options that name every marker: a clear error, before anything compiles
    every = {k: v for m in inductor_module.RECOMPILE_MARKERS for k, v in m.items()}
    blocks.clear()
    with pytest.raises(ValueError, match="recompile=False"):
        inductor_module.compile(model, (x,), session=session, options=every)
    assert blocks == []

    # nothing searched: one compile, that program
    blocks.clear()
    monkeypatch.setattr(inductor_module, "compiled", real)
    other = torch.nn.Linear(16, 5)
    before = _graphs()
    with torch.no_grad():
        alone = inductor_module.compile(other, x, session=session)  # one tensor, as a call
        assert torch.allclose(alone(x), other(x), atol=1e-5)
    assert _graphs() == before + 1


def push(live_service, runs) -> None:
    """Push host 1's runs to the real service, as its pusher would."""
    from tests.factories import batch_body

    with live_service.client() as client:
        pushed = client.post(
            "/v1/probe-runs", content=batch_body(runs), headers={"Content-Type": "application/json"}
        )
        assert pushed.status_code in (200, 201), pushed.text


def test_a_second_host_compiles_the_fleets_winner_without_a_search(make_runtime, live_service):
    """Host 1's recorded search goes to the real service; host 2 asks once and gets its winner."""
    import httpx

    from agents.runtime.fleet import FleetPriors

    runs = []
    first = make_runtime()
    first.on_probe = runs.append
    problem = mm_problem(m=7)
    searched(InductorFleet(RuntimeSession(runtime=first)), problem, {"32": 0.020, "64": 0.012})
    push(live_service, runs)
    second = make_runtime()
    second.cache = type(first.cache)(None)  # an empty cache of its own
    with httpx.Client(base_url=live_service.base_url) as client:
        fleet_priors = FleetPriors(client=client, token=live_service.agent_token, margin=0.01)
        asked = []
        fetch = fleet_priors.fetch
        fleet_priors.fetch = lambda hw, ps: asked.append(len(ps)) or fetch(hw, ps)  # type: ignore[method-assign]
        fleet = InductorFleet(RuntimeSession(runtime=second, fleet=fleet_priors), shortlist=2)
        shortlist = [
            {"template_id": "triton::mm", "BLOCK_M": 64},
            {"template_id": "triton::mm", "BLOCK_M": 32},
        ]  # the fleet's ranking, fastest first
        assert fleet.configs(problem) == shortlist
        assert fleet.configs(problem) == shortlist  # now from this host's cache
        assert fleet.configs(mm_problem(m=9)) is None  # never measured: inductor searches
        assert fleet.configs(mm_problem(m=9)) is None  # and the fleet is asked once only
        assert asked == [1, 1] and fleet.stats.fleet_hits == 1 and fleet.stats.searched == 0

        # A host whose own cache holds the winner, but not the ranking, asks for it once.
        warm = InductorFleet(RuntimeSession(runtime=second, fleet=fleet_priors), shortlist=2)
        assert warm.configs(problem) == shortlist and warm.configs(problem) == shortlist
        assert asked == [1, 1, 1] and warm.stats.fleet_hits == 0
        # The winner alone (the default) needs no ranking: a warm cache asks nobody.
        alone = InductorFleet(RuntimeSession(runtime=second, fleet=fleet_priors))
        assert alone.configs(problem) == shortlist[:1]
        assert asked == [1, 1, 1] and alone.stats.hits == 1


def test_a_new_gpu_model_searches_only_the_most_similar_hardwares_fastest(
    make_runtime, live_service
):
    """Host 1 of one GPU model records a search; a GPU model the fleet has not compiled on
    times that search's fastest few only, records its own search, then is served it."""
    import httpx

    from agents.runtime.fleet import FleetPriors

    runs = []
    first = make_runtime()
    first.on_probe = runs.append
    problem = mm_problem(m=13)
    timings = {"16": 0.030, "32": 0.020, "64": 0.012, "128": 0.015, "256": 0.025}
    searched(InductorFleet(RuntimeSession(runtime=first)), problem, timings)
    push(live_service, runs)

    def new_gpu(units: int):
        host = make_runtime()
        host.cache = type(first.cache)(None)
        host.hardware = first.hardware.model_copy(
            update={"compute_units": first.hardware.compute_units + units}
        )
        return host

    new = new_gpu(8)
    with httpx.Client(base_url=live_service.base_url) as client:
        fleet_priors = FleetPriors(client=client, token=live_service.agent_token, margin=0.01)
        fleet = InductorFleet(RuntimeSession(runtime=new, fleet=fleet_priors), likely=3)
        likely = [{"template_id": "triton::mm", "BLOCK_M": b} for b in (64, 128, 32)]
        assert fleet.configs(problem) == likely  # the nearest's three fastest, in its order
        assert fleet.searching(problem)  # a search, not a hit: tagged and recorded
        assert fleet.stats.likely == 1 and fleet.stats.hits == 0 and fleet.stats.fleet_hits == 0
        own = []
        new.on_probe = own.append
        searched(fleet, problem, {"64": 0.013, "128": 0.011, "32": 0.020})
        (run,) = own
        assert run.hardware == new.hardware and len(run.measurements) == 3
        assert fleet.configs(problem) == [{"template_id": "triton::mm", "BLOCK_M": 128}]
        assert fleet.stats.searched == 1 and fleet.stats.hits == 1

        # likely=0: inductor's whole search, as for a product nobody compiled
        whole = InductorFleet(RuntimeSession(runtime=new_gpu(16), fleet=fleet_priors), likely=0)
        assert whole.configs(problem) is None and whole.stats.likely == 0
        with pytest.raises(ValueError, match="likely must be 0 or at least 2"):
            InductorFleet(RuntimeSession(runtime=new), likely=1)


def test_a_torch_without_the_lookup_table_is_told_so(make_runtime, monkeypatch):
    import sys

    from agents.runtime.inductor import CompiledRuntimeError

    monkeypatch.setitem(sys.modules, "torch._inductor.lookup_table", None)  # as torch 2.9 has
    with pytest.raises(CompiledRuntimeError, match="lookup table .* this is torch"):
        with compiled(RuntimeSession(runtime=make_runtime())):
            pass


# -- kernels: inductor's coordinate-descent tuning through the fleet --------------------------


@dataclass
class Launcher:
    config: Any


@dataclass
class TritonConfig:
    """Triton's Config where Triton is absent (this CPU build of torch has none)."""

    kwargs: dict[str, Any]
    num_warps: int
    num_stages: int
    found_by_coordesc: bool = False


def hashable(config: Any) -> tuple[tuple[str, Any], ...]:
    """A configuration as inductor's tuner cache keys it."""
    items = sorted(config.kwargs.items())
    return (*items, ("num_warps", config.num_warps), ("num_stages", config.num_stages))


@dataclass
class Tuner:
    cached_benchmark_results: dict[Any, float] = field(default_factory=dict)

    def call_func(self, func: Any, config: Any) -> float:
        """Inductor's: time a configuration once, keep its timing in the cache."""
        key = hashable(config)
        if key not in self.cached_benchmark_results:
            self.cached_benchmark_results[key] = func(config)
        return self.cached_benchmark_results[key]


class Kernel:
    """What TPS reads of inductor's CachingAutotuner: its kernel, size hints and tuner."""

    def __init__(self, src: str = "def triton_red_fused_mm_0(in_ptr0, out_ptr0): ...") -> None:
        self.fn = type("Fn", (), {"src": src, "__name__": "triton_red_fused_mm_0"})()
        self.size_hints = {"x": 4096, "r0_": 4096}
        self.heuristic_type = "HeuristicType.REDUCTION"
        self.triton_meta = {"signature": {"in_ptr0": "*bf16", "out_ptr0": "*bf16", "xnumel": "i32"}}
        self.coordesc_tuner = Tuner()
        self.built: list[Any] = []
        self.speeds: dict[tuple[int, int], float] = {}  # (R0_BLOCK, num_warps) -> ms here
        self.benched: list[tuple[int, int]] = []

    def bench(self, launcher: Any, *args: Any, **kwargs: Any) -> float:
        key = (launcher.config.kwargs["R0_BLOCK"], launcher.config.num_warps)
        self.benched.append(key)
        return self.speeds.get(key, math.inf)

    def _precompile_config(self, config: Any) -> Any:
        self.built.append(config)
        return type("Compiled", (), {"make_launcher": lambda _self: Launcher(config)})()


class Autotuner(Kernel):
    _should_coordesc_tune = True  # torch 2.13's own check


def timings(*rows: tuple[int, int, float]) -> dict[Any, float]:
    """The tuner's cache: (R0_BLOCK, num_warps, ms) per configuration, keyed as inductor keys it."""
    return {
        (("R0_BLOCK", block), ("XBLOCK", 1), ("num_warps", warps), ("num_stages", 1)): ms
        for block, warps, ms in rows
    }


def tuning(autotuner: Autotuner, chosen: tuple[int, int], calls: list[Any]):
    """Inductor's own tuning, as TPS wraps it: it fills the tuner's cache and returns a launcher."""

    def tune(tuner_self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(launcher)
        tuner_self.coordesc_tuner.cached_benchmark_results = timings(
            (64, 4, 0.030), (128, 8, 0.021), (256, 8, 0.020), (512, 16, math.inf)
        )
        block, warps = chosen
        return Launcher(TritonConfig({"R0_BLOCK": block, "XBLOCK": 1}, warps, 1, True))

    return tune


def test_a_kernel_maps_to_a_problem_of_its_source_and_size_hints():
    from agents.runtime.inductor import KERNEL_OP, kernel_problem

    problem = kernel_problem(Autotuner())
    assert problem is not None and problem.op == KERNEL_OP and problem.dtype == "bf16"
    assert problem.dims == {"x": 4096, "r0": 4096}
    assert kernel_problem(Autotuner()) == problem  # the same kernel on another host
    assert kernel_problem(Autotuner(src="def other(in_ptr0): ...")) != problem
    # the same kernel numbered otherwise in another graph (its name ends in a counter)
    renumbered = Autotuner(src="def triton_red_fused_mm_7(in_ptr0, out_ptr0): ...")
    assert kernel_problem(renumbered) == problem
    changed = Autotuner(src="def triton_red_fused_mm_0(in_ptr1, out_ptr0): ...")
    assert kernel_problem(changed) != problem
    odd = Autotuner()
    odd.size_hints = {}
    assert kernel_problem(odd) is None  # nothing to name it by
    assert kernel_problem(object()) is None


@pytest.fixture
def without_triton(monkeypatch):
    """Build a served configuration as the TritonConfig above (this torch has no Triton)."""
    import agents.runtime.inductor as inductor

    def config(params: dict[str, Any]) -> TritonConfig:
        kwargs = {k: v for k, v in params.items() if k not in ("num_warps", "num_stages")}
        return TritonConfig(kwargs, params["num_warps"], params["num_stages"])

    monkeypatch.setattr(inductor, "_triton_config", config)


@pytest.mark.usefixtures("without_triton")
def test_a_kernels_tuning_is_recorded_then_served_without_tuning(make_runtime):
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt))
    calls: list[Any] = []
    first = Autotuner()
    # inductor chose 128/8, 5% slower than 256/8 (coordinate descent keeps a config unless the
    # next one gains enough): the recorded winner is the one it chose
    launched = fleet.tune_kernel(tuning(first, (128, 8), calls), first, "initial")
    assert calls == ["initial"] and launched.config.kwargs["R0_BLOCK"] == 128
    (run,) = runs
    assert run.problem.op == "inductor_kernel" and len(run.measurements) == 4
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert winner.candidate.params["R0_BLOCK"] == 128 and winner.median_us == pytest.approx(21.0)
    assert sum(not m.valid for m in run.measurements) == 1  # the configuration that failed
    assert fleet.stats.kernels_tuned == 1 and fleet.stats.searched == 0
    tuned_s = fleet.stats.kernel_tune_s
    assert tuned_s > 0

    # the same kernel again (this host's cache): built with that configuration, not tuned
    again = Autotuner()
    launched = fleet.tune_kernel(tuning(again, (64, 4), calls), again, "initial")
    assert calls == ["initial"] and fleet.stats.kernel_hits == 1
    assert fleet.stats.kernel_tune_s == tuned_s
    (built,) = again.built
    assert built.kwargs == {"R0_BLOCK": 128, "XBLOCK": 1} and built.num_warps == 8
    assert built.found_by_coordesc and launched.config is built


def test_a_known_configuration_that_does_not_build_is_tuned_again(make_runtime, monkeypatch):
    import agents.runtime.inductor as inductor

    def broken(params: dict[str, Any]) -> Any:
        raise RuntimeError("out of resources: shared memory")

    rt = make_runtime()
    fleet = InductorFleet(RuntimeSession(runtime=rt))
    calls: list[Any] = []
    fleet.tune_kernel(tuning(Autotuner(), (128, 8), calls), Autotuner(), "initial")
    monkeypatch.setattr(inductor, "_triton_config", broken)
    fleet.tune_kernel(tuning(Autotuner(), (128, 8), calls), Autotuner(), "initial")
    assert calls == ["initial", "initial"] and fleet.stats.kernel_hits == 0


class Fixed(Autotuner):
    _should_coordesc_tune = False  # a template, a user's own @triton.autotune


class Older(Kernel):
    """torch 2.11's autotuner: no `_should_coordesc_tune`; the heuristic's kind says."""

    def __init__(self, kind: str, deterministic: bool = False) -> None:
        super().__init__()
        self.heuristic_type = type("Kind", (), {"name": kind})()
        self.deterministic_mode = deterministic


@pytest.mark.parametrize(
    "autotuner,tuned_here",
    [
        (Fixed(), False),
        (Older("TEMPLATE"), False),
        (Older("USER_AUTOTUNE"), False),
        (Older("REDUCTION", deterministic=True), False),
        (Older("REDUCTION"), True),
        (Older("POINTWISE", deterministic=True), True),
    ],
)
def test_only_a_kernel_inductor_would_tune_goes_through_the_fleet(
    make_runtime, autotuner, tuned_here
):
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()))
    calls: list[Any] = []
    fleet.tune_kernel(tuning(autotuner, (128, 8), calls), autotuner, "initial")
    assert calls == ["initial"]  # inductor's own code runs either way
    assert fleet.stats.kernel_lookups == int(tuned_here)
    assert fleet.stats.kernels_tuned == int(tuned_here)


def test_the_block_tunes_kernels_and_puts_inductor_back(make_runtime):
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    original = CachingAutotuner.coordinate_descent_tuning
    tuned_before = inductor_config.coordinate_descent_tuning
    with compiled(RuntimeSession(runtime=make_runtime())):
        assert inductor_config.coordinate_descent_tuning is True
        assert CachingAutotuner.coordinate_descent_tuning is not original
    assert CachingAutotuner.coordinate_descent_tuning is original
    assert inductor_config.coordinate_descent_tuning == tuned_before
    with compiled(RuntimeSession(runtime=make_runtime()), tune_kernels=False):
        assert inductor_config.coordinate_descent_tuning == tuned_before
        assert CachingAutotuner.coordinate_descent_tuning is original


def test_a_search_on_a_gpu_times_device_time_only(make_runtime):
    """On a GPU inductor's search reads its timings from the profiler; the block puts it back."""
    import dataclasses

    import torch._inductor.config as inductor_config

    before = inductor_config.profile_bandwidth_with_do_bench_using_profiling
    runtime = make_runtime()
    with compiled(RuntimeSession(runtime=runtime)):  # the CPU: inductor's own timer
        assert inductor_config.profile_bandwidth_with_do_bench_using_profiling == before
    runtime.device = dataclasses.replace(runtime.device, kind="cuda")  # what the block reads
    with compiled(RuntimeSession(runtime=runtime)):
        assert inductor_config.profile_bandwidth_with_do_bench_using_profiling is True
    assert inductor_config.profile_bandwidth_with_do_bench_using_profiling == before
    with compiled(RuntimeSession(runtime=runtime), device_time=False):
        assert inductor_config.profile_bandwidth_with_do_bench_using_profiling == before


def test_a_search_leaves_epilogue_fusion_to_inductors_rules_unless_asked(make_runtime):
    """By default the block turns off inductor's epilogue benchmarking, in the block only;
    `epilogues=True` leaves it as max-autotune has it."""
    import torch._inductor.config as inductor_config

    before = inductor_config.benchmark_epilogue_fusion
    inductor_config.benchmark_epilogue_fusion = True  # max-autotune's own setting
    try:
        runtime = make_runtime()
        with compiled(RuntimeSession(runtime=runtime)):
            assert inductor_config.benchmark_epilogue_fusion is False
        assert inductor_config.benchmark_epilogue_fusion is True
        with compiled(RuntimeSession(runtime=runtime), epilogues=True):
            assert inductor_config.benchmark_epilogue_fusion is True
    finally:
        inductor_config.benchmark_epilogue_fusion = before


@pytest.mark.usefixtures("without_triton")
def test_a_second_host_runs_the_fleets_kernel_configuration(make_runtime, live_service):
    """Host 1's kernel tuning goes to the real service; host 2 builds its winner untuned."""
    import httpx

    from agents.runtime.fleet import FleetPriors

    runs = []
    first = make_runtime()
    first.on_probe = runs.append
    calls: list[Any] = []
    InductorFleet(RuntimeSession(runtime=first)).tune_kernel(
        tuning(Autotuner(), (256, 8), calls), Autotuner(), "initial"
    )
    push(live_service, runs)
    second = make_runtime()
    second.cache = type(first.cache)(None)  # an empty cache of its own
    with httpx.Client(base_url=live_service.base_url) as client:
        fleet_priors = FleetPriors(client=client, token=live_service.agent_token, margin=0.01)
        fleet = InductorFleet(RuntimeSession(runtime=second, fleet=fleet_priors))
        kernel = Autotuner()
        fleet.tune_kernel(tuning(kernel, (64, 4), calls), kernel, "initial")
    assert calls == ["initial"]  # host 2 tuned nothing
    (built,) = kernel.built
    assert built.kwargs["R0_BLOCK"] == 256 and built.num_warps == 8
    assert fleet.stats.fleet_hits == 1 and fleet.stats.kernel_hits == 1


# -- a kernel new to this GPU model, which the most similar hardware tuned ----------------------

OWN = Launcher(TritonConfig({"R0_BLOCK": 64, "XBLOCK": 1}, 4, 1))  # inductor's own configuration


def learn_nearest_kernel(fleet: InductorFleet, make_runtime) -> None:
    """Give `fleet` another hardware's tuning of the kernel: 256/8, 128/8, 64/4 fastest first."""
    nearest = []
    other = make_runtime()
    other.on_probe = nearest.append
    kernel = Autotuner()
    InductorFleet(RuntimeSession(runtime=other)).tune_kernel(
        tuning(kernel, (256, 8), []), kernel, "initial"
    )
    fleet.learn(nearest[0], nearest=True)


@pytest.mark.usefixtures("without_triton")
def test_a_kernel_is_timed_among_the_nearest_hardwares_fastest_and_recorded(make_runtime):
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(RuntimeSession(runtime=rt), kernel_likely=2)
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    kernel.speeds = {(64, 4): 0.025, (256, 8): 0.019, (128, 8): 0.012, (512, 16): 0.001}
    calls: list[Any] = []
    launched = fleet.tune_kernel(tuning(kernel, (64, 4), calls), kernel, OWN)
    assert calls == []  # no coordinate descent
    # inductor's own configuration and the nearest's two fastest, timed once each here
    assert kernel.benched == [(64, 4), (256, 8), (128, 8)]
    assert launched.config.kwargs["R0_BLOCK"] == 128 and launched.config.num_warps == 8
    assert launched.config.found_by_coordesc  # inductor tunes it no further
    (run,) = runs
    assert run.hardware == rt.hardware and len(run.measurements) == 3
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert winner.candidate.params["R0_BLOCK"] == 128 and winner.median_us == pytest.approx(12.0)
    assert fleet.stats.kernels_likely == 1 and fleet.stats.kernels_tuned == 1
    assert fleet.stats.kernel_tune_s > 0


@pytest.mark.usefixtures("without_triton")
def test_kernel_descend_starts_coordinate_descent_from_the_fastest_likely_configuration(
    make_runtime,
):
    runs = []
    rt = make_runtime()
    rt.on_probe = runs.append
    fleet = InductorFleet(
        RuntimeSession(runtime=rt), kernel_likely=2, kernel_descend=True, kernel_descend_min_us=0
    )
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    kernel.speeds = {(64, 4): 0.025, (256, 8): 0.019, (128, 8): 0.012}
    calls: list[Any] = []
    launched = fleet.tune_kernel(tuning(kernel, (256, 8), calls), kernel, OWN)
    assert kernel.benched == [(64, 4), (256, 8), (128, 8)]  # the likely ones, timed first
    (start,) = calls  # one descent, from 128/8 (the fastest here), not from inductor's own
    assert start.config.kwargs["R0_BLOCK"] == 128 and start.config.num_warps == 8
    assert launched.config.kwargs["R0_BLOCK"] == 256  # what the descent chose
    (run,) = runs
    winner = next(m for m in run.measurements if m.candidate.id == run.winner_id)
    assert winner.candidate.params["R0_BLOCK"] == 256
    assert fleet.stats.kernels_likely == 1 and fleet.stats.kernels_tuned == 1


@pytest.mark.usefixtures("without_triton")
@pytest.mark.parametrize("min_us,descends", [(12.0, True), (12.5, False)])
def test_kernel_descend_passes_over_a_kernel_shorter_than_its_threshold(
    make_runtime, min_us, descends
):
    fleet = InductorFleet(
        RuntimeSession(runtime=make_runtime()),
        kernel_likely=2,
        kernel_descend=True,
        kernel_descend_min_us=min_us,
    )
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    kernel.speeds = {(64, 4): 0.025, (256, 8): 0.019, (128, 8): 0.012}  # fastest: 12 µs
    calls: list[Any] = []
    launched = fleet.tune_kernel(tuning(kernel, (256, 8), calls), kernel, OWN)
    assert fleet.stats.kernel_likely_us == [12.0]
    assert len(calls) == int(descends) and fleet.stats.kernels_descended == int(descends)
    # the slowest configuration timed, against the fastest: 25 µs / 12 µs
    assert fleet.stats.kernel_likely_spread == [round(25 / 12, 4)]
    assert [d[0] for d in fleet.stats.kernel_descents] == ([12.0] if descends else [])
    assert fleet.stats.kernel_descent_names == (["triton_red_fused_mm_0"] if descends else [])
    # descended: what the descent chose; passed over: the fastest likely configuration
    assert launched.config.kwargs["R0_BLOCK"] == (256 if descends else 128)


@pytest.mark.usefixtures("without_triton")
@pytest.mark.parametrize(
    "name,reductions,descends",
    [
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_20", False, False),
        ("triton_per_fused_add_mean_pow_rsqrt_4", False, False),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_20", True, True),
        ("triton_red_fused__unsafe_view_mm_mul_silu_t_view_11", False, True),
        ("triton_poi_fused__scaled_dot_product_efficient_attention_add_7", False, True),
    ],
)
def test_kernel_descend_passes_over_a_reduction_that_fuses_no_product(
    make_runtime, name, reductions, descends
):
    fleet = InductorFleet(
        RuntimeSession(runtime=make_runtime()),
        kernel_likely=2,
        kernel_descend=True,
        kernel_descend_min_us=0.0,
        kernel_descend_reductions=reductions,
    )
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner(src=f"def {name}(in_ptr0, out_ptr0): ...")
    kernel.speeds = {(64, 4): 0.025, (256, 8): 0.019, (128, 8): 0.012}
    calls: list[Any] = []
    launched = fleet.tune_kernel(tuning(kernel, (256, 8), calls), kernel, OWN)
    assert fleet.stats.kernels_likely == 1
    assert len(calls) == int(descends) and fleet.stats.kernels_descended == int(descends)
    assert fleet.stats.kernel_descent_names == ([name] if descends else [])
    assert launched.config.kwargs["R0_BLOCK"] == (256 if descends else 128)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_kernel_descend_threshold_must_be_a_finite_time(make_runtime, bad):
    with pytest.raises(ValueError, match="kernel_descend_min_us"):
        InductorFleet(RuntimeSession(runtime=make_runtime()), kernel_descend_min_us=bad)


@pytest.mark.usefixtures("without_triton")
def test_inductors_own_kernel_configuration_wins_where_it_is_fastest_here(make_runtime):
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()))
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    kernel.speeds = {(64, 4): 0.010, (256, 8): 0.019, (128, 8): 0.012}
    launched = fleet.tune_kernel(tuning(kernel, (64, 4), []), kernel, OWN)
    assert launched is OWN and OWN.config.found_by_coordesc
    assert kernel.benched == [(64, 4), (256, 8), (128, 8)]  # 512/16 failed there: not timed


@pytest.mark.usefixtures("without_triton")
def test_a_kernel_the_nearest_configurations_cannot_run_is_tuned_by_inductor(
    make_runtime, monkeypatch
):
    import agents.runtime.inductor as inductor

    def broken(params: dict[str, Any]) -> Any:
        raise RuntimeError("out of resources: shared memory")

    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()))
    learn_nearest_kernel(fleet, make_runtime)
    monkeypatch.setattr(inductor, "_triton_config", broken)
    kernel = Autotuner()
    kernel.speeds = {(64, 4): 0.025}
    calls: list[Any] = []
    fleet.tune_kernel(tuning(kernel, (256, 8), calls), kernel, OWN)
    assert calls == [OWN]  # only inductor's own built here: coordinate descent tunes it
    assert fleet.stats.kernels_likely == 0 and fleet.stats.kernels_tuned == 1


@pytest.mark.usefixtures("without_triton")
def test_kernel_likely_0_tunes_every_kernel_by_coordinate_descent(make_runtime):
    fleet = InductorFleet(RuntimeSession(runtime=make_runtime()), kernel_likely=0)
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    calls: list[Any] = []
    fleet.tune_kernel(tuning(kernel, (256, 8), calls), kernel, OWN)
    assert calls == [OWN] and kernel.benched == [] and fleet.stats.kernels_likely == 0
    with pytest.raises(ValueError, match="kernel_likely must be 0 or more"):
        InductorFleet(RuntimeSession(runtime=make_runtime()), kernel_likely=-1)


@pytest.mark.usefixtures("without_triton")
def test_a_new_gpu_model_times_the_kernel_configurations_the_fleet_tuned(
    make_runtime, live_service
):
    """Host 1 of one GPU model tunes a kernel and pushes it; a GPU model the fleet has not
    run it on gets that ranking from the real service (source nearest) and times it."""
    import httpx

    from agents.runtime.fleet import FleetPriors

    runs = []
    first = make_runtime()
    first.on_probe = runs.append
    kernel = Autotuner(src="def triton_per_fused_rms_norm_3(in_ptr0, out_ptr0): ...")
    InductorFleet(RuntimeSession(runtime=first)).tune_kernel(
        tuning(kernel, (256, 8), []), kernel, "initial"
    )
    push(live_service, runs)
    new = make_runtime()
    new.cache = type(first.cache)(None)
    new.hardware = first.hardware.model_copy(
        update={"compute_units": first.hardware.compute_units + 8}
    )
    own = []
    new.on_probe = own.append
    with httpx.Client(base_url=live_service.base_url) as client:
        fleet_priors = FleetPriors(client=client, token=live_service.agent_token, margin=0.01)
        fleet = InductorFleet(RuntimeSession(runtime=new, fleet=fleet_priors), kernel_likely=1)
        again = Autotuner(src=kernel.fn.src)
        again.speeds = {(64, 4): 0.025, (256, 8): 0.019}
        calls: list[Any] = []
        launched = fleet.tune_kernel(tuning(again, (64, 4), calls), again, OWN)
    assert calls == [] and again.benched == [(64, 4), (256, 8)]
    assert launched.config.kwargs["R0_BLOCK"] == 256
    assert fleet.stats.kernel_hits == 0 and fleet.stats.kernels_likely == 1
    (run,) = own
    assert run.hardware == new.hardware and len(run.measurements) == 2


@pytest.mark.usefixtures("without_triton")
@pytest.mark.parametrize("ahead", [True, False])
def test_a_descent_compiles_its_next_configurations_in_the_compile_workers(
    make_runtime, tmp_path, ahead
):
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    fleet = InductorFleet(
        RuntimeSession(runtime=make_runtime()),
        kernel_likely=2,
        kernel_descend=True,
        kernel_descend_min_us=0,
        kernel_ahead=ahead,
        compile_pool=(pool := ThreadPoolExecutor(2)),
    )
    learn_nearest_kernel(fleet, make_runtime)
    kernel = Autotuner()
    # the kernel as inductor loads it: its function defined in the module it wrote to disk
    path = tmp_path / "cabc.py"
    path.write_text("def triton_red_fused_mm_0(in_ptr0, out_ptr0):\n    pass\n")
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    kernel.fn.fn = namespace["triton_red_fused_mm_0"]
    kernel.coordesc_tuner = CoordescTuner(
        name="k",
        size_hints=kernel.size_hints,
        inductor_meta={"warp_size": 32, "max_threads_per_block": 1024},
    )
    kernel.speeds = {(64, 4): 0.025, (256, 8): 0.019, (128, 8): 0.012}
    inside: list[bool] = []

    def tune(tuner_self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        inside.append("_precompile_config" in vars(tuner_self))  # compiled through the workers
        return tuning(kernel, (256, 8), [])(tuner_self, launcher, *args, **kwargs)

    fleet.tune_kernel(tune, kernel, OWN)
    pool.shutdown()
    assert inside == [ahead]
    # the descent from 128/8 had its neighbours handed to the workers before it started
    assert (fleet.stats.ahead.submitted > 0) is ahead
    assert "_precompile_config" not in vars(kernel)
