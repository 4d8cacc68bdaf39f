"""The local engine: units, then shards, on this machine.

Units, then shards, run in ``workers`` processes (`packcli.engine.pool.SharedPool`, held for the
session): this one, which already holds the tokenizer, and ``workers - 1`` spawned workers. With
``auto`` (``packcli pack`` without ``--workers``) ``workers`` is a ceiling and the run's size decides
(`packcli.engine.pool.auto_processes`): a small job never waits for workers it does not need. Never
more processes than units: a process without a unit would only cost its start-up.
Parsing and rendering are single-threaded Python and so is much of the fast backend's work after
fastokens returns, so one process leaves cores idle. Each worker holds its own tokenizer and batch
(about 0.8 GB with Qwen3). ``workers=1``, the default here (spawning processes from a library call
needs the caller's ``__main__`` guard), runs everything in this process; ``packcli pack`` defaults
to `packcli.engine.pool.default_workers`. Results come back in unit order: the bytes do not depend on
``workers``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from packcli.checks import raise_all
from packcli.engine.pool import SharedPool, auto_processes
from packcli.engine.workload import Workload, worker_problems

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")


class LocalEngine:
    name = "local"
    shares_paths = True

    def __init__(self, workers: int | None = None, *, auto: bool = False) -> None:
        raise_all(worker_problems(workers))
        self.workers = workers or 1
        self.auto = auto
        self._pool: SharedPool | None = None

    def processes(self, work: Workload | None) -> int:
        """The processes a session for ``work`` uses (this one included)."""
        if work is None:
            return self.workers
        if self.auto:
            return auto_processes(self.workers, units=work.units, input_bytes=work.input_bytes)
        return max(1, min(self.workers, work.units))

    @contextmanager
    def session(self, warm: Callable[[], None] | None = None, work: Workload | None = None) -> Iterator[None]:
        with SharedPool(self.processes(work), warm=warm) as self._pool:
            try:
                yield
            finally:
                self._pool = None

    def map(self, fn: Callable[[C, I], R], common: C, items: Sequence[I],
            on_done: Callable[[I, R], None] = lambda item, result: None, *, keep: bool = True) -> list[R | None]:
        with self._shared() as pool:
            return pool.map(fn, common, items, on_done, keep=keep)

    @contextmanager
    def _shared(self) -> Iterator[SharedPool]:
        """The session's pool, or (called outside a session) a pool for this call alone."""
        if self._pool is not None:
            yield self._pool
        else:
            with SharedPool(self.workers) as pool:
                yield pool
