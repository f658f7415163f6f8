"""Why a compiled model with the fleet's GEMMs trails max-autotune: kernels and searches.

Usage (device): python3 benchmarks/diag_compiled.py --model opt-350m --case decode-b32 --out F
Runs the case as `tps bench runtime --no-eager` does (default compile, max-autotune, host 1
searching under `compiled`, host 2 with the fleet's winners, host 2 with a shortlist of 3,
host 2 in max-autotune's mode), against the embedded service. Writes one JSON object: the
case's figures, each variant's kernel table (device time per forward), every GEMM search
inductor ran while compiling, and, per product, the kernel each variant's search ranked
first. Prints a short summary.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any


def main() -> None:
    from cli.bench_runtime import embedded_service
    from tools.bench.runtime import as_json, run_case

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="opt-350m")
    p.add_argument("--case", default="decode-b32")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    with embedded_service() as (url, token), tempfile.TemporaryDirectory() as tmp:
        result = as_json(
            run_case(
                args.model,
                args.case,
                device="cuda",
                workdir=Path(tmp),
                service=url,
                token=token,
                eager=False,
                profile=True,
                autotune=True,
            )
        )
    result["first_choices"] = first_choices(result["autotune"])
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(summary(result), indent=1))  # noqa: T201  (the script's output)


def first_choices(searches: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per product (op and inputs), what each variant's search ranked first, and how many."""
    by_product: dict[str, dict[str, Any]] = defaultdict(dict)
    for search in searches:
        product = f"{search['op']} {' '.join(search['inputs'])}"
        best = search["choices"][0] if search["choices"] else {}
        by_product[product][search["variant"]] = {
            "first": f"{best.get('template')} {best.get('description', '')[:120]}",
            "ms": best.get("ms"),
            "choices": len(search["choices"]),
            "extern_ms": next(
                (c["ms"] for c in search["choices"] if str(c.get("template")).startswith("aten")),
                None,
            ),
        }
    return dict(by_product)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k in result if k.endswith(("_ms", "_s", "_vs_max_autotune", "_searched"))]
    keys += [k for k in result if k.endswith(("_hits", "_lookups", "_served"))]
    devices = {name: t["device_us_per_forward"] for name, t in result["kernels"].items()}
    searches: dict[str, int] = defaultdict(int)
    for search in result["autotune"]:
        searches[search["variant"]] += 1
    return {
        "figures": {k: result[k] for k in keys if result[k] is not None},
        "device_us_per_forward": devices,
        "searches_by_variant": dict(searches),
        "notes": result["notes"],
    }


if __name__ == "__main__":
    main()
