"""`packcli.engine.workload.worker_problems`: the one check of ``workers`` and the options only Ray reads."""

from __future__ import annotations

import pytest

from packcli.choices import EngineName
from packcli.engine.workload import MAX_RAY_WORKERS, worker_problems


@pytest.mark.parametrize(("workers", "engine", "said"), [
    (None, "local", []),
    (1024, EngineName.local, []),
    (1025, "local", ["`workers` must be an integer from 1 to 1,024, got 1025"]),
    (1025, "ray", []),  # tasks in flight on a cluster, not processes here
    (MAX_RAY_WORKERS + 1, "ray", [f"`workers` must be an integer from 1 to {MAX_RAY_WORKERS:,}, got 100001"]),
    (2.0, "local", ["`workers` must be an integer from 1 to 1,024, got 2.0"]),
    (True, "local", ["`workers` must be an integer from 1 to 1,024, got True"]),
])
def test_the_worker_count_each_engine_takes(workers, engine, said):
    assert worker_problems(workers, engine) == said


def test_the_ray_options_need_the_ray_engine():
    assert worker_problems(2, "local", ray_address="auto") == ["`ray_address` and `shared_fs` need `engine='ray'`"]
    assert worker_problems(2, "local", shared_fs=True) == ["`ray_address` and `shared_fs` need `engine='ray'`"]
    assert worker_problems(2, "ray", ray_address="auto", shared_fs=True) == []
