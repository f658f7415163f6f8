"""What the reference keeps of the training data: only the (hardware, problem) pairs measured."""

from __future__ import annotations

import numpy as np

from models.bundle import train_bundle
from models.dataset import TuningData
from models.priors import rank, served_candidates
from models.reference import FAILED_LOG_REL, Reference
from tests.factories import cublaslt, gemm_problem, hardware_spec, measurement, probe_run
from tests.models.conftest import FAST_MODEL
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Measurement, ProbeRun

CANDIDATES = [cublaslt(i) for i in range(8)]


def _run(
    hardware: HardwareSpec, problem: ProblemKey, scale: float, *, failed: int | None = None
) -> ProbeRun:
    return probe_run(
        hardware=hardware,
        problem=problem,
        measurements=[
            measurement(c, scale * (1 + i))
            if i != failed
            else Measurement(candidate=c, valid=False, error="wrong result")
            for i, c in enumerate(CANDIDATES)
        ],
    )


def test_a_pair_never_measured_has_no_row_nor_a_nearest_device() -> None:
    full, half = hardware_spec(), hardware_spec(unit_limit=66)
    square, skinny = gemm_problem(4096, 4096, 4096), gemm_problem(16, 8192, 4096)
    # the full chip ran both problems, the half chip only the square one (one candidate failed)
    data = TuningData.from_runs(
        [_run(full, square, 10.0), _run(full, skinny, 3.0), _run(half, square, 20.0, failed=2)]
    )
    reference = Reference.from_data(data)
    assert len(reference.log_rel) == 3
    assert not reference.log_rel.isna().all(axis=1).any()
    half_key, full_key = half.fingerprint(), full.fingerprint()
    assert reference.groups_for(skinny.key_hash()) == [full_key]
    nearest = reference.nearest_hardware(half, skinny.key_hash(), exclude=full_key)
    assert nearest is None
    failed = reference.log_rel.loc[(half_key, square.key_hash()), CANDIDATES[2].id]
    assert failed == FAILED_LOG_REL
    assert np.isnan(reference.median_us.loc[(half_key, square.key_hash()), CANDIDATES[2].id])


def test_a_known_device_asking_about_a_problem_it_never_ran_gets_no_observation() -> None:
    full, half = hardware_spec(), hardware_spec(unit_limit=66)
    square, skinny = gemm_problem(4096, 4096, 4096), gemm_problem(16, 8192, 4096)
    data = TuningData.from_runs(
        [_run(full, square, 10.0), _run(full, skinny, 3.0), _run(half, square, 20.0)]
    )
    bundle = train_bundle(data, model_params=FAST_MODEL)
    served = served_candidates(bundle, half, skinny)
    ranked = rank(bundle, half, skinny, served)
    assert ranked and all(r.source != "observed" for r in ranked)
    # where it did measure, its own observation answers, in its measured order
    own = rank(bundle, half, square, CANDIDATES)
    assert [r.source for r in own] == ["observed"] * len(CANDIDATES)
    assert [r.candidate.id for r in own] == [c.id for c in CANDIDATES]


def test_the_closest_problem_is_one_another_device_measured() -> None:
    full, half = hardware_spec(), hardware_spec(unit_limit=66)
    bf16, fp16 = gemm_problem(4096, 4096, 4096), gemm_problem(4096, 4096, 4096, dtype="fp16")
    # only the full chip ran fp16; both ran bf16
    data = TuningData.from_runs(
        [_run(full, bf16, 10.0), _run(full, fp16, 10.0), _run(half, bf16, 20.0)]
    )
    reference = Reference.from_data(data)
    assert reference.closest_problem(fp16) == fp16.key_hash()
    # leaving the full chip out, its fp16 problem is known only by the bf16 one
    assert reference.closest_problem(fp16, exclude=full.fingerprint()) == bf16.key_hash()
    assert reference.closest_problem(bf16, exclude=half.fingerprint()) == bf16.key_hash()
    alone = TuningData.from_runs([_run(full, fp16, 10.0)])
    assert Reference.from_data(alone).closest_problem(fp16, exclude=full.fingerprint()) is None


def test_a_new_device_is_ranked_among_each_known_devices_fastest_few() -> None:
    """The shortlist takes each device's fastest 10%, at least 32 and at most 256."""
    from models.reference import SHORTLIST_MAX, SHORTLIST_MIN

    many = [cublaslt(i) for i in range(4000)]
    few = many[:100]
    problem, other = gemm_problem(4096, 4096, 4096), gemm_problem(16, 8192, 4096)
    a, b = hardware_spec(), hardware_spec(unit_limit=66)

    def timed(hardware: HardwareSpec, candidates: list, order: int, on: ProblemKey) -> ProbeRun:
        # device a: fastest first; device b: fastest last (their shortlists do not overlap)
        n = len(candidates)
        return probe_run(
            hardware=hardware,
            problem=on,
            measurements=[
                measurement(c, 1.0 + (i if order > 0 else n - i)) for i, c in enumerate(candidates)
            ],
        )

    reference = Reference.from_data(
        TuningData.from_runs(
            [
                timed(a, many, 1, problem),
                timed(b, many, -1, problem),
                timed(a, few, 1, other),
            ]
        )
    )
    shortlist = reference.shortlist(problem.key_hash())
    assert shortlist is not None and len(shortlist) == 2 * SHORTLIST_MAX  # 10% of 4000 is 400
    assert many[0].id in shortlist and many[-1].id in shortlist  # each device's fastest
    assert many[SHORTLIST_MAX].id not in shortlist
    small = reference.shortlist(other.key_hash())
    assert small is not None and len(small) == SHORTLIST_MIN  # 10% of 100 is 10


def test_a_tables_columns_are_the_candidates_asked_in_their_order(
    convolution_data: TuningData,
) -> None:
    """`_table` against pandas' own reindex: any order, repeats, and unknown candidates."""
    import pandas as pd

    reference = Reference.from_data(convolution_data)
    keys = list(reference.log_rel.index[:3])
    known = list(reference.log_rel.columns)
    asked = [known[5], "no-such-candidate", known[0], known[5], known[-1]]
    for ids in (asked, np.array(asked, dtype=object), pd.Index(asked)):
        for values, frame in (("log_rel", reference.log_rel), ("median_us", reference.median_us)):
            expected = frame.loc[keys].reindex(columns=asked).to_numpy()
            got = reference._table(values, keys, ids)
            np.testing.assert_array_equal(got, expected)  # NaN where unknown, as pandas'
    assert reference._table("log_rel", keys, []).shape == (3, 0)


def test_a_tables_columns_follow_each_new_list_of_candidates(
    convolution_data: TuningData,
) -> None:
    """The columns of the last list asked are kept; another list, even of the same length,
    or the same list changed in place, gets its own."""
    reference = Reference.from_data(convolution_data)
    keys = list(reference.log_rel.index[:2])
    known = list(reference.log_rel.columns)
    first, second = known[:4], known[4:8]
    for ids in (first, second, first, list(reversed(first))):
        expected = reference.median_us.loc[keys].reindex(columns=ids).to_numpy()
        np.testing.assert_array_equal(reference._table("median_us", keys, ids), expected)
    changing = list(first)
    reference._table("log_rel", keys, changing)
    changing[0] = "no-such-candidate"
    assert np.isnan(reference._table("log_rel", keys, changing)[:, 0]).all()
    assert not reference._columns(changing).flags.writeable
