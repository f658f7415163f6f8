"""Settings of the probe engine (the daemon's settings object carries one of these)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.probe.sampling import SamplingPolicy


class ProbeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    samples: int = Field(default=10, ge=3)
    min_samples: int = Field(default=5, ge=3)
    max_samples: int = Field(default=100, ge=3)
    cv_threshold: float = Field(default=0.15, gt=0)
    # Soft budget for the timed part of one probe; the ≤ 20 ms goal once kernels are compiled.
    budget_ms: float = Field(default=20.0, gt=0)
    max_extra_ms: float = Field(default=200.0, ge=0)
    # GPU time one sample should span, so that event resolution and launch gaps vanish.
    target_sample_us: float = Field(default=30.0, gt=0)
    max_reps: int = Field(default=64, ge=1)
    # A tuned choice must beat the vendor default by this fraction, else the default wins.
    min_gain: float = Field(default=0.01, ge=0)
    # Rounds of the leader against the default alone before a tuned kernel may win.
    confirm_rounds: int = Field(default=10, ge=0)
    thermal_min_gain: float = Field(default=0.05, ge=0)
    # Kernels this long run into the power limit: on the H200 the same kernel's median
    # moved by up to 10% between probes a few seconds apart, and leads of 2-5% reversed
    # when re-timed. Such a kernel must win by this much to replace the default.
    long_kernel_us: float = Field(default=500.0, gt=0)
    long_kernel_min_gain: float = Field(default=0.05, ge=0)
    # Cold-cache timing: rotate operand copies that together hold twice the L2.
    cold_cache: bool = False
    cold_max_copies: int = Field(default=32, ge=2)
    use_graphs: bool = True
    validate_outputs: bool = True
    seed: int = 0
    # How the op config's candidate count is shared among providers, in this order; the
    # slots a provider cannot fill go to the next ones.
    provider_quota: dict[str, int] = Field(
        default_factory=lambda: {
            "padded": 1,
            "cublaslt": 3,
            "hipblaslt": 3,
            "rocblas": 2,
            "triton": 3,
            "cpu-torch": 6,
            "cpu-numpy": 1,
            "torch-conv": 3,
            "im2col": 1,
            "layernorm-composite": 1,
        }
    )
    cublaslt_limit: int = Field(default=32, ge=1, le=256)

    def sampling(self) -> SamplingPolicy:
        return SamplingPolicy(
            samples=self.samples,
            min_samples=self.min_samples,
            max_samples=self.max_samples,
            cv_threshold=self.cv_threshold,
            budget_us=self.budget_ms * 1000.0,
            max_extra_us=self.max_extra_ms * 1000.0,
        )
