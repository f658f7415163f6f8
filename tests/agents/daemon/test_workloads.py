"""Workload sources: shape lists, TunableOp untuned files, and a watch folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.daemon.errors import SourceError
from agents.daemon.workloads import (
    WatchFolder,
    WorkloadSources,
    parse_untuned_line,
    read_any,
    read_shape_csv,
    read_tunableop_untuned,
)
from tps.problem import ProblemKey

# The checkout carries a copy of the shared GEMM suite (the device only sees the repo).
SUITE = Path(__file__).resolve().parents[3] / "benchmarks/workloads/gemm_llm_suite.csv"

# What PYTORCH_TUNABLEOP_RECORD_UNTUNED=1 writes: one op_signature,params_signature per line.
UNTUNED = """\
GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096
GemmTunableOp_float_NN,nn_256_128_64_ld_256_64_256
GemmStridedBatchedTunableOp_Half_TN,tn_128_128_64_B_8_ld_64_64_128
ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_64_64_64_ld_64_64_64_rw_0
GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096
"""


def test_shape_csv_rows_become_gemms_without_their_names(tmp_path: Path) -> None:
    path = tmp_path / "shapes.csv"
    path.write_text("name,m,n,k,trans_b\nllama3-8b.qkv,1,6144,4096,1\nmlp.up,16,512,256,0\n")
    problems = read_shape_csv(path, dtype="bf16")
    assert problems == [
        ProblemKey(op="gemm", dtype="bf16", dims={"m": 1, "n": 6144, "k": 4096}, trans_b=True),
        ProblemKey(op="gemm", dtype="bf16", dims={"m": 16, "n": 512, "k": 256}, trans_b=False),
    ]
    assert "llama" not in "".join(p.model_dump_json() for p in problems)


def test_the_shared_llm_suite_reads() -> None:
    rows = SUITE.read_text().strip().splitlines()[1:]
    assert len(read_shape_csv(SUITE, dtype="bf16")) == len(rows)


def test_untuned_lines_parse_to_the_problems_torch_ran() -> None:
    # torch.mm(x[1, 4096], W[4096, 4096].T): BLAS sees the transposed product.
    problem = parse_untuned_line("GemmTunableOp_BFloat16_TN,tn_4096_1_4096_ld_4096_4096_4096")
    assert problem.dims == {"m": 1, "n": 4096, "k": 4096}
    assert problem.trans_b and not problem.trans_a
    assert problem.tunableop_signature() == (
        "GemmTunableOp_BFloat16_TN",
        "tn_4096_1_4096_ld_4096_4096_4096",
    )


def test_strided_batched_keeps_its_batch() -> None:
    problem = parse_untuned_line(
        "GemmStridedBatchedTunableOp_Half_TN,tn_128_128_64_B_8_ld_64_64_128"
    )
    assert problem.dims == {"m": 128, "n": 128, "k": 64, "batch": 8}
    assert problem.dtype == "fp16"


def test_untuned_file_skips_what_it_cannot_probe(tmp_path: Path) -> None:
    path = tmp_path / "tunableop_untuned0.csv"
    path.write_text(UNTUNED)
    problems = read_tunableop_untuned(path)
    assert len(problems) == 4  # the scaled GEMM is skipped, the repeat is kept (deduped later)
    assert {p.dtype for p in problems} == {"bf16", "fp32", "fp16"}


def test_unknown_file_kind_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(SourceError, match="neither a shape list nor a TunableOp untuned file"):
        read_any(path, dtype="bf16")


def test_watch_folder_picks_up_new_and_grown_files(tmp_path: Path) -> None:
    folder = tmp_path / "watch"
    folder.mkdir()
    watch = WatchFolder(folder=folder, dtype="fp16")
    assert watch.poll() == []

    (folder / "shapes.csv").write_text("name,m,n,k,trans_b\na,8,8,8,1\n")
    (folder / "README").write_text("not a workload\n")
    assert len(watch.poll()) == 1
    assert watch.poll() == []  # nothing new

    untuned = folder / "tunableop_untuned0.csv"
    untuned.write_text("GemmTunableOp_Half_NN,nn_32_32_32_ld_32_32_32\n")
    assert [p.dims for p in watch.poll()] == [{"m": 32, "n": 32, "k": 32}]
    with untuned.open("a") as f:
        f.write("GemmTunableOp_Half_NN,nn_64_32_32_ld_64_32_64\n")
    assert len(watch.poll()) == 2  # the grown file is read again; the daemon dedups


def test_fixed_files_are_read_once_and_missing_ones_fail_clearly(tmp_path: Path) -> None:
    shapes = tmp_path / "s.csv"
    shapes.write_text("name,m,n,k,trans_b\na,8,8,8,1\n")
    sources = WorkloadSources(shape_csv=[shapes], dtype="bf16")
    assert len(sources.poll()) == 1
    assert sources.poll() == []

    missing = WorkloadSources(shape_csv=[tmp_path / "nope.csv"])
    with pytest.raises(SourceError, match="cannot read workload file"):
        missing.poll()
