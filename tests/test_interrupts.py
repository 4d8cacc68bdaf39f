"""SIGINT and SIGTERM during ``pack``, ``verify`` and ``stats``: one line, exit 130/143, nothing half-written, no orphan.

The ``pack`` cases are drawn from seeds: a signal, a point of a real two-process run (a unit in the
driver or in the worker, a shard written, the artifact complete, the --force swap), with or without
a previous artifact, and either at the point or a random moment after it. Whatever the draw, the one
line on stderr must be true: the artifact it names is there (the previous one byte for byte), the
finished units it counts are the ones the re-run reuses, and the re-run gives an uninterrupted run's
manifest and bytes. No process the run started outlives it. The runs are held at named points
(`packcli.job.pause`); the waits are generous upper bounds for a loaded 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import artifact_bytes
from pack_runs import INPUTS, TOKENIZER, WAIT, config, held, reference_run
from pack_runs import SETTINGS as RUN_SETTINGS

from packcli.errors import Interrupted
from packcli.interrupts import raise_on_signals, signals_held
from packcli.job.run import pack_corpus
from packcli.job.units import count_finished_units

SETTINGS = [*RUN_SETTINGS, "--workers", "2"]  # 4 units, 2 processes
POINTS = ("unit@driver", "unit@worker", "shard", "rename", "swap")


def draw(seed: int) -> tuple[int, str, bool, float | None]:
    """The signal, the point (each in turn), whether a previous artifact is there (replaced with
    --force), and the delay after the point (None: while held there)."""
    rng = random.Random(seed)
    point = POINTS[seed % len(POINTS)]
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    previous = point == "swap" or rng.random() < 0.5
    delay = None if point == "swap" or rng.random() < 0.5 else round(rng.uniform(0, 0.6), 3)
    return sig, point, previous, delay


CASES = [draw(seed) for seed in range(len(POINTS))]  # each point once, the rest drawn


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    return reference_run(tmp_path_factory.mktemp("reference") / "out")


def start(args: list[str], pause_dir: Path, points: str) -> subprocess.Popen:
    """``packcli ARGS`` held at ``points``, in a process group of its own; SIGINT restored to its default
    in the child (a background shell starts its jobs with it ignored, which packcli respects)."""
    env = dict(os.environ, PACKCLI_PAUSE_AT=points, PACKCLI_PAUSE_DIR=str(pause_dir))
    return subprocess.Popen([sys.executable, "-m", "packcli", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupt(proc: subprocess.Popen, sig: int) -> None:
    """SIGINT as Ctrl-C sends it, to the whole process group (workers included); SIGTERM as ``kill`` does."""
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (workers, multiprocessing's resource tracker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry))
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_gone(pids: list[int]) -> None:
    """Every one of ``pids`` exits (an upper bound, not an expectation: terminated workers go at once)."""
    deadline = time.monotonic() + 30
    while [p for p in pids if running(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if running(p)], "a process the command started outlived it"


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for ``proc``; its exit code and its stderr (one line, when it was interrupted)."""
    rc = proc.wait(timeout=WAIT)
    return rc, proc.stderr.read()


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("sig,point,previous,delay", CASES,
                         ids=[f"{signal.Signals(s).name}-{p}-{'force' if f else 'new'}-{'held' if d is None else d}"
                              for s, p, f, d in CASES])
def test_an_interrupted_pack_says_what_it_kept_and_the_rerun_resumes(sig, point, previous, delay, tmp_path, reference):
    out = tmp_path / "out"
    before = None
    if previous:
        pack_corpus(config(out, seed=1))
        before = tree_hashes(out)
    proc = start(["pack", *INPUTS, "-t", TOKENIZER, "-o", str(out), *SETTINGS, *(["--force"] if previous else [])],
                 tmp_path, point)
    held(proc, tmp_path / point)
    kids = children(proc.pid)
    assert kids, "a two-process run has a worker"
    if delay is None and point != "swap":
        interrupt(proc, sig)  # while a process holds at the point
    elif point == "swap":
        interrupt(proc, sig)  # held by the swap itself: delivered once the new artifact is in place
        time.sleep(0.2)
        (tmp_path / point).unlink()
    else:
        (tmp_path / point).unlink()
        time.sleep(delay)
        interrupt(proc, sig)
    rc, stderr = finish(proc)
    assert_gone(kids)
    work = tmp_path / ".packcli-work-out"
    assert not (tmp_path / ".packcli-lock-out").exists()
    assert not list(work.glob("tmp-*")) and not list(work.glob("old-*"))

    if rc == 0:  # the run finished before the signal came (a draw with a delay): a complete artifact
        assert delay is not None
        complete, resumed = True, None
    else:
        assert rc == 128 + sig, stderr
        lines = stderr.strip().split("\n")
        assert len(lines) == 1, stderr
        said = re.fullmatch(rf"interrupted by {signal.Signals(sig).name}: (?P<state>[^;]+)"
                            r"(; a rerun resumes from (?P<units>\d+) finished units?)?", lines[0])
        assert said, lines[0]
        state, resumed = said["state"], int(said["units"] or 0)
        complete = state == f"the new artifact at {out} is complete"
        if complete:
            assert point in ("shard", "rename", "swap") and not work.exists()
        elif state == f"the previous artifact at {out} is unchanged":
            assert previous and tree_hashes(out) == before
        else:
            assert state == "no artifact written" and not previous and not out.exists()
        assert point != "swap" or complete, "the swap holds the signal until the new artifact is in place"
        assert count_finished_units(work, None) == resumed

    if complete:
        manifest = json.loads((out / "manifest.json").read_text())
    else:
        summary = pack_corpus(config(out, force=previous))
        assert summary.resumed_units == resumed
        manifest = summary.manifest
    assert manifest["manifest_sha256"] == reference[0]
    assert artifact_bytes(out, manifest) == reference[1]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".packcli-")) == []


def test_an_interrupted_verify_writes_nothing_and_leaves_no_worker(packed, tmp_path):
    before = tree_hashes(packed)
    seams = tmp_path / "seams.csv"
    proc = start(["verify", str(packed), "--workers", "2", "--seam-out", str(seams)], tmp_path, "verify-unit@worker")
    held(proc, tmp_path / "verify-unit@worker")
    kids = children(proc.pid)
    interrupt(proc, signal.SIGTERM)
    rc, stderr = finish(proc)
    assert rc == 143, stderr
    assert stderr.strip() == "interrupted by SIGTERM: the artifact is unchanged; nothing was written"
    assert_gone(kids)
    assert tree_hashes(packed) == before and not seams.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verify-unit@worker", "verify-unit@worker.claimed"]


def test_an_interrupted_stats_writes_no_plot_and_leaves_no_worker(tmp_path, corpus_files):
    plot = tmp_path / "lengths.png"
    proc = start(["stats", *corpus_files, "-t", TOKENIZER, "--workers", "2", "--plot", str(plot)], tmp_path,
                 "stats-unit@driver")
    held(proc, tmp_path / "stats-unit@driver")
    kids = children(proc.pid)
    assert kids
    interrupt(proc, signal.SIGINT)
    rc, stderr = finish(proc)
    assert rc == 130, stderr
    assert stderr.strip() == "interrupted by SIGINT: nothing was written"
    assert_gone(kids)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats-unit@driver", "stats-unit@driver.claimed"]


def test_signals_held_are_delivered_when_the_block_ends():
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # a handler runs between two bytecodes of the main thread: it has had its chance
            assert got == []
        assert got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_first_signal_raises_and_a_second_waits_for_the_cleanup():
    cleaned, before = False, signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as caught:
        with raise_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # ignored: the cleanup below finishes
                time.sleep(0.01)
                cleaned = True
    assert caught.value.signum == signal.SIGTERM and cleaned
    assert signal.getsignal(signal.SIGTERM) is before  # restored after the block


def test_a_signal_ignored_at_start_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with raise_on_signals():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)
