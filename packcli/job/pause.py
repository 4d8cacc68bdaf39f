"""Named points where a run can be held, so fault tests can kill or interrupt it at a known moment.

``PACKCLI_PAUSE_AT=unit,rename`` and ``PACKCLI_PAUSE_DIR=DIR`` make the first process that reaches a
named point create ``DIR/<point>`` (holding its pid) and wait while that file exists (a point holds
once per run: ``DIR/<point>.claimed`` stays behind). The test then
kills that process (``kill -9`` mid-unit, mid-write, before the rename: no sleeps, no timing
guesses) or deletes the file to let it go on. Without the variables, which is always outside the
tests, a point costs one environment lookup.

On Ray the first task process to arrive holds, and the marker names its pid, so a test can kill
that process's node. The points: ``unit`` (a unit's spills written, its sidecar not yet: a half-finished unit),
``unit@worker`` / ``unit@driver`` (the same, only in a spawned worker / in the driver process),
``unit-00002`` (the same, at that unit only),
``shard`` (a shard file written, the seam table and manifest not yet), ``rename`` (the artifact
complete in its temporary folder, not yet moved to ``--out``), ``swap`` (with ``--force``: the old
``--out`` moved aside, the new one not yet in place). ``stats-unit`` and ``verify-unit``: a unit about
to be measured by ``stats`` or re-tokenized by ``verify`` (to interrupt them at a known moment).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path


def pause_at(point: str, detail: str = "") -> None:
    """Hold here if a test asked for ``point``, ``point@worker``/``point@driver`` (this process's role),
    or ``detail`` (e.g. a unit's name, to hold at that unit only)."""
    wanted = os.environ.get("PACKCLI_PAUSE_AT")
    if not wanted:
        return
    role = "worker" if multiprocessing.parent_process() is not None else "driver"
    names = set(wanted.split(","))
    for name in (point, f"{point}@{role}", detail):
        if name and name in names:
            _hold(Path(os.environ["PACKCLI_PAUSE_DIR"]) / name)


def _hold(marker: Path) -> None:
    try:  # only the first process to arrive holds, and only once
        os.close(os.open(marker.with_name(marker.name + ".claimed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    partial = marker.with_name(marker.name + ".partial")
    partial.write_text(str(os.getpid()))
    partial.rename(marker)  # the marker appears whole: a test reads the pid as soon as it sees the file
    while marker.exists():
        time.sleep(0.02)
