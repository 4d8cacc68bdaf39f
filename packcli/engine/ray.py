"""The Ray engine: Ray schedules units and shards (and verify's units); it never carries token data.

Every stage is one `RayEngine.map`: ``fn(common, item)`` for each item as a Ray task (one CPU each,
both tokenizer libraries' threads capped to it), ``common`` put in the object store once, at most
``--workers`` (else the cluster's CPUs) tasks in flight, results put back in item order. Units
(`packcli.job.units.run_unit`) write their spills to the shared work directory beside ``--out`` and
return only their small indexes; shards (`packcli.job.write.write_shard_task`) read from the spills
and write into the run's temporary directory, returning hashes. So the artifact is byte-identical to
the local engine's whatever the worker count, completion order or node a task ran on.

Tasks, not actors: a task lost with its node (a killed raylet, a preempted machine) is retried by
Ray on a live node (`TASK_RETRIES`), where an actor pool would wait for a CPU that a live actor holds.
A worker process keeps the tokenizer and template between the tasks it runs (`packcli.prepare`'s
per-process cache), as an actor would. Every task writes files whose bytes depend only on its input,
so a retried task and the lost attempt, if it still runs somewhere, write the same bytes (each to
its own temporary name, renamed into place).

Paths sent to tasks must be absolute (`shares_paths` is False: the callers make them so): a Ray worker
runs in its node's directory, not the driver's. Every ``PACKCLI_*`` variable of the driver's
environment reaches the tasks (the test hooks of `packcli.job.pause` among them).
Traps handled here: Ray's usage stats are off unless the user turned them on; Ray's own progress
output is silenced (packcli's bar is driven by results); the socket path limit (107 bytes) is
avoided by a short temp dir.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from packcli.engine.pool import thread_caps
from packcli.engine.workload import Workload
from packcli.errors import PackcliError

C, I, R = TypeVar("C"), TypeVar("I"), TypeVar("R")
INSTALL_HINT = "install the extra: pip install 'packcli[ray]'"
TASK_RETRIES = 5  # Ray re-runs a task lost with its worker or node this many times before failing the run


def import_ray() -> Any:
    """Import ray lazily, or explain how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise PackcliError("`engine='ray'` needs Ray, which is not installed", INSTALL_HINT) from exc
    return ray


def _call(fn: Callable[[C, I], R], common: C, item: I) -> R:
    """A task's body (module level, so Ray pickles it by name)."""
    return fn(common, item)


class RayEngine:
    name = "ray"
    shares_paths = False

    def __init__(self, *, workers: int | None = None, address: str | None = None, shared_fs: bool = False,
                 shared: str = "`out`") -> None:
        """``shared``: what the workers on other nodes must reach at the same path (named in the refusal
        when the cluster has several nodes and ``shared_fs`` does not confirm it)."""
        self.workers = workers
        self.address = address
        self.shared_fs = shared_fs
        self.shared = shared

    @contextmanager
    def session(self, warm: Callable[[], None] | None = None, work: Workload | None = None) -> Iterator[None]:
        """Start (or join) Ray for the run, and shut it down after if this engine started it. Tasks are
        sized per stage (`map`), so neither ``warm`` nor ``work`` is needed here."""
        ray = import_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        started = not ray.is_initialized()
        if started:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                                      "configure_logging": True}
            if self.address:
                kwargs["address"] = self.address
            else:
                kwargs.update(num_cpus=self.workers or os.cpu_count(),
                              _temp_dir=tempfile.mkdtemp(prefix="pc-ray-", dir="/tmp"))
            ray.init(**kwargs)
        try:
            self._refuse_local_paths_on_cluster(ray)
            yield
        finally:
            if started:
                ray.shutdown()

    def map(self, fn: Callable[[C, I], R], common: C, items: Sequence[I],
            on_done: Callable[[I, R], None] = lambda item, result: None, *, keep: bool = True) -> list[R | None]:
        """``fn(common, item)`` for every item as a Ray task; results in item order (see the module docstring).

        Raises:
            PackcliError: a task's own `PackcliError` (a bad record, a changed tokenizer), as itself.
            ray.exceptions.RayError: a task that failed for another reason, or was lost more than
                `TASK_RETRIES` times.
        """
        ray = import_ray()
        limit = max(1, self.workers or int(ray.cluster_resources().get("CPU", 1)))
        # One CPU a task and both tokenizers' thread pools capped to it: no oversubscription.
        env = {**thread_caps(1), "RAY_USAGE_STATS_ENABLED": "0",
               **{name: value for name, value in os.environ.items() if name.startswith("PACKCLI_")}}
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, runtime_env={"env_vars": env})(_call)
        shared = ray.put(common)
        results: dict[int, R | None] = {}
        pending: dict[Any, int] = {}
        todo = iter(range(len(items)))
        with _packcli_errors(ray):
            try:
                while True:
                    while len(pending) < limit and (k := next(todo, None)) is not None:
                        pending[task.remote(fn, shared, items[k])] = k
                    if not pending:
                        break
                    done, _ = ray.wait(list(pending), num_returns=1)
                    k = pending.pop(done[0])
                    result = ray.get(done[0])
                    on_done(items[k], result)
                    results[k] = result if keep else None
                    del result
            finally:
                for ref in pending:  # an error: the rest is not wanted
                    ray.cancel(ref, force=True)
        return [results[k] for k in range(len(items))]

    def _refuse_local_paths_on_cluster(self, ray: Any) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) > 1 and not self.shared_fs:
            raise PackcliError(
                f"this Ray cluster has {len(nodes)} nodes, and {self.shared} may be local to the driver: "
                "workers on other nodes could not reach it",
                "put it on a filesystem every node mounts at the same path and pass `shared_fs` to confirm")


@contextmanager
def _packcli_errors(ray: Any) -> Iterator[None]:
    """A worker's PackcliError (a bad record under --on-error fail, a tokenizer mismatch) reaches the
    user as itself, not wrapped in Ray's task error."""
    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, PackcliError):
            raise cause from None
        raise
