import gzip
import json
from pathlib import Path

import httpx
import pytest

from cli.model import push_runs, write_jsonl
from models.data_files import load_runs
from models.kernel_tuner import KernelTunerImportError, import_cache, import_file, op_of
from tps.catalog import resolve


def small_cache(device_name: str = "", *, kernel: str = "convolution_kernel") -> dict:
    record = {
        "block_size_x": 32, "block_size_y": 2, "time": 0.5, "times": [0.4, 0.5, 0.6],
        "compile_time": 700.0, "benchmark_time": 20.0, "timestamp": "2025-04-03 07:09:19+00:00",
    }  # fmt: skip
    return {
        "device_name": device_name,
        "kernel_name": kernel,
        "problem_size": [4096, 4096],
        "tune_params_keys": ["block_size_x", "block_size_y"],
        "cache": {
            "32,2": record,
            "64,2": {**record, "block_size_x": 64, "time": "RuntimeFailedConfig", "times": []},
            "16,1": {
                **record,
                "block_size_x": 16,
                "block_size_y": 1,
                "time": 0.25,
                "times": [0.25, 0.25],
            },  # fmt: skip
        },
    }


def write(path: Path, doc: dict) -> Path:
    raw = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(raw) if path.name.endswith(".gz") else raw)
    return path


def test_a_real_cache_becomes_one_probe_run(kernel_tuner_dir: Path) -> None:
    run = import_file(kernel_tuner_dir / "convolution_milo" / "A100.json.gz")
    assert run.hardware == resolve("NVIDIA A100-PCIE-40GB")
    assert run.problem.op == "convolution"
    assert run.problem.dims == {"x": 4096, "y": 4096}
    assert run.problem.variant == "convolution_kernel"
    assert len(run.measurements) == 4362
    failed = [m for m in run.measurements if not m.valid]
    assert len(failed) == 161  # 155 runtime and 6 compilation failures
    assert {m.error for m in failed} == {"RuntimeFailedConfig", "CompilationFailedConfig"}
    assert all(m.median_us is None for m in failed)
    first = run.measurements[0]
    assert first.candidate.backend == "kernel_tuner"
    assert first.candidate.params["block_size_x"] == 16
    assert first.samples == 32
    assert 3800 < first.median_us < 4000  # 3.87 ms in the file
    assert first.p10_us <= first.median_us <= first.p90_us
    winner = min((m for m in run.measurements if m.valid), key=lambda m: m.median_us)
    assert run.winner_id == winner.candidate.id


def test_failed_configs_are_invalid_and_times_convert_to_us(tmp_path: Path) -> None:
    run = import_file(write(tmp_path / "x.json", small_cache("NVIDIA RTX A6000")))
    by_x = {m.candidate.params["block_size_x"]: m for m in run.measurements}
    assert not by_x[64].valid and by_x[64].error == "RuntimeFailedConfig"
    assert by_x[32].median_us == pytest.approx(500.0)
    assert by_x[32].std_us == pytest.approx(81.65, rel=1e-3)
    assert run.winner_id == by_x[16].candidate.id


def test_empty_device_name_falls_back_to_the_file_stem(tmp_path: Path) -> None:
    run = import_file(write(tmp_path / "MI250X.json.gz", small_cache("")))
    assert run.hardware.name == "AMD Instinct MI250X"
    overridden = import_file(tmp_path / "MI250X.json.gz", device="W7900")
    assert overridden.hardware.name == "AMD Radeon PRO W7900"


def test_run_ids_are_deterministic(tmp_path: Path) -> None:
    doc = small_cache("NVIDIA RTX A4000")
    a = import_file(write(tmp_path / "a.json", doc))
    again = import_file(tmp_path / "a.json")
    zipped = import_file(write(tmp_path / "b.json.gz", doc))
    assert a.run_id == again.run_id == zipped.run_id
    doc["cache"]["32,2"]["time"] = 0.45
    assert import_file(write(tmp_path / "c.json", doc)).run_id != a.run_id


def test_any_kernel_becomes_a_user_defined_op(tmp_path: Path) -> None:
    run = import_file(write(tmp_path / "k.json", small_cache("W7800", kernel="Stencil3D_kernel")))
    assert run.problem.op == "stencil3d" and run.problem.variant == "Stencil3D_kernel"
    # A kernel named like a built-in op keeps clear of its dims.
    gemm = import_file(write(tmp_path / "g.json", small_cache("W7800", kernel="gemm")))
    assert gemm.problem.op == "kt_gemm" and gemm.problem.dims == {"x": 4096, "y": 4096}
    assert op_of("3x3 conv<float, 16>") == "k_3x3_conv_float_16"


def test_a_device_missing_from_the_catalog_gets_a_guessed_spec(tmp_path: Path) -> None:
    path = write(tmp_path / "Voodoo.json", small_cache("NVIDIA RTX A5500"))
    imported = import_cache(path, hardware={"compute_units": 80, "l2_bytes": 6 * 2**20})
    spec = imported.hardware.spec
    assert spec.name == "NVIDIA RTX A5500" and spec.vendor == "nvidia"
    assert spec.compute_units == 80  # given fields win over guesses
    assert "compute_units" not in imported.hardware.guessed
    assert {"arch", "mem_bandwidth_gbs", "peak_tflops"} <= set(imported.hardware.guessed)
    assert imported.hardware.basis in {"NVIDIA RTX A4000", "NVIDIA RTX A6000"}
    assert "guessed" in (imported.run.rationale or "")
    whole = import_cache(path, hardware=spec.model_dump())
    assert whole.hardware.guessed == () and whole.run.hardware == spec
    # A catalog device guesses nothing.
    assert import_cache(write(tmp_path / "A4000.json", small_cache(""))).hardware.guessed == ()


def test_t4_results_files_import_with_the_kernel_named(tmp_path: Path) -> None:
    legacy = small_cache("NVIDIA RTX A6000")
    results = []
    for record in legacy["cache"].values():
        failed = isinstance(record["time"], str)
        results.append({
            "timestamp": record["timestamp"],
            "configuration": {k: record[k] for k in legacy["tune_params_keys"]},
            "times": {"compilation": 700.0, "runtimes": record["times"]},
            "invalidity": "runtime" if failed else "correct",
            "correctness": 0 if failed else 1,
            "measurements": [{"name": "time", "value": record["time"], "unit": ""}],
            "objectives": ["time"],
        })  # fmt: skip
    doc = {"schema_version": "1.0.0", "metadata": {"timeunit": "miliseconds"}, "results": results}
    path = write(tmp_path / "t4.json", doc)
    with pytest.raises(KernelTunerImportError, match="--kernel"):
        import_cache(path, device="A6000")
    t4 = import_cache(path, device="A6000", kernel="convolution_kernel", problem_size="4096x4096")
    cache = import_file(write(tmp_path / "cache.json", legacy))
    assert t4.run.problem == cache.problem
    medians = {m.candidate.id: (m.valid, m.median_us) for m in t4.run.measurements}
    assert medians == {m.candidate.id: (m.valid, m.median_us) for m in cache.measurements}
    assert t4.run.winner_id == cache.winner_id


def test_versioned_and_unfinished_cache_files_import(tmp_path: Path) -> None:
    doc = {**small_cache("A4000"), "schema_version": "1.1.0", "objective": "time"}
    versioned = import_file(write(tmp_path / "v.json", doc))
    assert len(versioned.measurements) == 3
    # A session still tuning has written records but not the closing braces.
    text = json.dumps(small_cache("A4000"))
    assert text.endswith("}}}")
    text = text[:-2] + ",\n"
    (tmp_path / "open.json").write_text(text)
    assert len(import_file(tmp_path / "open.json").measurements) == 3
    (tmp_path / "bad.json").write_text('{"cache": {"1": {"time": 0.5}, "2": tru')
    with pytest.raises(KernelTunerImportError, match="not JSON"):
        import_file(tmp_path / "bad.json")


def test_probe_run_jsonl_round_trips_through_the_loader(tmp_path: Path) -> None:
    run = import_file(write(tmp_path / "W6600.json", small_cache("")))
    (tmp_path / "runs").mkdir()
    write_jsonl([run, run], tmp_path / "runs" / "runs.jsonl.gz")
    loaded = load_runs([tmp_path / "runs"])
    assert [r.run_id for r in loaded] == [run.run_id] * 2
    assert loaded[0] == run


def test_push_sends_gzipped_batches_with_the_token(tmp_path: Path) -> None:
    run = import_file(write(tmp_path / "A4000.json", small_cache("")))
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(gzip.decompress(request.content))
        n = sum(len(r["measurements"]) for r in body["runs"])
        accepted = len(body["runs"])
        return httpx.Response(200, json={"accepted": accepted, "duplicates": 0, "measurements": n})

    result = push_runs(
        [run], url="http://tps.test/", token="s3cret", transport=httpx.MockTransport(handler)
    )
    assert (result.accepted, result.duplicates, result.measurements) == (1, 0, 3)
    assert seen[0].url.path == "/v1/probe-runs"
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert seen[0].headers["content-encoding"] == "gzip"


@pytest.mark.slow
def test_database_import_is_idempotent(tmp_path: Path, migrated_database_url: str) -> None:
    from cli.model import ingest_into_database

    run = import_file(write(tmp_path / "A6000.json", small_cache("")))
    first = ingest_into_database([run], database_url=migrated_database_url, org="kt-test")
    again = ingest_into_database([run], database_url=migrated_database_url, org="kt-test")
    assert (first.accepted, first.measurements) == (1, 3)
    assert (again.accepted, again.duplicates) == (0, 1)
