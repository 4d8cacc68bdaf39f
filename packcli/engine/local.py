"""The local engine: units, then shards, one after another in this process (the tokenizer uses every core)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

from packcli.units import SpillLayout, SpillReader, UnitIndex, UnitJob, UnitSpec, run_unit
from packcli.writing import ShardResult, ShardTask, write_shard_task


class LocalEngine:
    name = "local"

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        results = []
        for spec in specs:
            results.append(run_unit(job, spec))
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
