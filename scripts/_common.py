"""What the benchmark scripts share: CPU and wall clocks, memory readers, a child process measured
on its own, the run's environment, and the JSON and markdown writers.

Standard library only, on purpose: `bench_vs_trl.py`'s TRL side and `bench_pack.py`'s peers import
it from interpreters (a TRL venv, a peer venv) that have no packcli and need none. The scripts are
not a package, so each puts this directory on ``sys.path`` before importing it (running a script
does that already; importing one from a test does not).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# --------------------------------------------------------------------------------------- clocks


def cpu_seconds() -> float:
    """CPU seconds of this process so far, every thread, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Span:
    """One timed region: wall seconds, process CPU seconds (every thread), load before and after."""

    wall_s: float
    cpu_s: float
    load_before: float
    load_after: float


class Timer:
    """``with Timer() as t: ...`` then ``t.span``. The load average is read outside the clocks, and
    recorded because the machines these run on are shared: wall time alone would hide contention."""

    span: Span

    def __enter__(self) -> Timer:
        self._load0 = os.getloadavg()[0]
        self._cpu0 = cpu_seconds()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall, cpu = time.perf_counter() - self._t0, cpu_seconds() - self._cpu0
        self.span = Span(wall, cpu, self._load0, os.getloadavg()[0])


# --------------------------------------------------------------------------------------- memory


def proc_status_mib(pid: int | str = "self", keys: Iterable[str] = ("VmHWM",)) -> dict[str, float]:
    """Fields of ``/proc/PID/status`` in MiB (Linux; the file gives kB): e.g. VmHWM, VmRSS, RssAnon."""
    wanted = set(keys)
    with open(f"/proc/{pid}/status") as handle:
        fields = (line.partition(":") for line in handle)
        return {k: int(v.split()[0]) / 1024 for k, _, v in fields if k in wanted}


def peak_rss_mib() -> float:
    """This process's RSS high-water mark (VmHWM). Not ``ru_maxrss``: on Linux that survives fork and
    exec, so a child reports its parent's peak if that was higher (measured: a child of an 800 MiB
    parent reported 813 MiB of ``ru_maxrss`` and 13 MiB of VmHWM)."""
    return proc_status_mib("self", ("VmHWM",))["VmHWM"]


def rss_mib() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# `python -c PACKCLI_WITH_HWM HWM_FILE pack ...`: the packcli CLI, writing its own VmHWM (kB) to
# HWM_FILE at exit, so the CLI's peak is measured in the CLI's process (see `peak_rss_mib`).
PACKCLI_WITH_HWM = """import atexit, runpy, sys
def _hwm(path=sys.argv[1]):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM")))
atexit.register(_hwm)
sys.argv = ["packcli", *sys.argv[2:]]
runpy.run_module("packcli", run_name="__main__", alter_sys=True)
"""


# ---------------------------------------------------------------------------------- child runs


@dataclass(frozen=True)
class ChildRun:
    """A child process measured alone: its exit status, wall seconds, CPU seconds from ``wait4`` (that
    child and its own children, not this process), ``ru_maxrss`` from ``wait4`` (see `peak_rss_mib` for
    why that can be the parent's), and its stdout when it was piped."""

    returncode: int
    wall_s: float
    cpu_s: float
    maxrss_mib: float
    stdout: str | None = None


def run_measured(cmd: Sequence[str], *, stdout: IO | int | None = None, env: Mapping[str, str] | None = None) -> ChildRun:
    """Run ``cmd`` and wait for it. ``stdout``: a file, ``subprocess.PIPE`` (text, returned in the
    result), or None (inherited)."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=stdout, env=None if env is None else dict(env),
                            text=stdout == subprocess.PIPE)
    out = proc.stdout.read() if stdout == subprocess.PIPE else None
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return ChildRun(os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime,
                    usage.ru_maxrss / 1024, out)


# ---------------------------------------------------------------------------------- environment


def git_state(root: Path) -> dict[str, Any]:
    """The commit, and the files under packcli/ that differ from it: the tree may be edited while a
    benchmark runs, and a number is only as good as the code it names."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    return {"git_head": git("rev-parse", "HEAD"), "git_dirty": git("status", "--short", "--", "packcli").splitlines()}


def run_environment(root: Path) -> dict[str, Any]:
    """What every run records about where it ran; scripts add their own library versions."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            **git_state(root), "argv": sys.argv, "loadavg_start": os.getloadavg()}


def load_summary(start: Sequence[float]) -> str:
    """The line each script prints before its table: the 1-minute load average then and now."""
    return f"load average (1 min) at start {start[0]:.1f}, at end {os.getloadavg()[0]:.1f}; {os.cpu_count()} cpus"


# -------------------------------------------------------------------------------------- writers


def write_json(path: Path | str, data: Any, *, default: Any = None) -> None:
    """Indented, keys sorted, newline-terminated, written atomically (a run killed midway leaves the
    previous file, never half of one); the parent directory is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=default) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def print_facts(facts: Mapping[str, Any]) -> None:
    """One ``key  value`` line per fact, keys aligned, numbers with thousands separators (floats to 0.1)."""
    width = max(map(len, facts), default=0)
    for key, value in facts.items():
        print(f"{key:<{width}}  {value:,.1f}" if isinstance(value, float) else f"{key:<{width}}  {value:,}")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], *, align: str = "") -> str:
    """A markdown table. ``align``: one letter per column, ``l`` or ``r`` (right, for numbers);
    columns past its end are left-aligned. An empty cell is written as ``| |``."""
    def line(cells: Sequence[object]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align.ljust(len(header), "l")) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])
