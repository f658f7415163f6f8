"""The decision rules of a probe, in one place, as TunableOp's FindFastest keeps them.

The engine measures; these functions decide: which offers make the shortlist, whether an
output is right, how much a tuned kernel must gain, and which candidate wins. They work on
numbers and candidates only, so a test drives every rule without a device or an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agents.ops.base import Check
from agents.probe.settings import ProbeSettings
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.schemas import Measurement, Telemetry

# Re-times the leader head to head with the default; returns its gain there, or None.
Confirm = Callable[[str], float | None]


@dataclass(frozen=True)
class Decision:
    """The winner of a probe (None when nothing was measured) and why it won."""

    winner_id: str | None
    rationale: str


def pick_shortlist(
    offers: Mapping[str, list[Candidate]], quota: Mapping[str, int], limit: int
) -> list[Candidate]:
    """Take each provider's quota of its best offers, then fill leftover slots in order."""
    chosen: list[Candidate] = []
    seen: set[str] = set()
    order = [b for b in quota if b in offers] + [b for b in offers if b not in quota]

    def take(backend: str, count: int) -> None:
        for c in offers[backend]:
            if count <= 0 or len(chosen) >= limit:
                return
            if c.id not in seen:
                chosen.append(c)
                seen.add(c.id)
                count -= 1

    for backend in order:
        take(backend, quota.get(backend, 0))
    for backend in order:
        take(backend, limit)
    return chosen


def validation_error(check: Check) -> str | None:
    """Return why an output fails validation (the candidate is then banned), or None."""
    return None if check.ok else f"wrong result: {check.reason()}"


@dataclass(frozen=True)
class Margin:
    """The gain a tuned kernel needs over the default, and the rules that raised it."""

    min_gain: float
    notes: tuple[str, ...] = ()


def required_margin(
    settings: ProbeSettings, *, default_us: float | None, thermal_safe: bool
) -> Margin:
    """Return the gain a tuned kernel must show: more on a hot device or a long kernel."""
    min_gain = settings.thermal_min_gain if thermal_safe else settings.min_gain
    long_kernel = default_us is not None and default_us >= settings.long_kernel_us
    if long_kernel:
        min_gain = max(min_gain, settings.long_kernel_min_gain)
    notes: list[str] = []
    if long_kernel:
        notes.append(
            f"default above {settings.long_kernel_us:.0f} us: a tuned kernel had to "
            f"win by {min_gain:.0%}"
        )
    if thermal_safe:
        notes.append(f"device above 85 C: a tuned kernel had to win by {min_gain:.0%}")
    return Margin(min_gain=min_gain, notes=tuple(notes))


def choose_winner(
    medians: Mapping[str, float],
    *,
    labels: Mapping[str, str],
    failed: int,
    min_gain: float,
    confirm: Confirm | None = None,
) -> Decision:
    """Pick the fastest valid candidate; keep the default unless the winner clearly beats it.

    `medians` holds the valid candidates' median µs by candidate id, `labels` their labels
    and `failed` counts the candidates that failed or were invalid. `confirm(best_id)`
    re-times the leader head to head with the default and returns its gain there; a leader
    that gains less than `min_gain` there does not win.
    """
    if not medians:
        return Decision(None, "no candidate produced a valid measurement")
    best = min(medians, key=medians.__getitem__)
    default = medians.get(VENDOR_DEFAULT.id)
    tail = f"{len(medians)} measured, {failed} failed or invalid"
    if default is None:
        return Decision(
            best, f"{labels[best]} fastest at {medians[best]:.2f} us; default unmeasured; {tail}"
        )
    if best != VENDOR_DEFAULT.id and medians[best] > default * (1 - min_gain):
        return Decision(
            VENDOR_DEFAULT.id,
            f"kept vendor-default {default:.2f} us: best {labels[best]} {medians[best]:.2f} us "
            f"is within {min_gain:.0%}; {tail}",
        )
    if best != VENDOR_DEFAULT.id and confirm is not None:
        gain = confirm(best)
        if gain is not None and gain < min_gain:
            return Decision(
                VENDOR_DEFAULT.id,
                f"kept vendor-default {default:.2f} us: {labels[best]} led the round robin at "
                f"{medians[best]:.2f} us but gained {gain:+.1%} head to head; {tail}",
            )
        if gain is not None:
            tail += f"; head to head {gain:+.1%}"
    speedup = default / medians[best]
    return Decision(
        best,
        f"{labels[best]} {medians[best]:.2f} us vs vendor-default {default:.2f} us "
        f"({speedup:.3f}x); {tail}",
    )


def decide(
    measurements: Sequence[Measurement],
    *,
    failed: int,
    settings: ProbeSettings,
    telemetry: Telemetry,
    confirm: Confirm | None = None,
) -> Decision:
    """Choose the winner of a probe under the margin its device and default call for."""
    medians = {
        m.candidate.id: m.median_us for m in measurements if m.valid and m.median_us is not None
    }
    labels = {m.candidate.id: m.candidate.label() for m in measurements}
    margin = required_margin(
        settings,
        default_us=medians.get(VENDOR_DEFAULT.id),
        thermal_safe=telemetry.thermal_safe,
    )
    decision = choose_winner(
        medians, labels=labels, failed=failed, min_gain=margin.min_gain, confirm=confirm
    )
    notes = list(margin.notes)
    if telemetry.delayed_ms:
        notes.append(f"waited {telemetry.delayed_ms:.0f} ms for a busy device")
    return Decision(decision.winner_id, "; ".join([decision.rationale, *notes]))
