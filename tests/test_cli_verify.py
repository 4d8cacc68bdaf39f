"""`packcli verify` (`packcli.cli.verify`): its exit codes and --json, and --self-test."""

from __future__ import annotations

import json

from conftest import run_cli


def test_pack_json_and_verify_exit_codes(tmp_path, corpus_files, tokenizer_dir):
    out = tmp_path / "o"
    result = run_cli("pack", *corpus_files, "-t", tokenizer_dir, "-o", out, "-c", 512, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"]["density"] > 0.9
    ok = run_cli("verify", out, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["ok"] is True
    shard = out / "shard-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    bad = run_cli("verify", out, "--json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["ok"] is False


def test_self_test_cli(packed):
    result = run_cli("verify", packed, "--self-test", "--json")
    assert result.exit_code == 0, result.output
    faults = json.loads(result.stdout)["faults"]
    from packcli.verify.faults import FAULTS

    assert len(faults) == 1 + len(FAULTS) and all(f["caught"] for f in faults)  # the clean copy, then each fault


def test_scratch_dir_is_where_verify_keeps_its_columns(packed, tmp_path, monkeypatch):
    """--scratch-dir: a missing folder is refused before any work (exit 2, the flag named); a given one gets
    verify's marked folder while it runs, which goes when it is done; what the
    user keeps there stays."""
    import mmap

    from packcli.verify import suite

    missing = run_cli("verify", packed, "--scratch-dir", tmp_path / "nowhere")
    assert missing.exit_code == 2 and "--scratch-dir" in missing.output and "no such directory" in missing.output
    place = tmp_path / "fast-disk"
    place.mkdir()
    (place / "keep.txt").write_text("the user's")
    monkeypatch.setattr(mmap, "PAGESIZE", 1)  # the fixture's columns are smaller than a page: map them anyway
    during = []
    plan = suite.check_plan
    monkeypatch.setattr(suite, "check_plan", lambda *args, **kwargs: (during.extend(place.iterdir()),
                                                                      plan(*args, **kwargs))[1])
    result = run_cli("verify", packed, "--no-reconstruct", "--scratch-dir", place, "--json")
    assert result.exit_code == 0, result.output
    ours = [p for p in during if p.name.startswith("packcli-verify-")]
    assert len(ours) == 1 and sorted(p.name for p in place.iterdir()) == ["keep.txt"]


def test_a_scratch_folder_inside_the_artifact_is_refused(packed, monkeypatch):
    """The artifact is a closed set of files: verify's own scratch folder there would be reported as a stranger,
    so --scratch-dir (or $TMPDIR) inside it is refused before any work, naming which."""
    import tempfile

    import pytest

    from packcli.errors import InputError
    from packcli.verify import verify_artifact

    given = run_cli("verify", packed, "--scratch-dir", packed)
    assert given.exit_code == 2 and "--scratch-dir" in given.output and "inside the artifact" in given.output
    monkeypatch.setattr(tempfile, "tempdir", str(packed))
    with pytest.raises(InputError, match=r"the temporary folder \(\$TMPDIR\) .* is inside the artifact"):
        verify_artifact(packed, reconstruct=False)
    assert sorted(p.name for p in packed.iterdir() if p.name.startswith("packcli-")) == []


def test_a_full_scratch_disk_is_reported_and_cleared_not_a_crash(packed, tmp_path, monkeypatch):
    """The disk filling up under verify's columns: exit 1 (a refusal mid-run, as documented), a message saying where
    and what to do, and nothing of verify's left there."""
    import errno
    import mmap
    import os

    monkeypatch.setattr(mmap, "PAGESIZE", 1)  # the fixture's columns are smaller than a page: make files anyway

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    place = tmp_path / "small-disk"
    place.mkdir()
    result = run_cli("verify", packed, "--no-reconstruct", "--scratch-dir", place)
    assert result.exit_code == 1, result.output
    assert "verify's scratch folder in" in result.output and "no space left on the device" in result.output
    assert "--scratch-dir" in result.output and list(place.iterdir()) == []
