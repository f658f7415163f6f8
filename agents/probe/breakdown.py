"""Where the time of one probe went, reported with every run's rationale."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TimeBreakdown:
    """Milliseconds per phase of a probe, and the copies that its timing involved."""

    telemetry_ms: float = 0.0
    operands_ms: float = 0.0
    plan_ms: float = 0.0
    compile_ms: float = 0.0
    validation_ms: float = 0.0
    warmup_ms: float = 0.0
    capture_ms: float = 0.0
    sampling_ms: float = 0.0
    confirm_ms: float = 0.0
    copy_bytes: int = 0
    operand_copies: int = 1

    @property
    def probe_ms(self) -> float:
        """Probing once kernels exist: validation, warm-up, capture and sampling."""
        return (
            self.validation_ms
            + self.warmup_ms
            + self.capture_ms
            + self.sampling_ms
            + self.confirm_ms
        )

    def line(self) -> str:
        """Return the breakdown as one line of the run's rationale."""
        return (
            f"telemetry {self.telemetry_ms:.1f} ms, operands {self.operands_ms:.1f} ms, "
            f"plan {self.plan_ms:.1f} ms, compile {self.compile_ms:.1f} ms | probe "
            f"{self.probe_ms:.1f} ms = validation {self.validation_ms:.1f} + warm-up "
            f"{self.warmup_ms:.1f} + capture {self.capture_ms:.1f} + launches "
            f"{self.sampling_ms:.1f} + head-to-head {self.confirm_ms:.1f}; layout copies "
            f"{self.copy_bytes / 1e6:.1f} MB per launch"
            + (
                f"; cold cache: {self.operand_copies} operand copies in rotation"
                if self.operand_copies > 1
                else ""
            )
        )
