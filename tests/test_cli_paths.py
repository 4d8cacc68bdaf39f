"""The file system against ``pack --out`` and the inputs, ``show --html`` and ``stats --plot``: a user's file is never lost.

Every case builds the same small tree (an input, an empty folder, a packcli artifact, a folder of
the user's, a file, a link to each, read-only folders), points ``--out`` (or the page, or the plot)
at one of them, with and without ``--force``, and hashes the whole tree before and after. Whatever
the exit code, every entry that was not packcli's is still there with the same bytes; a refusal
(exit 2) changes nothing at all, not even a lock or a work folder beside ``--out``; the exit code is
the one the rule gives (`expected_pack`). Read-only folders refuse only where the user cannot write
(root can: then the rule is the empty folder's).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.artifact.listing import not_an_artifact
from packcli.cli import app
from packcli.owned import is_own_output

runner = CliRunner()
TOKENIZER = str(FIXTURES / "tokenizer")
TARGETS = ("empty", "artifact", "foreign", "input-dir", "input-parent", "file")  # what a link may point at
OUT_KINDS = ("missing-nested", *TARGETS, *(f"link-{t}" for t in TARGETS), "read-only", "in-read-only", "cwd")
REASONS = {"foreign": "holds notes.txt, and no manifest.json", "input-dir": "holds the input",
           "input-parent": "holds the input", "file": "exists and is a file", "cwd": "is the current directory",
           "artifact": "exists (a packcli artifact); pass --force", "read-only": "not writable",
           "in-read-only": "cannot write in", **{f"link-{t}": "is a symbolic link" for t in TARGETS}}


@pytest.fixture(scope="module")
def small_artifact(tmp_path_factory) -> tuple[Path, Path]:
    """12 records, and the packcli artifact made of them: what a case's tree holds (and --force may replace)."""
    corpus = tmp_path_factory.mktemp("corpus") / "chat.jsonl"
    corpus.write_text("".join((FIXTURES / "corpus" / "text.jsonl").read_text().splitlines(True)[:12]))
    out = tmp_path_factory.mktemp("art") / "artifact"
    result = runner.invoke(app, ["pack", str(corpus), "-t", TOKENIZER, "-o", str(out), "--workers", "1", "-c", "512"])
    assert result.exit_code == 0, result.output
    return corpus, out


def build_tree(root: Path, corpus: Path, artifact: Path) -> None:
    """root/corpus/data/chat.jsonl (the input), root/links/chat.jsonl (a link to it), and one of everything."""
    (root / "corpus" / "data").mkdir(parents=True)
    shutil.copy(corpus, root / "corpus" / "data" / "chat.jsonl")
    (root / "links").mkdir()
    os.symlink(root / "corpus" / "data" / "chat.jsonl", root / "links" / "chat.jsonl")
    (root / "empty").mkdir()
    shutil.copytree(artifact, root / "artifact")
    (root / "foreign").mkdir()
    (root / "foreign" / "notes.txt").write_text("my notes")
    (root / "file").write_text("my file")
    for target in TARGETS:
        os.symlink(root / _where(target), root / f"link-{target}")
    (root / "read-only").mkdir(mode=0o555)
    (root / "ro-parent").mkdir(mode=0o555)


def _where(kind: str) -> str:
    return {"input-dir": "corpus/data", "input-parent": "corpus"}.get(kind, kind)


def out_path(root: Path, kind: str) -> str:
    if kind == "missing-nested":
        return str(root / "new" / "deeper" / "out")
    if kind == "in-read-only":
        return str(root / "ro-parent" / "out")
    if kind == "cwd":
        return "."
    return str(root / _where(kind))


def expected_pack(kind: str, force: bool) -> int:
    """The rule: an empty or missing folder is written, an artifact replaced with --force, nothing else."""
    if kind in ("read-only", "in-read-only"):
        folder = "read-only" if kind == "read-only" else "ro-parent"
        return 0 if os.access(folder, os.W_OK) else 2  # (run in the tree's root)
    if kind == "artifact":
        return 0 if force else 2
    return 0 if kind in ("missing-nested", "empty") else 2


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a folder, a link and its target, or a file's sha256."""
    entries = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                entries[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                entries[rel] = "dir"
            else:
                entries[rel] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


@pytest.fixture()
def tree(tmp_path, small_artifact, monkeypatch):
    build_tree(tmp_path, *small_artifact)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for folder in ("read-only", "ro-parent"):  # so pytest can remove the tree
        (tmp_path / folder).chmod(0o755)


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("given", ["input", "link-to-input"])
@pytest.mark.parametrize("kind", OUT_KINDS)
def test_pack_out_against_every_kind_of_path(kind, given, force, tree):
    before = snapshot(tree)
    source = "corpus/data/chat.jsonl" if given == "input" else "links/chat.jsonl"
    out = out_path(tree, kind)
    result = runner.invoke(app, ["pack", source, "-t", TOKENIZER, "-o", out, "--workers", "1", "-c", "512",
                                 *(["--force"] if force else [])])
    want = expected_pack(kind, force)
    assert result.exit_code == want, (kind, result.output)
    after = snapshot(tree)
    assert not [p for p in after if Path(p).name.startswith(".packcli-")], "no lock, work folder or probe left"
    if want == 2:
        lines = result.stderr.strip().split("\n")
        assert lines[0].startswith(f"error: --out {out}: ") and len(lines) == 1, result.stderr
        assert REASONS[kind] in lines[0], lines[0]
        assert after == before, "a refusal changed the tree"
        return
    written = os.path.relpath(Path(out).absolute(), tree)
    assert not_an_artifact(tree / written) is None
    kept = {p: v for p, v in before.items() if not (p == written or p.startswith(written + os.sep))}
    assert {p: after[p] for p in kept if p in after} == kept, "a file that was not packcli's changed or went"
    new = set(after) - set(before)
    assert all(p == written or p.startswith(written + os.sep) or written.startswith(p + os.sep) for p in new), new


OUTPUT_KINDS = ("missing", "own", "foreign", "link-own", "link-foreign", "folder", "no-folder", "under-file",
                "read-only")


def output_case(root: Path, kind: str, suffix: str, make_own) -> tuple[str, int]:  # noqa: ANN001
    """The path a page or plot goes to, made ready as ``kind``, and the exit code the rule gives."""
    if kind in ("own", "link-own"):
        make_own(root / f"own{suffix}")
    (root / f"foreign{suffix}").write_text("the user's own file, with packcli's suffix")
    os.symlink(root / f"own{suffix}", root / f"link-own{suffix}")
    os.symlink(root / f"foreign{suffix}", root / f"link-foreign{suffix}")
    (root / f"folder{suffix}").mkdir()
    path = {"no-folder": f"no-such/x{suffix}", "under-file": f"file/x{suffix}",
            "read-only": f"read-only/x{suffix}"}.get(kind, f"{kind}{suffix}")
    want = 0 if kind in ("missing", "own") else 2
    if kind == "read-only":
        want = 0 if os.access("read-only", os.W_OK) else 2
    return path, want


@pytest.mark.parametrize("command", ["show", "stats"])
@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_html_and_plot_replace_only_what_packcli_wrote(command, kind, tree):
    suffix = ".html" if command == "show" else ".png"
    args = (["show", "artifact", "--pack", "0", "--html"] if command == "show"
            else ["stats", "artifact", "--plot"])

    def make_own(path: Path) -> None:
        assert runner.invoke(app, [*args, str(path)]).exit_code == 0

    path, want = output_case(tree, kind, suffix, make_own)
    before, inode = snapshot(tree), os.stat(path).st_ino if os.path.exists(path) else None
    result = runner.invoke(app, [*args, path])
    assert result.exit_code == want, (kind, result.output)
    after = snapshot(tree)
    assert not [p for p in after if Path(p).name.startswith(".packcli-")]
    if want == 2:
        assert result.stderr.startswith("error: ") and path in result.stderr.split("\n")[0], result.stderr
        assert after == before
        return
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed <= {path}, changed  # the page or plot, and nothing else
    assert is_own_output(tree / path) and os.stat(path).st_ino != inode  # written anew (the same bytes, for "own")
