"""The Ray engine: Ray schedules units and shards; it never carries token data.

Tokenizing: each worker is an actor that builds the tokenizer and template once and then runs
`run_unit` on the units it is handed, writing spills to the shared work directory beside ``--out``.
Only the small per-unit indexes travel back through Ray. Writing: once the driver has planned the
packs, each shard is a task (`packcli.job.write.write_shard_task`) that reads its examples from the
spills and writes its file into the run's temporary directory, returning the shard's hash and its
examples' token hashes. Results are put back in unit and shard order, so the artifact is
byte-identical to the local engine's whatever the worker count or completion order.

Traps handled here: actors that take every CPU can starve anything else that needs one (ray#44687),
so each actor asks for one CPU and the driver is not an actor; Ray's usage stats are off unless the
user turned them on; Ray's own progress output is silenced (packcli's bar is driven by results);
the socket path limit (107 bytes) is avoided by a short temp dir.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from packcli.engine import Workload
from packcli.engine.pool import thread_caps
from packcli.errors import PackcliError
from packcli.job.spill import SpillLayout
from packcli.job.units import UnitIndex, UnitJob, UnitSpec, run_unit
from packcli.job.write import ShardResult, ShardTask, write_shard_task

INSTALL_HINT = "install the extra: pip install 'packcli[ray]'"


def import_ray() -> Any:
    """Import ray lazily, or explain how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise PackcliError("--engine ray needs Ray, which is not installed", INSTALL_HINT) from exc
    return ray


class _UnitWorker:
    """Actor body: one per worker process; the job's preparer is built on first use and cached."""

    def run(self, job: UnitJob, spec: UnitSpec) -> tuple[int, UnitIndex]:
        return spec.index, run_unit(job, spec)


class RayEngine:
    name = "ray"

    def __init__(self, *, workers: int | None = None, address: str | None = None, out: str | None = None,
                 shared_fs: bool = False) -> None:
        self.workers = workers
        self.address = address
        self.out = out
        self.shared_fs = shared_fs

    @contextmanager
    def session(self, warm: Callable[[], None] | None = None, work: Workload | None = None) -> Iterator[None]:
        """Start (or join) Ray for the run, and shut it down after if this engine started it. Actors are
        started per stage, at most one per unit (`run`), so neither ``warm`` nor ``work`` is needed here."""
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
            self._refuse_local_output_on_cluster(ray)
            yield
        finally:
            if started:
                ray.shutdown()

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        ray = import_ray()
        cpus = int(ray.available_resources().get("CPU", 1))
        count = max(1, min(self.workers or cpus, cpus, len(specs)))
        # One CPU per actor, and both tokenizers' thread pools capped to it: no oversubscription.
        env = {**thread_caps(1), "RAY_USAGE_STATS_ENABLED": "0"}
        actor = ray.remote(num_cpus=1, runtime_env={"env_vars": env})(_UnitWorker)
        actors = [actor.remote() for _ in range(count)]
        results: dict[int, UnitIndex] = {}
        try:
            with _packcli_errors(ray):
                for index, unit in ray.util.ActorPool(actors).map_unordered(lambda a, spec: a.run.remote(job, spec),
                                                                            list(specs)):
                    results[index] = unit
                    on_done(specs[index])
        finally:
            for a in actors:  # free their CPUs now for the shard tasks
                ray.kill(a)
        return [results[spec.index] for spec in specs]

    def write_shards(self, layout: SpillLayout, tasks: Sequence[ShardTask],
                     on_done: Callable[[ShardTask], None]) -> list[ShardResult]:
        ray = import_ray()
        remote = ray.remote(num_cpus=1)(write_shard_task)
        shared = ray.put(layout)
        pending = {remote.remote(shared, task): task for task in tasks}
        results: dict[int, ShardResult] = {}
        with _packcli_errors(ray):
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(done[0])
                results[task.index] = ray.get(done[0])
                on_done(task)
        return [results[task.index] for task in tasks]

    def _refuse_local_output_on_cluster(self, ray: Any) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) > 1 and not self.shared_fs:
            raise PackcliError(
                f"this Ray cluster has {len(nodes)} nodes, and --out {self.out} may be local to the driver: "
                "workers on other nodes could not write their spills there",
                "put --out on a filesystem every node mounts and pass --shared-fs to confirm")


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
