"""The local cache: LRU order, persistence, and TunableOp CSV both ways."""

import pytest

from agents.cache import ProbeCache
from agents.errors import CacheError
from tests.factories import cublaslt, hardware_spec, probe_run
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey


def linear(m, n=64, k=32):
    return ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": n, "k": k}, trans_b=True)


def run_for(problem, winner, hardware=None):
    latencies = [(VENDOR_DEFAULT, 120.0), (winner, 100.0)]
    run = probe_run(problem=problem, latencies=latencies, hardware=hardware)
    return run.model_copy(update={"winner_id": winner.id})


def test_lru_evicts_the_least_recently_used(tmp_path):
    cache = ProbeCache(tmp_path / "cache.json", capacity=2)
    hw = hardware_spec()
    for m in (1, 2):
        cache.put(run_for(linear(m), cublaslt(m), hw))
    assert cache.get(linear(1), hw) is not None  # 1 is now the most recent
    cache.put(run_for(linear(3), cublaslt(3), hw))
    assert cache.get(linear(2), hw) is None
    assert cache.get(linear(1), hw).winner == cublaslt(1)
    assert len(cache) == 2


def test_key_covers_hardware_and_software_versions():
    cache = ProbeCache()
    hw = hardware_spec()
    cache.put(run_for(linear(8), cublaslt(1), hw))
    assert cache.get(linear(8), hw).speedup == pytest.approx(1.2)
    assert cache.get(linear(8), hardware_spec(unit_limit=16)) is None
    assert cache.get(linear(8), hardware_spec(blas_version="other")) is None
    assert cache.get(linear(8, k=40), hw) is None


def test_cache_persists_and_reloads_in_lru_order(tmp_path):
    path = tmp_path / "cache.json"
    cache = ProbeCache(path)
    hw = hardware_spec()
    for m in (1, 2, 3):
        cache.put(run_for(linear(m), cublaslt(m), hw))
    cache.get(linear(1), hw)
    cache.save()
    again = ProbeCache.load(path)
    assert [e.problem.dims["m"] for e in again.entries()] == [2, 3, 1]
    assert again.get(linear(3), hw).winner == cublaslt(3)
    assert len(ProbeCache.load(tmp_path / "missing.json")) == 0
    path.write_text("{not json")
    with pytest.raises(CacheError, match="unreadable"):
        ProbeCache.load(path)


def test_tunableop_csv_round_trip(tmp_path):
    hw = hardware_spec(torch_version="2.11.0+cu130")
    cache = ProbeCache()
    hip = Candidate(backend="hipblaslt", params={"solution": "Gemm_Hipblaslt_1234"})
    cache.put(run_for(linear(1, 6144, 4096), hip, hw))
    cache.put(run_for(linear(2), VENDOR_DEFAULT, hw))
    cache.put(run_for(linear(3), cublaslt(7), hw))  # not nameable in TunableOp
    path = tmp_path / "tunableop_results.csv"
    written = cache.export_tunableop_csv(path, validators={"ROCM_VERSION": "6.2"})
    assert written == 2
    lines = path.read_text().splitlines()
    assert lines[:2] == ["Validator,ROCM_VERSION,6.2", "Validator,PT_VERSION,2.11.0"]
    assert (
        "GemmTunableOp_BFloat16_TN,tn_6144_1_4096_ld_4096_4096_6144,Gemm_Hipblaslt_1234,0.1"
        in path.read_text()
    )

    imported = ProbeCache()
    assert imported.import_tunableop_csv(path) == 2
    other_host = hardware_spec(name="NVIDIA H100", compute_units=114)
    entry = imported.get(linear(1, 6144, 4096), other_host)
    assert entry.winner == hip and entry.median_us == pytest.approx(100.0)
    assert entry.source == "tunableop" and entry.torch_version == "2.11.0"
    assert imported.get(linear(2), hw).winner == VENDOR_DEFAULT
    keyed = ProbeCache()
    keyed.import_tunableop_csv(path, hardware=hw)
    assert keyed.get(linear(2), hw) is not None and keyed.get(linear(2), other_host) is None


def test_pytorch_written_csv_is_read_and_bad_rows_are_reported(tmp_path):
    path = tmp_path / "tunableop_results0.csv"
    path.write_text(
        "Validator,PT_VERSION,2.4.0\nValidator,ROCBLAS_VERSION,4.0.0-72e57364-dirty\n"
        "GemmTunableOp_Half_NN,nn_128_64_32,Gemm_Rocblas_21,0.0123\n"
        "GemmAndBiasTunableOp_Half_TN,tn_1_2_3,Default,0.5\n"
    )
    cache = ProbeCache()
    assert cache.import_tunableop_csv(path) == 1
    entry = cache.entries()[0]
    assert entry.problem.dims == {"m": 64, "n": 128, "k": 32} and entry.problem.dtype == "fp16"
    assert entry.winner.backend == "rocblas"
    path.write_text("GemmTunableOp_Half_NN,nn_128_64_32,Default,fast\n")
    with pytest.raises(CacheError, match="not a number"):
        cache.import_tunableop_csv(path)
