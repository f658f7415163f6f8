"""Problem keys: what a kernel computes, independent of how."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tps.bounds import NO_NUL, Key, NotText, preview

Dtype = Literal["bf16", "fp16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2", "fp64", "int8"]

DTYPE_BYTES: dict[str, int] = {
    "bf16": 2,
    "fp16": 2,
    "fp32": 4,
    "tf32": 4,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp64": 8,
    "int8": 1,
}

# Names PyTorch TunableOp gives the dtypes in its op signatures.
TUNABLEOP_DTYPE: dict[str, str] = {
    "bf16": "BFloat16",
    "fp16": "Half",
    "fp32": "float",
    "tf32": "float",
    "fp64": "double",
    "fp8_e4m3": "Float8_e4m3fn",
    "fp8_e5m2": "Float8_e5m2",
}


# Ops a user defines (a Kernel Tuner kernel, say) are named like identifiers and take up to
# MAX_FREE_DIMS dims of their own naming; the bounds keep keys, hashes and rows small.
OP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
DIM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class OpSpec(BaseModel):
    """The dims an op needs; a problem whose dims differ is rejected."""

    model_config = ConfigDict(frozen=True)

    name: str
    required_dims: tuple[str, ...]
    optional_dims: tuple[str, ...] = ()
    # User-defined ops name their own dims; any positive ints are accepted.
    free_dims: bool = False


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(name="gemm", required_dims=("m", "n", "k"), optional_dims=("batch",)),
        OpSpec(
            name="conv2d",
            required_dims=("n", "c", "h", "w", "k", "r", "s"),
            optional_dims=("stride", "pad", "dilation", "groups"),
        ),
        OpSpec(name="layernorm", required_dims=("rows", "cols")),
        OpSpec(name="add", required_dims=("numel",)),
    )
}


def dims_doc() -> str:
    """Return the dims each op takes, in words (the OpenAPI description of `dims`)."""
    words = []
    for spec in OPS.values():
        if spec.free_dims:
            words.append(f"{spec.name}: its own named dims")
            continue
        optional = f" (optional {', '.join(spec.optional_dims)})" if spec.optional_dims else ""
        words.append(f"{spec.name}: {', '.join(spec.required_dims)}{optional}")
    return "positive ints named per op; " + "; ".join(words)


MAX_DIM = 2**31 - 1  # what BLAS and torch index with; also keeps products far from overflow
MAX_FREE_DIMS = 8  # of a user-defined op
MAX_DIMS = 16  # of any op (conv2d names 11)
Dim = Annotated[int, Field(gt=0, le=MAX_DIM), NotText]
Stride = Annotated[int, Field(ge=0, le=2**62), NotText]


def _dims_schema() -> dict[str, Any]:
    """Publish in the JSON schema which op takes which dims, as `if op then dims` clauses."""
    clauses: list[dict[str, Any]] = []
    for spec in OPS.values():
        if spec.free_dims:
            continue
        names = spec.required_dims + spec.optional_dims
        clauses.append(
            {
                "if": {"properties": {"op": {"const": spec.name}}, "required": ["op"]},
                "then": {
                    "properties": {
                        "dims": {
                            "required": list(spec.required_dims),
                            "propertyNames": {"enum": list(names)},
                        }
                    }
                },
            }
        )
    builtin = sorted(name for name, spec in OPS.items() if not spec.free_dims)
    clauses.append(
        {  # a user-defined op names its own dims
            "if": {"properties": {"op": {"not": {"enum": builtin}}}, "required": ["op"]},
            "then": {
                "properties": {
                    "dims": {
                        "propertyNames": {"pattern": DIM_NAME.pattern},
                        "maxProperties": MAX_FREE_DIMS,
                    }
                }
            },
        }
    )
    return {"allOf": clauses}


def _problem_schema(schema: dict[str, Any]) -> None:
    # Built-in ops and user-defined ones (a Kernel Tuner kernel, say) share one name rule.
    schema["properties"]["op"]["pattern"] = OP_NAME.pattern
    schema.update(_dims_schema())


def op_spec(name: str) -> OpSpec:
    """Return the spec of a built-in op, or of a user-defined op with free dims.

    Raises ValueError for a name that is neither built in nor a valid op name.
    """
    spec = OPS.get(name)
    if spec is not None:
        return spec
    if not OP_NAME.match(name):
        raise ValueError(
            f"op {preview(name)} is not a built-in op ({', '.join(sorted(OPS))}) nor a valid "
            "user-defined op name (a lowercase letter, then up to 63 of a-z, 0-9, _)"
        )
    return OpSpec(name=name, required_dims=(), free_dims=True)


def is_builtin(name: str) -> bool:
    """Return whether `name` is an op with dims of its own (not a user-defined one)."""
    return name in OPS and not OPS[name].free_dims


class ProblemKey(BaseModel):
    """One problem: op, dtype, dims and layout.

    GEMM follows torch's row-major view: C[M, N] = op(A)[M, K] @ op(B)[K, N], with
    `trans_b=True` meaning B is stored [N, K] as in `nn.Linear`. Leading dimensions
    default to the packed layout.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_problem_schema)

    op: str = Field(min_length=1, max_length=64)
    dtype: Dtype = "fp32"
    dims: dict[Key, Dim] = Field(
        min_length=1,
        max_length=MAX_DIMS,
        json_schema_extra={"additionalProperties": False},
        description=dims_doc(),
        examples=[{"m": 4096, "n": 4096, "k": 4096}, {"rows": 8192, "cols": 4096}],
    )
    trans_a: bool = Field(default=False, strict=True)
    trans_b: bool = Field(default=False, strict=True)
    lda: Dim | None = None
    ldb: Dim | None = None
    ldc: Dim | None = None
    stride_a: Stride | None = None
    stride_b: Stride | None = None
    stride_c: Stride | None = None
    # Extra descriptors of imported kernels (e.g. the Kernel Tuner kernel name).
    variant: str = Field(default="", max_length=128, pattern=NO_NUL)

    @field_validator("op")
    @classmethod
    def _known_op(cls, op: str) -> str:
        op_spec(op)  # built in, or a valid name of a user-defined op
        return op

    @model_validator(mode="after")
    def _dims_fit_op(self) -> ProblemKey:
        spec = op_spec(self.op)
        for name, value in self.dims.items():
            if value <= 0:
                raise ValueError(f"dims.{name} must be positive, got {value}")
            if value > MAX_DIM:
                raise ValueError(f"dims.{name} must be at most {MAX_DIM}, got {value}")
        if not spec.free_dims:
            missing = [d for d in spec.required_dims if d not in self.dims]
            unknown = [d for d in self.dims if d not in spec.required_dims + spec.optional_dims]
            if missing:
                raise ValueError(f"op {self.op!r} needs dims {missing}, missing from dims")
            if unknown:
                raise ValueError(f"op {self.op!r} takes no dims {unknown}")
        else:
            self._check_free_dims()
        if self.op == "gemm":
            self._check_gemm_layout()
        return self

    def _check_free_dims(self) -> None:
        if not self.dims:
            raise ValueError(f"op {self.op!r} needs at least one dim")
        if len(self.dims) > MAX_FREE_DIMS:
            raise ValueError(
                f"op {self.op!r} takes at most {MAX_FREE_DIMS} dims, got {len(self.dims)}"
            )
        bad = [name for name in self.dims if not DIM_NAME.match(name)]
        if bad:
            raise ValueError(
                f"dims {bad} of op {self.op!r}: a dim name is a lowercase letter, "
                "then up to 31 of a-z, 0-9, _"
            )

    def _check_gemm_layout(self) -> None:
        lda_min, ldb_min, ldc_min = self._packed_lds()
        for name, given, least in (
            ("lda", self.lda, lda_min),
            ("ldb", self.ldb, ldb_min),
            ("ldc", self.ldc, ldc_min),
        ):
            if given is not None and given < least:
                raise ValueError(f"{name}={given} is smaller than the row length {least}")
            if given == least:
                # A packed leading dimension is the default: one problem, one key.
                object.__setattr__(self, name, None)

    def _packed_lds(self) -> tuple[int, int, int]:
        m, n, k = self.dims["m"], self.dims["n"], self.dims["k"]
        lda = m if self.trans_a else k  # A stored [K, M] when transposed, else [M, K]
        ldb = k if self.trans_b else n  # B stored [N, K] when transposed, else [K, N]
        return lda, ldb, n

    @property
    def gemm_lds(self) -> tuple[int, int, int]:
        """Return (lda, ldb, ldc) in torch's row-major convention, packed where unset."""
        lda, ldb, ldc = self._packed_lds()
        return (self.lda or lda, self.ldb or ldb, self.ldc or ldc)

    @property
    def batch(self) -> int:
        return self.dims.get("batch", 1)

    def canonical(self) -> str:
        """Return the canonical string; for GEMM it is PyTorch TunableOp's signature pair."""
        if self.op == "gemm":
            op_sig, params_sig = self.tunableop_signature()
            suffix = f"_b{self.batch}" if self.batch > 1 else ""
            strides = ""
            if self.stride_a is not None or self.stride_b is not None or self.stride_c is not None:
                strides = f"_s{self.stride_a}_{self.stride_b}_{self.stride_c}"
            tf32 = "_tf32" if self.dtype == "tf32" else ""
            return f"{op_sig},{params_sig}{suffix}{strides}{tf32}"
        dims = "_".join(f"{k}{v}" for k, v in sorted(self.dims.items()))
        variant = f"[{self.variant}]" if self.variant else ""
        return f"{self.op}{variant}_{self.dtype},{dims}"

    def tunableop_signature(self) -> tuple[str, str]:
        """Return TunableOp's (op signature, params signature) for this GEMM.

        TunableOp records the column-major BLAS call that torch makes for the
        row-major product: C^T = op(B)^T op(A)^T, so BLAS m is our N and n is our M.
        """
        if self.op != "gemm":
            raise ValueError("only GEMM problems have a TunableOp signature")
        m, n, k = self.dims["m"], self.dims["n"], self.dims["k"]
        lda, ldb, ldc = self.gemm_lds
        blas_ta = "t" if self.trans_b else "n"
        blas_tb = "t" if self.trans_a else "n"
        kind = "GemmStridedBatchedTunableOp" if self.batch > 1 else "GemmTunableOp"
        dtype = TUNABLEOP_DTYPE.get(self.dtype, self.dtype)
        op_sig = f"{kind}_{dtype}_{(blas_ta + blas_tb).upper()}"
        params = f"{blas_ta}{blas_tb}_{n}_{m}_{k}_ld_{ldb}_{lda}_{ldc}"
        return op_sig, params

    @classmethod
    def from_tunableop(cls, op_signature: str, params_signature: str) -> ProblemKey:
        """Parse a TunableOp (op, params) signature pair back into a GEMM problem."""
        parts = op_signature.split("_")
        if len(parts) < 3 or not parts[0].startswith("Gemm"):
            raise ValueError(f"not a TunableOp GEMM signature: {op_signature!r}")
        tn = parts[-1].lower()
        dtype_name = "_".join(parts[1:-1])
        by_name = {v: k for k, v in TUNABLEOP_DTYPE.items() if k != "tf32"}
        if dtype_name not in by_name:
            raise ValueError(f"unsupported TunableOp dtype {dtype_name!r}")
        fields = params_signature.split("_")
        try:
            trans = fields[0]
            blas_m, blas_n, k = (int(x) for x in fields[1:4])
            lds = None
            if len(fields) >= 8 and fields[4] == "ld":
                lds = tuple(int(x) for x in fields[5:8])
        except (ValueError, IndexError) as exc:
            raise ValueError(f"bad TunableOp params signature {params_signature!r}") from exc
        if trans != tn:
            raise ValueError(f"transposes disagree: {op_signature!r} vs {params_signature!r}")
        dims = {"m": blas_n, "n": blas_m, "k": k}
        extra: dict[str, int] = {}
        if lds is not None:
            ldb, lda, ldc = lds
            extra = {"lda": lda, "ldb": ldb, "ldc": ldc}
        return cls(
            op="gemm",
            dtype=by_name[dtype_name],
            dims=dims,
            trans_a=trans[1] == "t",
            trans_b=trans[0] == "t",
            **extra,
        )

    def key_hash(self) -> str:
        """Return a stable 16-hex-digit hash of the canonical form."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def flops(self) -> float:
        """Return the floating-point operations of one GEMM (0 for other ops)."""
        if self.op != "gemm":
            return 0.0
        d = self.dims
        return 2.0 * d["m"] * d["n"] * d["k"] * self.batch
