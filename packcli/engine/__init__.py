"""Engines run the parallel stages of ``pack`` (tokenizing units, writing shards) and of ``verify``
(re-tokenizing units). The local engine is the default and the reference; the Ray engine schedules
the same functions (`packcli.job.units.run_unit`, `packcli.job.write.write_shard_task`,
`packcli.verify.reconstruct.unit_outcomes`) on a cluster. Both return results in input order, so the
artifact (and the verify report) is the same whichever engine made it.

    local.py  this process and spawned workers (`pool.SharedPool`)
    ray.py    a Ray cluster (the ``ray`` extra, imported only when chosen)
    pool.py   the worker processes on this machine, shared by ``pack`` and ``verify``
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from packcli.choices import EngineName

if TYPE_CHECKING:  # the job package imports this protocol; the engines import the job's functions
    from packcli.job.spill import SpillLayout
    from packcli.job.units import UnitIndex, UnitJob, UnitSpec
    from packcli.job.write import ShardResult, ShardTask

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")


@dataclass(frozen=True)
class Workload:
    """What a run will hand an engine, known before any worker starts: how many units of work can run
    at once, and how many input bytes they read. An engine sizes its workers from it."""

    units: int
    input_bytes: int


class Engine(Protocol):
    name: str

    def session(self, warm: Callable[[], None] | None = None,
                work: Workload | None = None) -> AbstractContextManager[None]:
        """Hold whatever the engine needs (a Ray connection, worker processes) across both stages of one run.

        ``warm``: a picklable call each worker may run while it has nothing else to do (load the
        tokenizer); engines without long-lived workers ignore it. ``work``: the run's size, from which
        an engine may start fewer workers than it would for a large run (None: as many as it is given).
        """
        ...

    def map(self, fn: Callable[[C, I], R], common: C, items: Sequence[I],
            on_done: Callable[[I, R], None] = ..., *, keep: bool = True) -> list[R | None]:
        """``fn(common, item)`` for every item on the engine's workers (``fn`` a module-level function, ``common``
        and the items picklable); results in ``items`` order; ``on_done(item, result)`` as each finishes.
        Without ``keep`` the results are handed only to ``on_done`` and the list holds None for each."""
        ...

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        """Run every unit; return their indexes in ``specs`` order; call ``on_done`` as each finishes."""
        ...

    def write_shards(self, layout: SpillLayout, tasks: Sequence[ShardTask],
                     on_done: Callable[[ShardTask], None]) -> list[ShardResult]:
        """Write every shard; return the results in ``tasks`` order; call ``on_done`` as each is written."""
        ...


def make_engine(name: EngineName | str, *, workers: int | None = None, address: str | None = None,
                shared_fs: bool = False, shared: str = "--out") -> Engine:
    """The engine ``--engine`` names; Ray is imported only when chosen. ``shared``: what workers on other
    nodes must reach at the same path (``--out DIR`` for pack, the sources for verify)."""
    from packcli.errors import PackcliError

    try:
        name = EngineName(name)
    except ValueError:
        raise PackcliError(f"--engine must be one of {', '.join(e.value for e in EngineName)}, got {name!r}") from None
    if name is EngineName.local:
        from packcli.engine.local import LocalEngine
        from packcli.engine.pool import default_workers

        if workers is None:  # the input decides, up to one per CPU (`packcli.engine.pool.auto_processes`)
            return LocalEngine(workers=default_workers(), auto=True)
        return LocalEngine(workers=workers)
    from packcli.engine.ray import RayEngine

    return RayEngine(workers=workers, address=address, shared_fs=shared_fs, shared=shared)
