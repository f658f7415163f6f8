"""`tps agent probe` on the CPU."""

import json

from typer.testing import CliRunner

from cli import app


def test_probe_json_has_the_documented_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "probe",
            "--shape",
            "32x24x16",
            "--dtype",
            "fp32",
            "--trans-b",
            "--device",
            "cpu",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"winner", "speedup_vs_default", "probe_ms", "compile_ms", "candidates"} <= set(data)
    assert data["problem"].startswith("GemmTunableOp_float_TN")
    first = data["candidates"][0]
    assert first["backend"] == "vendor-default" and first["valid"] and first["median_us"] > 0
    assert {"id", "backend", "params", "median_us", "valid"} <= set(first)


def test_probe_table_and_bad_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    runner = CliRunner()
    table = runner.invoke(
        app, ["agent", "probe", "--shape", "16x16x16", "--dtype", "fp32", "--device", "cpu"]
    )
    assert table.exit_code == 0 and "winner:" in table.stdout and "compile" in table.stdout
    bad = runner.invoke(app, ["agent", "probe", "--shape", "16x16", "--device", "cpu"])
    assert bad.exit_code == 2 and "Invalid value" in bad.output


def test_a_zero_dim_is_named_without_pydantic_noise():
    bad = CliRunner().invoke(app, ["agent", "probe", "--shape", "16x0x16", "--device", "cpu"])
    assert bad.exit_code == 2
    assert "dims.n: Input should be greater than 0" in " ".join(bad.output.split())
    assert "errors.pydantic.dev" not in bad.output and "input_value" not in bad.output
