"""What a ``pack`` run keeps beside ``--out`` (`packcli.job.workspace`): only packcli's, and nothing after a usage error.

Each guard is fed the case it exists for: a folder or a lock file of the user's under packcli's
names, a temporary folder packcli did not make, an OS error on each step of setting up (no such
folder on /proc, no permission, a read-only filesystem, a name too long, a file in the way), a
tokenizer that fails to load after the work folder exists. The directory is listed before and
after: a usage error leaves exactly what was there.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app
from packcli.config import PackConfig
from packcli.errors import InputError, PathError
from packcli.job.run import pack_corpus
from packcli.job.workspace import Workspace
from packcli.owned import MARKER_NAME, is_marked, make_folder

runner = CliRunner()
CORPUS = str(FIXTURES / "corpus" / "text.jsonl")
TOKENIZER = str(FIXTURES / "tokenizer")


def config(out: Path, **kw) -> PackConfig:
    return PackConfig(inputs=(CORPUS,), tokenizer=TOKENIZER, out=out, capacity=512, **kw)


def listing(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def pack(*args: str):
    return runner.invoke(app, ["pack", CORPUS, "-t", TOKENIZER, "--workers", "1", "-c", "512", *args])


def test_a_folder_of_the_users_under_the_work_folders_name_is_refused(tmp_path):
    work = tmp_path / ".packcli-work-out"
    work.mkdir()
    (work / "unit-00000.json").write_text("the user's, under packcli's name")
    before = listing(tmp_path)
    result = pack("-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "holds unit-00000.json, and packcli did not make it (no marker)" in result.stderr
    assert listing(tmp_path) == before


def test_an_empty_work_folder_is_adopted_and_removed_after(tmp_path):
    (tmp_path / ".packcli-work-out").mkdir()  # what a run killed between mkdir and its marker leaves
    assert pack("-o", str(tmp_path / "out")).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_lock_file_of_the_users_is_refused_and_kept(kind, tmp_path):
    lock = tmp_path / ".packcli-lock-out"
    if kind == "file":
        lock.write_text("the user's file, under packcli's name")
    else:
        (tmp_path / "target").write_text("the user's")
        os.symlink(tmp_path / "target", lock)
    before = listing(tmp_path)
    result = pack("-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and "not a packcli lock file" in result.stderr
    assert listing(tmp_path) == before
    with pytest.raises(PathError, match="not a packcli lock file"):  # and again under the lock, past the check
        with Workspace(tmp_path / "out"):
            pass
    assert listing(tmp_path) == before


def test_a_dead_runs_lock_file_is_reused(tmp_path):
    (tmp_path / ".packcli-lock-out").write_bytes(b"packcli pack lock, pid      99999\n")
    assert pack("-o", str(tmp_path / "out")).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_only_packclis_temporary_folders_are_cleared(tmp_path):
    """A dead run's marked tmp- folder goes at the next run's start; a tmp- folder packcli did not make
    stays, and so does the work folder that holds it."""
    work = tmp_path / ".packcli-work-out"
    work.mkdir()
    (work / MARKER_NAME).write_text("packcli: pack work folder\n")
    stale = make_folder(work, "tmp-", "a dead run's artifact")
    (stale / "shard-00000.parquet").write_bytes(b"half")
    foreign = work / "tmp-mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    summary = pack_corpus(config(tmp_path / "out"))
    assert summary.manifest["counts"]["packs"] > 0
    assert not stale.exists() and (foreign / "notes.txt").read_text() == "mine"
    assert is_marked(work), "the work folder stays, marked, while it holds a folder that is not packcli's"


def test_a_run_killed_in_the_swap_gets_its_previous_artifact_back(tmp_path):
    """--out missing and the previous artifact in old-*: the next run puts it back before deciding."""
    out = tmp_path / "out"
    work = tmp_path / ".packcli-work-out"
    work.mkdir()
    (work / MARKER_NAME).write_text("packcli: pack work folder\n")
    shutil.copytree(FIXTURES / "packed", work / "old-abc")
    with pytest.raises(InputError, match=r"exists \(a packcli artifact\); pass `force`"):
        pack_corpus(config(out))
    assert (out / "manifest.json").read_bytes() == (FIXTURES / "packed" / "manifest.json").read_bytes()


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOENT, errno.ENAMETOOLONG])
@pytest.mark.parametrize("step", ["mkdir", "open"])
def test_an_os_error_while_setting_up_is_exit_2_naming_the_path_and_leaves_nothing(step, code, tmp_path, monkeypatch):
    """The system says no to making the parent folders or the lock file (as a read-only mount, /proc or a
    permission would, which os.access cannot foresee for root): a usage error that names the path."""
    import packcli.job.workspace as workspace

    out = tmp_path / "new" / "deeper" / "out"
    before = listing(tmp_path)
    real = {"mkdir": Path.mkdir, "open": os.open}[step]

    def refuse(path, *args, **kwargs):  # the folder --out goes in: its making, or any file made in it
        if Path(path) == out.parent if step == "mkdir" else Path(path).parent == out.parent:
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    if step == "mkdir":
        monkeypatch.setattr(Path, "mkdir", refuse)
    else:
        monkeypatch.setattr(workspace.os, "open", refuse)  # the os module's: tempfile's mkstemp meets it too
    result = pack("-o", str(out))
    assert result.exit_code == 2, result.output
    line = result.stderr.split("\n")[0]
    assert line.startswith(f"error: --out {out}: {os.strerror(code).lower()}") and "internal error" not in line
    assert listing(tmp_path) == before, "the parent folder made before the refusal is gone too"


def test_a_full_disk_while_setting_up_stays_exit_1(tmp_path, monkeypatch):
    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(Path, "mkdir", full)
    result = pack("-o", str(tmp_path / "new" / "out"))
    assert result.exit_code == 1 and "no space left on the device" in result.stderr


@pytest.mark.parametrize("out", ["/proc/forbidden/out", "/proc/self/out", "/dev/null/out"])
def test_virtual_filesystems_and_files_in_the_way_are_exit_2(out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = pack("-o", out)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --out {out}: ") and "internal error" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_name_too_long_is_exit_2_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in ("x" * 250, "y" * 300, f"{'z' * 300}/out"):  # beside it, .packcli-work-NAME would not fit
        result = pack("-o", out)
        assert result.exit_code == 2 and "too long" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_a_tokenizer_that_fails_to_load_leaves_no_work_folder(tmp_path, monkeypatch):
    """The tokenizer is loaded after the lock and the work folder exist: they go with the failure."""
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "tok.json"
    broken.write_text('{"model": {"type": "BPE", "vocab": [1, 2]}}')
    before = listing(tmp_path)
    result = runner.invoke(app, ["pack", CORPUS, "-t", str(broken), "-o", "out", "--workers", "1"])
    assert result.exit_code == 2 and "not a valid tokenizer.json" in result.stderr, result.output
    assert listing(tmp_path) == before


def test_a_tokenizer_config_is_named_for_what_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["pack", CORPUS, "-t", f"{TOKENIZER}/tokenizer_config.json", "-o", "out"])
    assert result.exit_code == 2
    assert (f"is the model's tokenizer_config.json, not its tokenizer.json; pass its folder {TOKENIZER}"
            in result.stderr)
    shutil.copy(f"{TOKENIZER}/tokenizer_config.json", tmp_path / "my_tokenizer.json")  # renamed: found by content
    result = runner.invoke(app, ["pack", CORPUS, "-t", "my_tokenizer.json", "-o", "out"])
    assert result.exit_code == 2 and "it looks like a tokenizer_config.json" in result.stderr, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_tokenizer.json"]


def test_an_out_that_changed_during_the_run_is_not_replaced(tmp_path, monkeypatch):
    """Checked again just before the swap: a file the user put in --out while packing keeps it."""
    import packcli.job.workspace as workspace

    out = tmp_path / "out"
    pack_corpus(config(out, seed=1))
    real = workspace.pause_at

    def meanwhile(point, detail=""):
        if point == "rename":
            (out / "notes.txt").write_text("written while packcli ran")
        real(point, detail)

    monkeypatch.setattr(workspace, "pause_at", meanwhile)
    with pytest.raises(InputError, match="(?s)holds notes.txt.*nothing was replaced"):
        pack_corpus(config(out, force=True))
    assert (out / "notes.txt").read_text() == "written while packcli ran"
    assert not list((tmp_path / ".packcli-work-out").glob("tmp-*"))


def test_only_the_scratch_folder_packcli_made_is_removed(tmp_path):
    """`discard_scratch_dir` removes the marked columns' folder it made; handed a folder of the user's (an
    unmarked one holding files) it removes nothing."""
    with Workspace(tmp_path / "out") as space:
        scratch = space.new_scratch_dir()
        (scratch / "column-0000").write_bytes(b"\0" * 8)
        foreign = space.work / "tmp-columns-of-mine"
        foreign.mkdir()
        (foreign / "column-0000").write_bytes(b"mine")
        (foreign / "notes.txt").write_text("mine")
        space.discard_scratch_dir(scratch)
        space.discard_scratch_dir(foreign)
        assert not scratch.exists()
        assert (foreign / "column-0000").read_bytes() == b"mine" and (foreign / "notes.txt").read_text() == "mine"
