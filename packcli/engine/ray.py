"""The Ray engine: Ray schedules units; it never carries token data.

Each worker is an actor that builds the tokenizer and template once and then runs `run_unit` on the
units it is handed, writing spills to the shared work directory beside ``--out``. Only the small
per-unit indexes travel back through Ray. Results are put back in unit order, so the artifact is
byte-identical to the local engine's whatever the worker count or completion order.

Traps handled here: actors that take every CPU can starve anything else that needs one (ray#44687),
so each actor asks for one CPU and the driver is not an actor; Ray's usage stats are off unless the
user turned them on; Ray's own progress output is silenced (packcli's bar is driven by results);
the socket path limit (107 bytes) is avoided by a short temp dir.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from packcli.errors import PackcliError
from packcli.units import UnitIndex, UnitJob, UnitSpec, run_unit

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

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
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
            return self._run(ray, job, specs, on_done)
        finally:
            if started:
                ray.shutdown()

    def _refuse_local_output_on_cluster(self, ray: Any) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) > 1 and not self.shared_fs:
            raise PackcliError(
                f"this Ray cluster has {len(nodes)} nodes, and --out {self.out} may be local to the driver: "
                "workers on other nodes could not write their spills there",
                "put --out on a filesystem every node mounts and pass --shared-fs to confirm")

    def _run(self, ray: Any, job: UnitJob, specs: Sequence[UnitSpec],
             on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        cpus = int(ray.available_resources().get("CPU", 1))
        count = max(1, min(self.workers or cpus, cpus, len(specs)))
        # One CPU per actor, and both tokenizers' thread pools capped to it: no oversubscription.
        env = {"RAYON_NUM_THREADS": "1", "FASTOKENS_BPE_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        actor = ray.remote(num_cpus=1, runtime_env={"env_vars": env})(_UnitWorker)
        pool = ray.util.ActorPool([actor.remote() for _ in range(count)])
        results: dict[int, UnitIndex] = {}
        try:
            for index, unit in pool.map_unordered(lambda a, spec: a.run.remote(job, spec), list(specs)):
                results[index] = unit
                on_done(specs[index])
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, PackcliError):
                raise cause from None
            raise
        return [results[spec.index] for spec in specs]
