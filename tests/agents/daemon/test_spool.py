"""The spool keeps every run until acknowledged, bounds its size, and survives damage."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agents.daemon.errors import SpoolCorruptError
from agents.daemon.spool import Spool, salvage_runs
from agents.daemon.status import read_status
from tests.agents.daemon.conftest import gemm, make_run


def test_runs_leave_only_when_acknowledged(spool: Spool) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 6)]
    spool.put(runs)

    batch = spool.peek(3)
    assert [r.run_id for r in batch] == [str(r.run_id) for r in runs[:3]]
    assert spool.depth() == 5  # peeking removes nothing

    spool.ack([r.seq for r in batch])
    assert spool.run_ids() == {str(r.run_id) for r in runs[3:]}
    assert spool.state()["pushed"] == 3


def test_same_run_spooled_twice_is_kept_once(spool: Spool) -> None:
    run = make_run(gemm(7))
    spool.put([run])
    spool.put([run])
    assert spool.depth() == 1


def test_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 13)]
    with Spool(tmp_path / "spool.sqlite", max_runs=5) as spool:
        dropped = sum(spool.put([run]) for run in runs)
        assert dropped == 7
        assert spool.run_ids() == {str(r.run_id) for r in runs[-5:]}

    status = read_status(tmp_path / "spool.sqlite")
    assert status.dropped == 7
    assert status.spool_depth == 5
    assert status.probed == 12


def test_runs_survive_reopening(tmp_path: Path) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 4)]
    with Spool(tmp_path / "spool.sqlite", max_runs=100) as spool:
        spool.put(runs)
    with Spool(tmp_path / "spool.sqlite", max_runs=100) as spool:
        assert spool.run_ids() == {str(r.run_id) for r in runs}


def test_damaged_body_is_quarantined_and_the_rest_served(spool: Spool) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 5)]
    spool.put(runs)
    damaged = str(runs[1].run_id)
    spool.conn.execute(
        "UPDATE runs SET body = replace(body, 'vendor-default', 'vendor-defaulX') WHERE run_id = ?",
        (damaged,),
    )

    served = {r.run_id for r in spool.peek(10)}
    assert served == {str(r.run_id) for r in runs} - {damaged}
    assert spool.state()["quarantined"] == 1


def _corrupt_at(path: Path, marker: bytes, *, length: int) -> None:
    raw = bytearray(path.read_bytes())
    start = raw.index(b'{"run_id":"' + marker)
    raw[start : start + length] = b"\xde\xad\xbe\xef" * (length // 4)
    path.write_bytes(bytes(raw))


def test_corrupt_spool_file_gives_a_clear_error_and_the_rest_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    runs = [make_run(gemm(m)) for m in range(1, 201)]
    with Spool(path, max_runs=1000) as spool:
        spool.put(runs)
    body_size = len(runs[0].model_dump_json())
    victim = str(runs[100].run_id)
    _corrupt_at(path, victim.encode(), length=4096)

    with pytest.raises(SpoolCorruptError, match="damaged.*recovered") as err:
        Spool(path, max_runs=1000).open_checked()
    moved = list(tmp_path.glob("spool.sqlite.corrupt-*"))
    assert len(moved) == 1 and str(moved[0]) in str(err.value)

    with Spool(path, max_runs=1000) as spool:
        recovered = spool.run_ids()
        state = spool.state()
    original = {str(r.run_id) for r in runs}
    assert recovered <= original
    # At most the runs overlapping the damaged 4 KiB are lost.
    assert len(recovered) >= len(runs) - (4096 // body_size + 2)
    assert victim not in recovered
    assert state["recovered"] == len(recovered)
    assert "damaged" in str(state["last_error"])
    assert read_status(path).last_error == state["last_error"]


def test_salvage_skips_runs_whose_bytes_are_damaged(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    runs = [make_run(gemm(m)) for m in range(1, 4)]
    with Spool(path, max_runs=100) as spool:
        spool.put(runs)
    raw = path.read_bytes()
    target = raw.index(str(runs[1].run_id).encode()) + 200
    # Damage that keeps the JSON valid: only the stored digest can tell.
    flipped = raw[:target] + bytes([raw[target] ^ 0x01]) + raw[target + 1 :]
    path.write_bytes(flipped)
    found = {str(r.run_id) for r in salvage_runs(path)}
    assert str(runs[1].run_id) not in found
    assert found == {str(runs[0].run_id), str(runs[2].run_id)}


def test_garbage_file_is_moved_aside_and_a_fresh_spool_started(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with Spool(path, max_runs=10) as spool:
        assert spool.depth() == 0
        assert "damaged" in str(spool.state()["last_error"])
    assert sqlite3.connect(path).execute("PRAGMA quick_check").fetchone()[0] == "ok"
