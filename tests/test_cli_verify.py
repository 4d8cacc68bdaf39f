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
