"""The plan of a batch: one row per distinct device, problem and candidate."""

from __future__ import annotations

from services.profiler_api.ingest.plan import IngestPlan
from tests.factories import hardware_spec, probe_run
from tps.schemas import ProbeRunBatch


def _plan(runs: list) -> IngestPlan:
    return IngestPlan.from_batch(ProbeRunBatch(runs=runs), org_id=1)


def test_runs_on_one_device_share_its_row_whatever_their_software() -> None:
    old, new = hardware_spec(driver_version="570.1"), hardware_spec(driver_version="580.65")
    plan = _plan([probe_run(hardware=old), probe_run(hardware=new), probe_run(hardware=old)])
    assert list(plan.hardware) == [old.fingerprint()] == [new.fingerprint()]
    software = [planned.row[10] for planned in plan.runs.values()]
    assert ['"570.1"' in s for s in software] == [True, False, True]


def test_devices_that_differ_in_any_hardware_field_get_their_own_rows() -> None:
    whole, limited = hardware_spec(), hardware_spec(unit_limit=66)
    plan = _plan([probe_run(hardware=whole), probe_run(hardware=limited)])
    assert set(plan.hardware) == {whole.fingerprint(), limited.fingerprint()}
    assert [planned.row[3] for planned in plan.runs.values()] == [
        whole.fingerprint(),
        limited.fingerprint(),
    ]
