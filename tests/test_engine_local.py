"""`packcli.engine.local.LocalEngine`: how many processes a run gets, and results in input order from one process
(spawned workers: tests/test_engine_pool.py, tests/test_units.py)."""

from __future__ import annotations

import pytest

from packcli.engine.local import LocalEngine
from packcli.engine.pool import MIN_BYTES_PER_PROCESS
from packcli.engine.workload import Workload
from packcli.errors import PackcliError


def scaled(common: int, item: int) -> int:
    return common * item


def test_never_more_processes_than_units_and_auto_lets_the_input_size_decide():
    assert LocalEngine(4).processes(None) == 4
    assert LocalEngine(4).processes(Workload(units=2, input_bytes=1 << 40)) == 2
    assert LocalEngine(4).processes(Workload(units=0, input_bytes=0)) == 1
    small = Workload(units=8, input_bytes=MIN_BYTES_PER_PROCESS - 1)
    assert LocalEngine(4, auto=True).processes(small) == 1  # a small job runs here, at once
    assert LocalEngine(4).processes(small) == 4  # workers given: taken as given
    assert LocalEngine(4, auto=True).processes(Workload(8, 3 * MIN_BYTES_PER_PROCESS)) == 3


def test_map_in_this_process_returns_results_in_input_order_and_reports_each():
    seen = []
    engine = LocalEngine()
    with engine.session():
        assert engine.map(scaled, 10, [3, 1, 2], lambda item, result: seen.append((item, result))) == [30, 10, 20]
    assert sorted(seen) == [(1, 10), (2, 20), (3, 30)]
    assert engine.map(scaled, 2, [5], keep=False) == [None]  # outside a session: a pool for the call


def test_workers_are_checked_where_the_engine_is_made():
    with pytest.raises(PackcliError, match="`workers` must be an integer from 1 to 1,024, got 0"):
        LocalEngine(0)
