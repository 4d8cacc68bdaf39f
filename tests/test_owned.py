"""What packcli may remove or replace (`packcli.owned`, `packcli.artifact.listing`): only what carries its mark.

Each recogniser is fed the look-alike it must refuse: a folder with the right name and no marker,
an artifact with one extra file, a manifest edited by hand, a page or plot with packcli's suffix
that packcli did not write, a link to something that is packcli's.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import FIXTURES

from packcli.artifact.listing import listed_names, not_an_artifact, strangers
from packcli.errors import PathError
from packcli.owned import (
    MARKER_NAME,
    is_marked,
    is_own_output,
    make_folder,
    remove_folder,
    replace_problems,
    scratch_folder,
    write_replacing,
)


@pytest.fixture()
def artifact(tmp_path):
    return shutil.copytree(FIXTURES / "packed", tmp_path / "art")


@pytest.mark.parametrize("name", ["packed", "packed-v1"])
def test_a_packcli_artifact_of_either_contract_is_recognised(name, tmp_path):
    art = shutil.copytree(FIXTURES / name, tmp_path / name)
    assert not_an_artifact(art) is None
    manifest = json.loads((art / "manifest.json").read_text())
    assert listed_names(manifest) == {p.name for p in art.iterdir()}


def test_one_file_more_makes_a_folder_the_users(artifact):
    (artifact / "notes.txt").write_text("mine")
    assert not_an_artifact(artifact) == "holds notes.txt, which its manifest.json does not list"
    (artifact / "notes.txt").unlink()
    (artifact / "sub").mkdir()
    assert "holds sub" in not_an_artifact(artifact)
    (artifact / "sub").rmdir()
    os.symlink(artifact / "rejects.jsonl", artifact / "shard-09999.parquet")
    assert "holds shard-09999.parquet" in not_an_artifact(artifact)


def test_a_listed_name_that_is_a_link_or_a_folder_is_not_the_artifacts(artifact, tmp_path):
    (tmp_path / "elsewhere.jsonl").write_text("the user's")
    (artifact / "rejects.jsonl").unlink()
    os.symlink(tmp_path / "elsewhere.jsonl", artifact / "rejects.jsonl")
    assert strangers(artifact, json.loads((artifact / "manifest.json").read_text())) == [("rejects.jsonl", "a symbolic link")]
    assert not remove_folder(artifact) and (tmp_path / "elsewhere.jsonl").exists()


def test_a_manifest_packcli_did_not_write_is_no_mark(artifact, tmp_path):
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["shards"].append({"name": "notes.txt"})  # edited by hand to claim a file: the hash no longer matches
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    (artifact / "notes.txt").write_text("mine")
    assert "hash does not match" in not_an_artifact(artifact)
    (artifact / "manifest.json").write_text("{not json")
    assert "not JSON" in not_an_artifact(artifact)
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"name": "another tool's manifest"}))
    assert "hash does not match" in not_an_artifact(other)
    assert not remove_folder(other) and (other / "manifest.json").exists()


def test_only_a_marked_folder_an_artifact_or_an_empty_one_is_removed(tmp_path, artifact):
    named = tmp_path / ".packcli-work-out"  # packcli's name, the user's folder
    named.mkdir()
    (named / "unit-00000.json").write_text("mine")
    assert not remove_folder(named) and (named / "unit-00000.json").exists()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / MARKER_NAME).write_text("not packcli's text")
    (fake / "x").write_text("mine")
    assert not is_marked(fake) and not remove_folder(fake)
    made = make_folder(tmp_path, "tmp-", "a test")
    (made / "inside").mkdir()
    (made / "inside" / "f").write_text("packcli's")
    assert remove_folder(made) and not made.exists()
    assert remove_folder(artifact) and not artifact.exists()
    (tmp_path / "empty").mkdir()
    assert remove_folder(tmp_path / "empty")


def test_a_link_to_a_marked_folder_is_not_followed(tmp_path):
    made = make_folder(tmp_path, "tmp-", "a test")
    os.symlink(made, tmp_path / "link")
    assert not is_marked(tmp_path / "link") and not remove_folder(tmp_path / "link")
    assert made.is_dir() and (tmp_path / "link").is_symlink()


def test_a_scratch_folder_goes_and_a_foreign_one_in_its_place_stays(tmp_path):
    with scratch_folder("packcli-test-", "a test") as folder:
        (folder / "x").write_text("scratch")
    assert not folder.exists()
    with scratch_folder("packcli-test-", "a test") as folder:
        (folder / MARKER_NAME).unlink()  # no longer marked: whatever it holds is not removed
        (folder / "x").write_text("now unmarked")
    assert (folder / "x").exists()
    shutil.rmtree(folder)


def _plot(path):
    import numpy as np

    from packcli.plots import plot_stats

    return plot_stats(path, lengths=np.array([3, 5, 8]), capacity=8, quantiles={"p50": 5.0})


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_a_plot_carries_packclis_mark_and_a_look_alike_does_not(suffix, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = _plot(tmp_path / f"ours{suffix}")
    assert is_own_output(ours)
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    fig.savefig(tmp_path / f"theirs{suffix}")  # matplotlib's own metadata, not packcli's
    plt.close(fig)
    assert not is_own_output(tmp_path / f"theirs{suffix}")
    assert "packcli did not write it" in replace_problems("--plot", tmp_path / f"theirs{suffix}")[0]
    assert replace_problems("--plot", ours) == []


def test_pages_and_seam_tables_carry_packclis_mark(packed, tmp_path):
    from typer.testing import CliRunner

    from packcli.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["show", str(packed), "--pack", "0", "--html", str(tmp_path / "p.html")]).exit_code == 0
    assert is_own_output(tmp_path / "p.html")
    (tmp_path / "mine.html").write_text("<!doctype html><html><head><meta name='generator' content='hugo'>")
    assert not is_own_output(tmp_path / "mine.html")
    for name in ("s.csv", "s.parquet"):
        result = runner.invoke(app, ["verify", str(packed), "--no-reconstruct", "--seam-out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert is_own_output(tmp_path / name)
    shutil.copy(packed / "examples.parquet", tmp_path / "copy.parquet")  # a Parquet file packcli wrote, elsewhere
    (tmp_path / "mine.csv").write_text("example_id,verify\n1,ok\n")  # unquoted: not pyarrow's header
    assert not is_own_output(tmp_path / "copy.parquet") and not is_own_output(tmp_path / "mine.csv")


def test_write_replacing_refuses_a_file_that_appeared_meanwhile_and_leaves_no_partial(tmp_path):
    target = tmp_path / "page.html"

    def appears(partial):
        partial.write_text("half")
        target.write_text("the user's, written while packcli ran")

    with pytest.raises(PathError, match="exists and packcli did not write it"):
        write_replacing(target, appears)
    assert target.read_text() == "the user's, written while packcli ran"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]

    def fails(partial):
        partial.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_replacing(tmp_path / "new.html", fails)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]


def test_write_replacing_gives_the_file_the_umasks_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_replacing(tmp_path / "x.html", lambda partial: partial.write_text("x"))
    finally:
        os.umask(old)
    assert (tmp_path / "x.html").stat().st_mode & 0o777 == 0o644
