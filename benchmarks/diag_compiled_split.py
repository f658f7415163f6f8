"""Which of max-autotune's settings, beside its GEMM search, makes a compiled case faster.

Usage (device):
  python3 benchmarks/diag_compiled_split.py --model llama3-8b-8l --case decode-b1 --out F
Compiles cold (no inductor caches), against the embedded service:
- `max_autotune`: `mode="max-autotune-no-cudagraphs"`;
- `host1`: `tps_runtime.compiled`, inductor searches every GEMM and tunes every kernel, and
  TPS records both;
- then second hosts (`--hosts`), each with an empty cache, none of the others' kernels in
  memory and the fleet's GEMM winners (no GEMM search), compiled with: `gemm` (the GEMMs
  alone, `tune_kernels=False`), `coordesc` (`compiled`'s default: inductor's
  coordinate-descent tuning, each kernel's configuration served by the fleet), `pointwise`
  (`max_autotune`: several configurations of every pointwise and reduction kernel, no
  kernel tuning) and `mode` (both, max-autotune's own mode).
Times them side by side (60 rounds x 3 forwards) and profiles each (kernels, device time and
launches per forward). Writes one JSON object; prints the figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

# name: (inductor options, whether `compiled` tunes kernels through the fleet)
SECOND_HOSTS: dict[str, tuple[dict[str, Any], bool]] = {
    "gemm": ({"max_autotune_gemm": True}, False),
    # `debug: False` changes nothing but the option set: dynamo would serve `gemm`'s graph
    "coordesc": ({"max_autotune_gemm": True, "debug": False}, True),
    "pointwise": ({"max_autotune": True}, False),
    "mode": ({"max_autotune": True}, True),
}


def main() -> None:
    import torch
    import torch._inductor.config as inductor_config

    from agents import runtime as tps_runtime
    from cli.bench_runtime import embedded_service
    from tools.bench.runtime import (
        CASES,
        Clock,
        _host,
        _new_process_kernels,
        _sync,
        build_model,
        kernel_table,
    )

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama3-8b-8l")
    p.add_argument("--case", default="decode-b1")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--hosts", nargs="+", default=list(SECOND_HOSTS), choices=list(SECOND_HOSTS))
    args = p.parse_args()
    torch.manual_seed(0)
    model = build_model(args.model, device="cuda").to(dtype=torch.bfloat16)
    batch, tokens = CASES[args.case]
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), device="cuda")

    def forward(m: Any) -> Any:
        def run() -> Any:
            with torch.no_grad():
                return m(input_ids=ids, use_cache=False).logits

        return run

    variants: dict[str, Any] = {}
    compile_s: dict[str, float] = {}
    searched: dict[str, int] = {}

    def first_call(name: str, run: Any) -> None:
        start = time.perf_counter()
        run()
        _sync("cuda")
        compile_s[name] = round(time.perf_counter() - start, 2)
        variants[name] = run

    with (
        embedded_service() as (url, token),
        tempfile.TemporaryDirectory() as tmp,
        inductor_config.patch(force_disable_caches=True),
    ):
        work = Path(tmp)
        torch._dynamo.reset()
        first_call("compile", forward(torch.compile(copy.deepcopy(model))))
        first_call(
            "max_autotune",
            forward(torch.compile(copy.deepcopy(model), mode="max-autotune-no-cudagraphs")),
        )
        host1 = _host("cuda", work, "host1", url, token)
        run = forward(torch.compile(copy.deepcopy(model), options={"max_autotune_gemm": True}))
        with tps_runtime.compiled(host1) as fleet:
            first_call("host1", run)
        searched["host1"] = fleet.stats.searched
        host1.close()  # pushes the searches to the service
        for name in args.hosts:
            options, tune_kernels = SECOND_HOSTS[name]
            _new_process_kernels()  # a host of its own has none of the others' kernels
            host = _host("cuda", work, f"host2-{name}", url, token)
            # `dynamic=False` and a distinct option set: dynamo compiles each copy anew
            run = forward(torch.compile(copy.deepcopy(model), options={**options}, dynamic=False))
            with tps_runtime.compiled(host, tune_kernels=tune_kernels) as fleet:
                first_call(name, run)
            searched[name] = fleet.stats.searched
            host.close()
    times = Clock("cuda").side_by_side(variants)
    kernels = {name: kernel_table(run, "cuda") for name, run in variants.items()}
    reference = times["max_autotune"]
    result = {
        "model": args.model,
        "case": args.case,
        "torch": torch.__version__,
        "ms": {k: round(v, 4) for k, v in times.items()},
        "max_autotune_vs": {k: round(reference / v, 4) for k, v in times.items()},
        "compile_s": compile_s,
        "searched": searched,
        "device_us_per_forward": {k: t["device_us_per_forward"] for k, t in kernels.items()},
        "launches_per_forward": {k: t["launches_per_forward"] for k, t in kernels.items()},
        "kernels": kernels,
    }
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "kernels"}, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
