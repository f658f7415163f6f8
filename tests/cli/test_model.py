import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cli.model import write_jsonl
from models.bundle import ModelBundle, checksum
from models.data_files import load_runs
from tests.factories import OP, stencil_cache_file, stencil_configurations
from tps.catalog import spec_for
from tps.schemas import ProbeRun

runner = CliRunner()


@pytest.fixture(scope="module")
def runs_file(tmp_path_factory: pytest.TempPathFactory, convolution_runs: list[ProbeRun]) -> Path:
    path = tmp_path_factory.mktemp("data") / "convolution.jsonl.gz"
    write_jsonl(convolution_runs, path)
    return path


def test_import_writes_probe_runs(tmp_path: Path, kernel_tuner_dir: Path) -> None:
    out = tmp_path / "runs.jsonl.gz"
    source = kernel_tuner_dir / "convolution_milo" / "W7800.json.gz"
    result = runner.invoke(app, ["import", "kernel-tuner", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run,) = load_runs([out])
    assert run.hardware.name == "AMD Radeon PRO W7800"
    assert sum(not m.valid for m in run.measurements) == 116


def test_evaluate_prints_json_for_a_holdout(runs_file: Path) -> None:
    result = runner.invoke(
        app,
        ["evaluate", "--data", str(runs_file), "--holdout", "A4000", "--json"]
        + ["--n-estimators", "20", "--threads", "1"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["holdout"] == "NVIDIA RTX A4000" and report["op"] == "convolution"
    assert set(report) >= {"n_candidates", "model", "baseline_nearest", "baseline_random"}
    for ranking in ("model", "policy", "baseline_nearest", "baseline_random"):
        for metric in ("score_at_1", "score_at_5", "probes_to_3pct", "median_ape"):
            assert metric in report[ranking], (ranking, metric)
    assert 0.0 <= report["calibration"]["brier"] <= 1.0
    assert (
        sum(row["rows"] for row in report["calibration"]["table"])
        == (report["calibration"]["rows"])
    )
    # The served policy was chosen on the three training GPUs alone.
    folds = report["policy_choice"]["folds"]
    assert len(folds) == 3 and "NVIDIA RTX A4000" not in {f["holdout"] for f in folds}
    assert report["policy"]["name"] == report["policy_choice"]["name"]


def test_evaluate_names_the_served_policy_and_latency_in_its_table(runs_file: Path) -> None:
    args = ["evaluate", "--data", str(runs_file), "--holdout", "A4000"]
    result = runner.invoke(
        app, [*args, "--n-estimators", "20", "--threads", "1"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    served = [line for line in result.output.splitlines() if "policy: " in line]
    assert len(served) == 1 and " latency" in served[0], result.output


def test_evaluate_refuses_an_unknown_holdout(runs_file: Path) -> None:
    result = runner.invoke(app, ["evaluate", "--data", str(runs_file), "--holdout", "T4"])
    assert result.exit_code != 0
    assert "no hardware matches 'T4'" in str(result.exception)


def test_train_writes_a_loadable_artifact(tmp_path: Path, runs_file: Path) -> None:
    out = tmp_path / "model.tpsm"
    result = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(runs_file),
            "--out",
            str(out),
            "--n-estimators",
            "20",
            "--threads",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    artifact = out.read_bytes()
    assert checksum(artifact) in result.output.replace("\n", "")
    assert ModelBundle.from_bytes(artifact).ops == ["convolution"]


def test_evaluate_works_on_a_kernel_no_code_names(tmp_path: Path) -> None:
    # Two catalog GPUs and one the catalog lacks (its spec is guessed from the name).
    for name in ("NVIDIA RTX A4000", "AMD Radeon PRO W7800", "NVIDIA Contoso X7"):
        gpu = spec_for(name, {"compute_units": 100} if "Contoso" in name else None).spec
        doc = stencil_cache_file(gpu, name, version="1.0.0")
        (tmp_path / f"{name.split()[-1]}.json").write_text(json.dumps(doc))
    args = ["evaluate", "--data", str(tmp_path), "--all", "--json", "--n-estimators", "10"]
    result = runner.invoke(app, [*args, "--threads", "1"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)["reports"]
    assert {r["op"] for r in reports} == {OP}
    assert len(reports) == 3 and "NVIDIA Contoso X7" in {r["holdout"] for r in reports}
    for report in reports:
        assert report["n_candidates"] == len(stencil_configurations())
        assert report["policy"]["score_at_5"] > report["baseline_random"]["score_at_5"]
