"""Day partitions of the raw measurements: created ahead of time, dropped past retention.

Dropping a day drops its raw measurements only: the aggregates that priors read
(`candidate_stats`) were folded at ingest and stay whole, and the runs stay as the ledger
that keeps ingest idempotent. Any replica may run this; an advisory lock makes the others
skip a round while one runs it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

MAINTENANCE_LOCK = 0x7470_735F_7061_72  # "tps_par"
DAYS_AHEAD = 7


@dataclass(frozen=True)
class Maintenance:
    created: int  # day partitions created
    dropped_rows: int  # measurements dropped with the expired days
    ran: bool = True  # False: another replica held the lock


def maintain_partitions(
    session: Session, *, today: date, retention_days: int | None, days_ahead: int = DAYS_AHEAD
) -> Maintenance:
    """Create the partitions of `today` and the next days; drop days past retention."""
    locked = session.execute(select(func.pg_try_advisory_xact_lock(MAINTENANCE_LOCK))).scalar()
    if not locked:
        return Maintenance(created=0, dropped_rows=0, ran=False)
    created = session.execute(
        text("SELECT tps_measurement_partitions(:first, :last)"),
        {"first": today, "last": today + timedelta(days=days_ahead)},
    ).scalar_one()
    dropped = 0
    if retention_days is not None:
        dropped = session.execute(
            text("SELECT tps_drop_measurement_partitions(:before)"),
            {"before": today - timedelta(days=retention_days)},
        ).scalar_one()
    return Maintenance(created=int(created), dropped_rows=int(dropped))


def utc_today() -> date:
    return datetime.now(UTC).date()


class PartitionMaintainer:
    """Run `maintain_partitions` now and then every `interval_s`, in a thread of the replica."""

    def __init__(
        self,
        session_factory: Callable[[], Session],
        *,
        retention_days: int | None,
        interval_s: float,
        today: Callable[[], date] = utc_today,
    ) -> None:
        self.session_factory = session_factory
        self.retention_days = retention_days
        self.interval_s = interval_s
        self.today = today

    def run_once(self) -> Maintenance:
        with self.session_factory() as session, session.begin():
            done = maintain_partitions(
                session, today=self.today(), retention_days=self.retention_days
            )
        if done.created or done.dropped_rows:
            log.info(
                "measurement partitions: %d created, %d rows dropped by retention",
                done.created,
                done.dropped_rows,
            )
        return done

    def start(self, stop: threading.Event) -> threading.Thread:
        def loop() -> None:
            while not stop.is_set():
                try:
                    self.run_once()
                except Exception:  # a replica keeps serving; the next round tries again
                    log.exception("measurement partition maintenance failed")
                stop.wait(self.interval_s)

        thread = threading.Thread(target=loop, name="tps-partitions", daemon=True)
        thread.start()
        return thread
