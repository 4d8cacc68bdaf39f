"""Faults under load: ``pack`` killed at known points, a full disk, a dead worker, two runs into one --out.

Each test fails if its guarantee breaks: --out is the previous complete artifact or absent, never a
partial one; the re-run resumes and gives the same bytes as an uninterrupted run; what a dead run
left is cleared by the next run, what a live one holds is not. Runs are held at named points
(`packcli.job.pause`: a marker file appears, the test kills or releases), so nothing depends on
timing; the waits below are generous upper bounds for a loaded 2-core machine, not expectations.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, artifact_bytes
from pack_runs import INPUTS, TOKENIZER, WAIT, config, reference_run
from pack_runs import SETTINGS as RUN_SETTINGS
from pack_runs import held as held_at
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.cli import app
from packcli.config import PackConfig
from packcli.contract import CONTRACT_VERSION, MANIFEST_NAME
from packcli.errors import InputError
from packcli.job.run import pack_corpus
from packcli.verify import verify_artifact

SETTINGS = [*RUN_SETTINGS, "--workers", "1"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    return reference_run(tmp_path_factory.mktemp("reference") / "out")


def start(out: Path, pause_dir: Path, points: str, *extra: str, limit_bytes: int | None = None,
          workers: str = "1") -> subprocess.Popen:
    env = dict(os.environ, PACKCLI_PAUSE_AT=points, PACKCLI_PAUSE_DIR=str(pause_dir))
    settings = [*SETTINGS[:-1], workers]

    def limit() -> None:  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    log = open(pause_dir / "stderr.txt", "w")  # noqa: SIM115 - the child writes it; closed with the test
    return subprocess.Popen([sys.executable, "-m", "packcli", "pack", *INPUTS, "-t", TOKENIZER, "-o", str(out),
                             *settings, *extra], env=env, stdout=subprocess.DEVNULL, stderr=log,
                            preexec_fn=limit if limit_bytes else None)


def held(proc: subprocess.Popen, marker: Path) -> int:
    return held_at(proc, marker, marker.parent / "stderr.txt")


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=WAIT)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".packcli-"))


@pytest.mark.parametrize("point", ["unit-00002", "shard", "rename"])
def test_kill_9_leaves_no_output_and_the_rerun_resumes_to_the_same_bytes(point, tmp_path, reference):
    """Killed mid-unit (its spills written, not its sidecar), mid-write (a shard on disk) and just
    before the rename (the artifact complete in its temporary folder): no --out; the next run clears
    the dead run's temporary artifact, reuses the units it finished, and gives the same bytes."""
    out = tmp_path / "out"
    proc = start(out, tmp_path, point)
    held(proc, tmp_path / point)
    kill(proc)
    assert not out.exists()
    work = tmp_path / ".packcli-work-out"
    stale = list(work.glob("tmp-*"))
    assert stale, "the dead run's temporary artifact is what the next run must clear"
    assert all(not (d / MANIFEST_NAME).exists() for d in stale) or point == "rename"
    if point != "rename":
        with pytest.raises(InputError, match="not a packcli artifact"):
            verify_artifact(stale[0])  # a partial artifact never verifies

    summary = pack_corpus(config(out))
    assert summary.resumed_units == {"unit-00002": 2, "shard": 4, "rename": 4}[point]
    assert summary.manifest["manifest_sha256"] == reference[0]
    assert artifact_bytes(out, summary.manifest) == reference[1]
    assert leftovers(tmp_path) == [], "the lock, the work folder and the dead run's temporary artifact are gone"


def test_a_dead_runs_leftovers_are_cleared_even_when_the_next_run_fails(tmp_path):
    """The next run owns the work folder (it holds the lock), so the dead run's temporary artifact
    goes at its start, not only with the work folder after a success."""
    from packcli.errors import BudgetError

    out = tmp_path / "out"
    proc = start(out, tmp_path, "shard")
    held(proc, tmp_path / "shard")
    kill(proc)
    work = tmp_path / ".packcli-work-out"
    assert list(work.glob("tmp-*")) and (tmp_path / ".packcli-lock-out").exists()  # the dead run's lock file too
    with pytest.raises(BudgetError):
        pack_corpus(config(out, strategy="sequential", min_density=0.9999))
    assert not list(work.glob("tmp-*")) and len(list(work.glob("unit-*.json"))) == 4
    assert leftovers(tmp_path) == [".packcli-work-out"]


@pytest.mark.parametrize("point", ["rename", "swap"])
def test_kill_9_while_replacing_keeps_the_previous_artifact_or_none(point, tmp_path, reference):
    """With --force over a previous artifact: killed before the rename, the previous one is still
    --out and still verifies; killed between moving it aside and moving the new one in, --out is
    absent (never half of each). The re-run puts the new artifact in place and clears the old one."""
    out = tmp_path / "out"
    previous = pack_corpus(config(out, seed=1)).manifest["manifest_sha256"]
    proc = start(out, tmp_path, point, "--force")
    held(proc, tmp_path / point)
    kill(proc)
    if point == "rename":
        assert mf.read_manifest(out)["manifest_sha256"] == previous
        assert verify_artifact(out, reconstruct=False).ok
    else:
        assert not out.exists()
        assert list((tmp_path / ".packcli-work-out").glob("old-*")), "the previous artifact, moved aside"
    summary = pack_corpus(config(out, force=True))
    assert summary.manifest["manifest_sha256"] == reference[0]
    assert artifact_bytes(out, summary.manifest) == reference[1]
    assert leftovers(tmp_path) == []


def test_a_second_run_into_the_same_out_fails_and_leaves_the_first_alone(tmp_path, reference):
    """One wins, the other fails at once (exit 2, naming the holder's pid) without touching the
    first run's work folder or temporary artifact; the first then finishes with the right bytes."""
    out = tmp_path / "out"
    first = start(out, tmp_path, "shard")
    pid = held(first, tmp_path / "shard")
    work = tmp_path / ".packcli-work-out"
    before = {str(p): p.stat().st_mtime_ns for p in work.rglob("*")}
    assert any(p.name.startswith("tmp-") for p in work.iterdir())

    second = CliRunner().invoke(app, ["pack", *INPUTS, "-t", TOKENIZER, "-o", str(out), *SETTINGS])
    assert second.exit_code == 2
    assert f"another packcli pack (pid {pid}) is writing it" in second.stderr
    assert {str(p): p.stat().st_mtime_ns for p in work.rglob("*")} == before
    assert not out.exists()

    (tmp_path / "shard").unlink()  # let the first run go on
    assert first.wait(timeout=WAIT) == 0, (tmp_path / "stderr.txt").read_text()
    manifest = mf.read_manifest(out)
    assert manifest["manifest_sha256"] == reference[0] and artifact_bytes(out, manifest) == reference[1]
    assert leftovers(tmp_path) == []


LIMIT = 20_000  # bytes a file may have: above every 2-record spill (<= 10 kB), below the 24k-token shard (31 kB)


def test_a_full_disk_during_write_is_a_clear_error_and_leaves_nothing(tmp_path, reference):
    """A file-size limit that the units' spills fit under (2 records a unit) and the one shard does not
    (every pack in it): exit 1 with one line that says where and why; no --out, no temporary
    artifact; the units survive, and the re-run reuses them all and verifies."""
    out = tmp_path / "out"
    small_units_one_shard = ("--unit-lines", "2", "--packs-per-shard", "2048")
    proc = start(out, tmp_path, "none", *small_units_one_shard, limit_bytes=LIMIT)
    assert proc.wait(timeout=WAIT) == 1
    lines = (tmp_path / "stderr.txt").read_text().strip().split("\n")
    assert re.fullmatch(rf"error: --out {re.escape(str(out))}: file too large for this filesystem or `ulimit -f`"
                        r".*; nothing was written there", lines[0]), lines
    assert len(lines) == 2 and lines[1].startswith("  hint: ") and "Traceback" not in lines[1]
    assert not out.exists()
    assert leftovers(tmp_path) == [".packcli-work-out"]
    work = tmp_path / ".packcli-work-out"
    assert not list(work.glob("tmp-*"))
    assert max(p.stat().st_size for p in work.iterdir()) <= LIMIT
    summary = pack_corpus(PackConfig(inputs=INPUTS, tokenizer=TOKENIZER, out=out, capacity=512, lines_per_unit=2))
    assert summary.resumed_units == summary.units == 80  # every unit's spill had fit
    assert max(s["bytes"] for s in summary.manifest["shards"]) > LIMIT  # the shard that could not be written
    assert verify_artifact(out).ok


def test_a_worker_killed_mid_unit_fails_the_run_naming_the_unit(tmp_path, reference):
    """kill -9 of a worker process while it holds a unit: pack stops with exit 1 and names the unit
    (with its file and first line); no artifact is written without that unit's examples."""
    out = tmp_path / "out"
    proc = start(out, tmp_path, "unit@worker,unit@driver", workers="2")
    worker = held(proc, tmp_path / "unit@worker")
    held(proc, tmp_path / "unit@driver")
    assert worker != proc.pid
    os.kill(worker, signal.SIGKILL)
    (tmp_path / "unit@driver").unlink()  # the driver finishes its unit, then meets the dead worker
    assert proc.wait(timeout=WAIT) == 1
    stderr = (tmp_path / "stderr.txt").read_text()
    assert re.search(r"error: a worker process died \(killed, or out of memory\?\) while working on "
                     r"unit-0000\d \((openai|text)\.jsonl from line \d+\)", stderr), stderr
    assert "Traceback" not in stderr
    assert not out.exists() and not list((tmp_path / ".packcli-work-out").glob("tmp-*"))
    summary = pack_corpus(config(out))
    assert artifact_bytes(out, summary.manifest) == reference[1]


def test_units_from_other_code_are_not_reused(tmp_path, monkeypatch):
    """The resume key holds a digest of packcli's source: units finished by other code are redone."""
    import packcli.job.run as run
    from packcli.errors import BudgetError

    out = tmp_path / "out"
    with pytest.raises(BudgetError):  # fails after tokenizing: the units stay for a re-run
        pack_corpus(config(out, strategy="sequential", min_density=0.9999))
    assert len(list((tmp_path / ".packcli-work-out").glob("unit-*.json"))) == 4
    monkeypatch.setattr(run, "code_digest", lambda: "0" * 64)  # what an older or newer packcli computes
    assert pack_corpus(config(out)).resumed_units == 0


def test_units_from_the_same_code_are_reused(tmp_path):
    from packcli.errors import BudgetError

    out = tmp_path / "out"
    with pytest.raises(BudgetError):
        pack_corpus(config(out, strategy="sequential", min_density=0.9999))
    assert pack_corpus(config(out)).resumed_units == 4


def test_the_code_digest_moves_with_any_source_byte(tmp_path):
    import shutil

    import packcli
    from packcli.job.run import code_digest, source_digest

    copy = tmp_path / "packcli"
    shutil.copytree(Path(packcli.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_digest(copy) == code_digest()
    module = copy / "job" / "units.py"
    module.write_bytes(module.read_bytes() + b"\n")
    assert source_digest(copy) != code_digest()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o755), (0o002, 0o775), (0o077, 0o700)])
def test_the_artifact_folder_respects_the_umask(umask, mode, tmp_path):
    """mkdtemp makes its folder 0700; the published artifact gets what mkdir would give under the umask,
    so a training job under another user on a shared filesystem can read it (when the umask allows)."""
    old = os.umask(umask)
    try:
        out = tmp_path / "out"
        pack_corpus(PackConfig(inputs=INPUTS[1:], tokenizer=TOKENIZER, out=out, capacity=2048))
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == mode
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o666 & ~umask}


def test_the_lock_is_released_when_the_run_fails(tmp_path):
    """A failing run (here: a budget) leaves its units for resume but no lock: the next run proceeds."""
    from packcli.errors import BudgetError

    out = tmp_path / "out"
    with pytest.raises(BudgetError):
        pack_corpus(config(out, strategy="sequential", min_density=0.9999))
    assert leftovers(tmp_path) == [".packcli-work-out"]
    pack_corpus(config(out))
    assert leftovers(tmp_path) == []
    assert json.loads((out / MANIFEST_NAME).read_text())["contract_version"] == CONTRACT_VERSION


def test_an_out_filled_after_the_first_check_is_not_overwritten(tmp_path, monkeypatch):
    """--out is checked again once the lock is held: a run that finished between this run's first
    check and its lock (the window is simulated by skipping the first check) is not replaced without --force."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "packed", out)  # the other run's artifact
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(PackConfig, "check_files", lambda self: None)
    with pytest.raises(InputError, match=r"exists \(a packcli artifact\); pass `force` to replace it"):
        pack_corpus(config(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == [], "nothing started: no lock left, no work folder"
