"""Worker processes on this machine, for `pack --workers` and `verify --workers`.

`SharedPool` makes this process one of the workers: it starts on the first item at once, with the
tokenizer it has already loaded, while the others start up (about 5 s each: imports and a
tokenizer load). Spawned, not forked: a forked child of a process whose tokenizer has already run stays
single-threaded for good. Each worker's tokenizer threads are capped to its share of the CPUs, so N
workers do not start N thread pools the size of the machine. Results come back in input order; an
error stops the handing out, so only the items already started are waited for. An interrupt (Ctrl-C,
SIGTERM: a KeyboardInterrupt here) waits for nothing: the workers are terminated, so none outlives
the command. Workers ignore SIGINT themselves (Ctrl-C reaches the whole process group): this process
decides; and since a worker only ignores it once its initializer runs, workers are started with SIGINT
blocked (a mask the child inherits), so a Ctrl-C while one is still importing does not print its
traceback over the command's one line. A worker whose parent is gone (killed with SIGKILL, which no shutdown code sees) leaves
within a second.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from typing import TypeVar

from packcli.errors import WorkerError

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")
THREAD_VARIABLES = ("RAYON_NUM_THREADS", "FASTOKENS_BPE_THREADS")  # tokenizers and fastokens read these
WORKER_MEMORY = 1 << 30  # what one more worker may take (a Qwen3-sized tokenizer in both libraries and a batch)
# Input one more process must have to itself before it is started: a worker's start-up (imports and
# a tokenizer load, seconds, on a core the others share) must buy more than it costs. See
# docs/benchmarks-pipeline.md ("Small jobs") for the measurements behind it.
MIN_BYTES_PER_PROCESS = 16 << 20
MAX_LOCAL_WORKERS = 1024  # processes on one machine: a typo's 10**9 would start handing out warm-up calls


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one, else all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers() -> int:
    """``--workers`` when not given: the CPUs this process may use, at most one per GiB of available memory."""
    cpus = usable_cpus()
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            available = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):  # not Linux: CPUs alone
        return cpus
    return max(1, min(cpus, available // WORKER_MEMORY))


def auto_processes(ceiling: int, *, units: int, input_bytes: int) -> int:
    """Processes for a run whose size is known (``--workers`` not given): at most ``ceiling``, one per
    unit of work (a process without a unit only costs its start-up), and one per
    `MIN_BYTES_PER_PROCESS` of input, so a small job runs in this process alone, at once."""
    return max(1, min(ceiling, units, input_bytes // MIN_BYTES_PER_PROCESS))


def thread_caps(threads: int) -> dict[str, str]:
    """Environment variables that cap both tokenizer libraries to ``threads`` threads."""
    return {name: str(threads) for name in THREAD_VARIABLES}


def _init_worker(threads: int, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers itself (`SharedPool.__exit__`)
    os.environ.update(thread_caps(threads))  # read when the tokenizer first encodes, after this
    # Leave without the interpreter's teardown, which takes about 0.5 s once a numba kernel has run
    # (the pool's shutdown waits for it). Registered first, this runs after every other exit handler,
    # and a worker has nothing left to flush: each task's files are closed when the task returns.
    atexit.register(_leave_now)
    threading.Thread(target=_leave_with, args=(parent,), name="packcli-parent-watch", daemon=True).start()


def _block_sigint() -> None:
    """Block SIGINT in the calling thread, and so in every process it starts (the mask is inherited)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread within the block. A Ctrl-C that comes meanwhile goes to another
    thread of the process or waits for the block's end; Python runs its handler in the main thread either way."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _leave_with(parent: int) -> None:
    """Exit once ``parent`` is no longer this process's parent. A pool worker waits for its next task
    on a queue whose write end it holds itself, so it never sees the parent die; without this, a
    driver killed with SIGKILL (the OOM killer, ``kill -9``) leaves its workers, a tokenizer each, for good."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _leave_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _label(item: object, index: int) -> str:
    """How an error names an item: its ``label`` (a unit's file and first line, a shard's name), else its index."""
    return str(getattr(item, "label", f"item {index}"))


class SharedPool:
    """This process and ``workers - 1`` spawned worker processes, sharing out the items of each `map`.

    The workers live as long as the pool, so the second stage (shards) finds them started and
    imported. This process takes the next item whenever it is free, so it never waits for a worker
    to start. A feeder thread hands each worker one item at a time, the moment it is idle: an item
    handed to the pool cannot be taken back, so queueing more would leave this process idle at the
    end while a worker works through its queue.
    """

    def __init__(self, workers: int, warm: Callable[[], None] | None = None) -> None:
        """``workers=1``: everything in this process, no worker started. ``warm``: started on every worker
        at once (they spawn now, not at the first item), e.g. to load the tokenizer while this process
        loads its own; its errors are left to the real work to meet."""
        if workers < 1:
            raise ValueError(f"a shared pool needs 1 or more workers, got {workers}")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._others = {p.pid for p in multiprocessing.active_children()}  # children that are not this pool's
        if workers > 1:
            self._pool = ProcessPoolExecutor(workers - 1, mp_context=get_context("spawn"), initializer=_init_worker,
                                             initargs=(max(1, usable_cpus() // workers), os.getpid()))
            with _sigint_blocked():  # the first submit starts the workers
                for _ in range(workers - 1 if warm is not None else 0):
                    self._pool.submit(warm)

    def __enter__(self) -> SharedPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._pool is not None:
            if exc is not None and not isinstance(exc, Exception):  # interrupted: nothing is worth waiting for
                self.stop_workers()
            self._pool.shutdown(wait=True, cancel_futures=True)

    def stop_workers(self) -> None:
        """Terminate this pool's worker processes now (their items fail; the pool is unusable after)."""
        workers = [p for p in multiprocessing.active_children() if p.pid not in self._others]
        for process in workers:
            process.terminate()
        for process in workers:
            process.join()

    def map(self, fn: Callable[[C, I], R], common: C, items: Sequence[I],
            on_done: Callable[[I, R], None] = lambda item, result: None, *, keep: bool = True) -> list[R | None]:
        """``fn(common, item)`` for every item; results in item order (None each without ``keep``: the
        caller took what it needed in ``on_done``, so nothing holds every result at once).

        ``on_done(item, result)`` is called as each item finishes (from either thread). An error stops
        the handing out; the items already taken finish, and the error of the first failing item in
        item order is raised (items are taken in order, so it is the error one process would have raised).
        """
        if self._pool is None or len(items) < 2:  # nothing to share: here, in order
            results: list[R | None] = []
            for item in items:
                result = fn(common, item)
                on_done(item, result)
                results.append(result if keep else None)
            return results
        todo, lock = deque(range(len(items))), threading.Lock()
        results: dict[int, R | None] = {}
        failed: dict[int, BaseException | None] = {}  # item index -> its error; -1: the feeder, or Ctrl-C here

        def take() -> int | None:
            with lock:
                return todo.popleft() if todo and not failed else None

        def feed() -> None:
            handed: dict[Future, int] = {}
            _block_sigint()  # this thread may start the workers; the main thread still takes every signal
            try:
                while True:
                    while len(handed) < self.workers - 1 and (k := take()) is not None:
                        handed[self._pool.submit(fn, common, items[k])] = k
                    if not handed:
                        return
                    for future in wait(handed, return_when=FIRST_COMPLETED).done:
                        k = handed.pop(future)
                        if future.exception() is not None:
                            failed[k] = future.exception()
                        else:
                            on_done(items[k], future.result())
                            results[k] = future.result() if keep else None
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                failed[-1] = exc

        feeder = threading.Thread(target=feed, name="packcli-feeder", daemon=True)
        feeder.start()
        try:
            while (k := take()) is not None:
                try:
                    result = fn(common, items[k])
                except Exception as exc:  # noqa: BLE001 - raised below, after the items already taken
                    failed[k] = exc
                    break
                on_done(items[k], result)
                results[k] = result if keep else None
                del result
        except BaseException as exc:
            failed.setdefault(-1, None)  # stop handing out, and raise it as it is
            if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM: the workers' items are not waited for
                self.stop_workers()
            raise
        finally:
            feeder.join()
        if failed:
            error = failed[min(failed)]
            if isinstance(error, BrokenProcessPool):
                # Every item the workers held fails alike; the dead worker held one of them.
                held = [_label(items[k], k) for k, e in sorted(failed.items())
                        if k >= 0 and isinstance(e, BrokenProcessPool)]
                raise WorkerError(f"a worker process died (killed, or out of memory?) while working on "
                                  f"{' or '.join(held)}; nothing was written",
                                  "run again (finished units are reused); if it recurs, use fewer `workers`: "
                                  "each holds its own tokenizer (about 1 GB)") from error
            raise error  # type: ignore[misc]
        return [results[k] for k in range(len(items))]
