"""Engines run the two parallel stages of ``pack``: tokenizing units and writing shards. The local
engine is the default and the reference; the Ray engine schedules the same functions (`run_unit`,
`packcli.writing.write_shard_task`) on a cluster. Both return results in input order, so the
artifact is byte-identical whichever engine made it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from packcli.units import SpillLayout, UnitIndex, UnitJob, UnitSpec
from packcli.writing import ShardResult, ShardTask


class Engine(Protocol):
    name: str

    def session(self, warm: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """Hold whatever the engine needs (a Ray connection, worker processes) across both stages of one run.

        ``warm``: a picklable call each worker may run while it has nothing else to do (load the
        tokenizer); engines without long-lived workers ignore it.
        """
        ...

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        """Run every unit; return their indexes in ``specs`` order; call ``on_done`` as each finishes."""
        ...

    def write_shards(self, layout: SpillLayout, tasks: Sequence[ShardTask],
                     on_done: Callable[[ShardTask], None]) -> list[ShardResult]:
        """Write every shard; return the results in ``tasks`` order; call ``on_done`` as each is written."""
        ...


def make_engine(name: str, *, workers: int | None = None, address: str | None = None, out: str | None = None,
                shared_fs: bool = False) -> Engine:
    """The engine ``--engine`` names; Ray is imported only when chosen."""
    from packcli.errors import PackcliError

    if name == "local":
        from packcli.engine.local import LocalEngine
        from packcli.workers import default_workers

        return LocalEngine(workers=workers or default_workers())
    if name == "ray":
        from packcli.engine.ray import RayEngine

        return RayEngine(workers=workers, address=address, out=out, shared_fs=shared_fs)
    raise PackcliError(f"--engine must be local or ray, got {name!r}")
