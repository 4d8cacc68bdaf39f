"""Worker processes on this machine, for `pack --workers` and `verify --workers`.

Spawned, not forked: a forked child of a process whose tokenizer has already run stays
single-threaded for good. Each worker's tokenizer threads are capped to its share of the CPUs, so N
workers do not start N thread pools the size of the machine. Results come back in input order, and
an error (or Ctrl-C) cancels the work still queued instead of waiting for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context
from typing import TypeVar

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")
THREAD_VARIABLES = ("RAYON_NUM_THREADS", "FASTOKENS_BPE_THREADS")  # tokenizers and fastokens read these


def thread_caps(threads: int) -> dict[str, str]:
    """Environment variables that cap both tokenizer libraries to ``threads`` threads."""
    return {name: str(threads) for name in THREAD_VARIABLES}


def map_in_processes(fn: Callable[[C, I], R], common: C, items: Iterable[I], workers: int) -> Iterator[R]:
    """``fn(common, item)`` for every item in ``workers`` worker processes; results in item order."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_cap_threads,
                               initargs=(threads,))
    try:
        yield from pool.map(fn, repeat(common), items)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _cap_threads(threads: int) -> None:
    os.environ.update(thread_caps(threads))  # read when the tokenizer first encodes, after this
