"""Engines run a function over items on workers: ``with engine.session():`` then ``engine.map(fn, common,
items)``. ``pack`` hands them its units and shards (`packcli.job.units.run_unit`,
`packcli.job.write.write_shard_task`), ``verify`` and ``stats`` their units; an engine knows nothing
of what it runs (this package imports nothing from job/ or verify/). The local engine is the default
and the reference; the Ray engine runs the same functions on a cluster. Both return results in input
order, so the artifact (and the verify report) is the same whichever engine made it.

    local.py     this process and spawned workers (`pool.SharedPool`)
    ray.py       a Ray cluster (the ``ray`` extra, imported only when chosen)
    pool.py      the worker processes on this machine, shared by ``pack``, ``verify`` and ``stats``
    workload.py  the `Engine` protocol, the `Workload` an engine is sized by, the worker counts it takes
"""

from __future__ import annotations

from packcli.choices import EngineName
from packcli.engine.workload import Engine, Workload, worker_problems

__all__ = ["Engine", "Workload", "make_engine", "worker_problems"]


def make_engine(name: EngineName | str, *, workers: int | None = None, address: str | None = None,
                shared_fs: bool = False, shared: str = "`out`") -> Engine:
    """The engine ``--engine`` names; Ray is imported only when chosen. ``shared``: what workers on other
    nodes must reach at the same path (``--out DIR`` for pack, the sources for verify)."""
    from packcli.errors import PackcliError

    try:
        name = EngineName(name)
    except ValueError:
        raise PackcliError(f"`engine` must be one of {', '.join(e.value for e in EngineName)}, got {name!r}") from None
    if name is EngineName.local:
        from packcli.engine.local import LocalEngine
        from packcli.engine.pool import default_workers

        if workers is None:  # the input decides, up to one per CPU (`packcli.engine.pool.auto_processes`)
            return LocalEngine(workers=default_workers(), auto=True)
        return LocalEngine(workers=workers)
    from packcli.engine.ray import RayEngine

    return RayEngine(workers=workers, address=address, shared_fs=shared_fs, shared=shared)

