"""What an engine is: the `Engine` protocol every engine implements, the `Workload` it is sized by, and
the worker counts it takes (`worker_problems`).

Apart from `packcli.engine` (which picks an engine) so that the engines import it without importing
the module that imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from packcli.choices import EngineName

MAX_RAY_WORKERS = 100_000  # Ray tasks in flight: a typo's 10**9 would queue that many

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")


@dataclass(frozen=True)
class Workload:
    """What a run will hand an engine, known before any worker starts: how many units of work can run
    at once, and how many input bytes they read. An engine sizes its workers from it."""

    units: int
    input_bytes: int


class Engine(Protocol):
    name: str
    shares_paths: bool
    """Whether the workers see this process's files at the same paths, relative ones included (local
    processes do; a Ray worker may run on another node, or in another directory: give it absolute paths)."""

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


def worker_problems(workers: int | None, engine: EngineName | str = EngineName.local, *,
                    ray_address: str | None = None, shared_fs: bool = False) -> list[str]:
    """``--workers`` for ``engine`` (at most `MAX_LOCAL_WORKERS` processes on this machine, or
    `MAX_RAY_WORKERS` tasks in flight on a cluster), and the options only Ray reads. The one place
    every command and engine checks them."""
    from packcli.checks import int_problems
    from packcli.engine.pool import MAX_LOCAL_WORKERS

    local = str(getattr(engine, "value", engine)) == EngineName.local.value
    problems = int_problems("`workers`", workers, 1, MAX_LOCAL_WORKERS if local else MAX_RAY_WORKERS)
    if local and (ray_address or shared_fs):
        problems.append("`ray_address` and `shared_fs` need `engine='ray'`")
    return problems
