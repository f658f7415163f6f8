"""`tps agent export`: the agent's cache as PyTorch TunableOp results files, per format."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from agents.cache import ProbeCache
from cli import app
from tests.factories import cublaslt, hardware_spec, probe_run
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey

runner = CliRunner()
HIP = Candidate(backend="hipblaslt", params={"solution": "Gemm_Hipblaslt_1234"})
ROC = Candidate(backend="rocblas", params={"solution": "Gemm_Rocblas_21"})


def _cache(path: Path) -> Path:
    cache = ProbeCache(path)
    hw = hardware_spec(torch_version="2.11.0+rocm6.2")
    for m, winner in enumerate((HIP, ROC, VENDOR_DEFAULT, cublaslt(7)), start=1):
        problem = ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": 64, "k": 32})
        run = probe_run(problem=problem, latencies=[(VENDOR_DEFAULT, 120.0), (winner, 100.0)],
                        hardware=hw)  # fmt: skip
        cache.put(run.model_copy(update={"winner_id": winner.id}))
    cache.save()
    return path


def _solutions(path: Path) -> list[str]:
    rows = [line.split(",") for line in path.read_text().splitlines()]
    return sorted(row[2] for row in rows if row[0] != "Validator")


def test_each_format_names_only_its_solutions(tmp_path: Path) -> None:
    cache = _cache(tmp_path / "cache.json")
    expected = {
        "tunableop": ["Default", "Gemm_Hipblaslt_1234", "Gemm_Rocblas_21"],
        "hipblaslt": ["Default", "Gemm_Hipblaslt_1234"],
        "rocblas": ["Default", "Gemm_Rocblas_21"],
    }
    for export_format, solutions in expected.items():
        out = tmp_path / f"{export_format}.csv"
        result = runner.invoke(
            app,
            ["agent", "export", "--cache", str(cache), "--format", export_format,
             "--out", str(out), "--validator", "ROCM_VERSION=6.2"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert _solutions(out) == solutions, export_format
        lines = out.read_text().splitlines()
        assert lines[:2] == ["Validator,ROCM_VERSION,6.2", "Validator,PT_VERSION,2.11.0"]
        text = " ".join(result.output.split())
        assert f"wrote {len(solutions)} GEMM winners of 4 cache entries" in text
        assert "1 cublaslt" in text  # never nameable in a TunableOp file


def test_export_reads_the_cache_named_by_the_agent_config(tmp_path: Path) -> None:
    cache = _cache(tmp_path / "state" / "cache.json")
    config = tmp_path / "agent.yaml"
    config.write_text(f"cache_path: {cache}\n")
    out = tmp_path / "tunableop_results0.csv"
    result = runner.invoke(app, ["agent", "export", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _solutions(out) == ["Default", "Gemm_Hipblaslt_1234", "Gemm_Rocblas_21"]


def test_export_explains_a_missing_cache_and_a_bad_validator(tmp_path: Path) -> None:
    result = runner.invoke(app, ["agent", "export", "--cache", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and "no cache at" in result.output
    cache = _cache(tmp_path / "cache.json")
    result = runner.invoke(
        app, ["agent", "export", "--cache", str(cache), "--validator", "ROCM_VERSION"]
    )
    assert result.exit_code == 2 and "is not KEY=VALUE" in result.output
    result = runner.invoke(app, ["agent", "export", "--cache", str(cache), "--format", "cudnn"])
    assert result.exit_code == 2 and "cudnn" in result.output


def test_version_and_examples_in_help() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"tps {version('tps')}"
    result = runner.invoke(app, ["--help"])
    assert "Examples:" in result.output and "tps agent export" in result.output
    for command in (["serve"], ["demo"], ["token", "create"], ["train"], ["agent", "export"],
                    ["agent", "run"], ["agent", "probe"], ["evaluate"]):  # fmt: skip
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, command
        assert "Examples:" in result.output, command
        assert f"tps {' '.join(command)}" in result.output, command
