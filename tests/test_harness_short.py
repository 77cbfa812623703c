"""The load and fault harness in its short form (16 clients): the reliability targets that hold today.

``make soak`` runs the long form (64 clients) and prints the table of docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import MEMORY_SERVER

from memtap.harness.scenarios import disk_fault, kill_memtap, load, upstream_faults

# serial: the scenarios bound how late a call may be answered (a wall-clock bound), so `make pytest`
# runs them alone, after the rest of the suite, not beside another worker (pyproject.toml, Makefile).
pytestmark = [pytest.mark.anyio, pytest.mark.serial]

CLIENTS, CALLS = 16, 15


@pytest.mark.parametrize("durable", [False, True], ids=["default", "durable"])
async def test_mixed_load_of_16_clients_loses_and_duplicates_no_acknowledged_call(
    tmp_path: Path, durable: bool
) -> None:
    row = await load(tmp_path, clients=CLIENTS, calls=CALLS, durable=durable)
    assert (row.calls, row.acknowledged) == (CLIENTS * CALLS, CLIENTS * CALLS), row.notes
    assert (row.lost, row.duplicated, row.spilled, row.items_wrong) == (0, 0, 0, 0)
    assert (row.differences_before, row.differences) == (0, 0)


@pytest.mark.parametrize("durable", [False, True], ids=["default", "durable"])
async def test_sigkill_of_memtap_mid_load_loses_nothing_durable_and_a_bounded_window_by_default(
    tmp_path: Path, durable: bool
) -> None:
    row = await kill_memtap(tmp_path, clients=CLIENTS, calls=CALLS, durable=durable)
    assert row.faults == 1 and row.acknowledged >= CLIENTS * CALLS // 2
    assert row.acknowledged < row.calls  # the kill cut the load short
    assert row.duplicated == 0
    if durable:
        assert row.lost == 0, row.notes
    else:  # the documented bound: only calls acknowledged just before the kill (docs/reliability.md)
        assert row.loss_window_ms <= 1000, row.notes
    assert row.differences == 0  # after `memtap verify --record`


@pytest.mark.parametrize("durable", [False, True], ids=["default", "durable"])
@pytest.mark.parametrize("kind", ["disk full", "read-only"])
async def test_a_full_or_read_only_database_during_load_refuses_clearly_and_loses_no_acknowledged_call(
    tmp_path: Path, durable: bool, kind: str
) -> None:
    row = await disk_fault(tmp_path, clients=CLIENTS, calls=CALLS, durable=durable, kind=kind, hold_s=0.5)
    assert row.faults == 1 and row.calls == CLIENTS * CALLS
    assert row.acknowledged < row.calls, row.notes  # the fault was felt
    assert row.unclear == 0, row.notes
    assert (row.lost, row.duplicated) == (0, 0), row.notes
    assert row.items_wrong <= row.spilled  # an acknowledged write is in the trace or in the spill file
    assert row.differences == 0


async def test_wrapped_upstream_killed_and_hung_mid_load_answers_every_call_in_time_and_is_reconciled(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    row = await upstream_faults(tmp_path, clients=CLIENTS, calls=CALLS, memory_server=MEMORY_SERVER)
    assert row.faults == 3 and row.late == 0, row.notes
    assert row.acknowledged < row.calls  # calls failed while the upstream was down
    assert (row.lost, row.duplicated) == (0, 0)
    assert row.differences_before == 0  # the proxy's own reconciliation, without `memtap verify --record`
