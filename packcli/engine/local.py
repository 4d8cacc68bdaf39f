"""The local engine: units, then shards, on this machine.

By default units run one after another in this process (the reference: `tokenizers` already uses
every core). With ``workers > 1`` units run in that many worker processes (`packcli.workers`): parsing and rendering are single-threaded Python, and the
fast backend's work after fastokens returns is mostly single-threaded too, so one process leaves
cores idle. Each worker holds its own tokenizer and batch, so memory grows with ``workers``; that is
why it is not the default. Results come back in unit order: the bytes do not depend on ``workers``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

from packcli.errors import PackcliError
from packcli.units import SpillLayout, SpillReader, UnitIndex, UnitJob, UnitSpec, run_unit
from packcli.workers import map_in_processes
from packcli.writing import ShardResult, ShardTask, write_shard_task


class LocalEngine:
    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise PackcliError(f"--workers must be at least 1, got {workers}")
        self.workers = workers or 1

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        count = min(self.workers, len(specs))
        units = (run_unit(job, spec) for spec in specs) if count <= 1 else map_in_processes(run_unit, job, specs, count)
        results = []
        for spec, unit in zip(specs, units):
            results.append(unit)
            on_done(spec)
        return results

    def write_shards(self, layout: SpillLayout, tasks: Sequence[ShardTask],
                     on_done: Callable[[ShardTask], None]) -> list[ShardResult]:
        results = []
        with SpillReader(layout) as reader:
            for task in tasks:
                results.append(write_shard_task(layout, task, reader))
                on_done(task)
        return results

