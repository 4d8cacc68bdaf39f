"""The local engine: units, then shards, on this machine.

By default units run one after another in this process (the reference: `tokenizers` already uses
every core). With ``workers > 1`` units run in that many worker processes, each with its tokenizer's
threads capped to its share of the CPUs: parsing and rendering are single-threaded Python, and the
fast backend's work after fastokens returns is mostly single-threaded too, so one process leaves
cores idle. Each worker holds its own tokenizer and batch, so memory grows with ``workers``; that is
why it is not the default. Results come back in unit order: the bytes do not depend on ``workers``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from itertools import repeat
from multiprocessing import get_context

from packcli.errors import PackcliError
from packcli.units import SpillLayout, SpillReader, UnitIndex, UnitJob, UnitSpec, run_unit
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
        if count <= 1:
            results = []
            for spec in specs:
                results.append(run_unit(job, spec))
                on_done(spec)
            return results
        threads = max(1, (os.cpu_count() or 1) // count)
        # spawn, not fork: a forked child of a process whose tokenizer has run is single-threaded for good.
        pool = ProcessPoolExecutor(count, mp_context=get_context("spawn"), initializer=_cap_threads,
                                   initargs=(threads,))
        results = []
        try:
            for spec, unit in zip(specs, pool.map(run_unit, repeat(job), specs)):
                results.append(unit)
                on_done(spec)
        finally:  # on an error (a bad record under --on-error fail, Ctrl-C), do not wait for queued units
            pool.shutdown(wait=True, cancel_futures=True)
        return results

    def write_shards(self, layout: SpillLayout, tasks: Sequence[ShardTask],
                     on_done: Callable[[ShardTask], None]) -> list[ShardResult]:
        results = []
        with SpillReader(layout) as reader:
            for task in tasks:
                results.append(write_shard_task(layout, task, reader))
                on_done(task)
        return results


def _cap_threads(threads: int) -> None:
    """Both tokenizers read these when they first encode, which is after this runs in the worker."""
    os.environ["RAYON_NUM_THREADS"] = os.environ["FASTOKENS_BPE_THREADS"] = str(threads)
