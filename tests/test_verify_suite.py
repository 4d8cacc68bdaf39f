"""`packcli.verify.suite.verify_artifact`: a clean artifact passes every check, a bad worker count is refused,
and without the tokenizer the structure alone is checked."""

from __future__ import annotations

import pytest

from packcli.verify import verify_artifact


def test_clean_artifact_passes(packed):
    report = verify_artifact(packed)
    assert report.ok, report.to_dict()
    checks = {c.name: c for c in report.checks}
    from packcli.artifact.manifest import read_manifest

    assert checks["reconstruction"].checked == read_manifest(packed)["counts"]["records"]  # every record
    assert checks["pack_layout"].checked > 10 and checks["global"].checked > 200


def test_workers_below_one_is_a_usage_error(packed):
    from packcli.errors import InputError

    with pytest.raises(InputError, match="`workers` must be an integer from 1 to 1,024, got 0"):
        verify_artifact(packed, workers=0)


def test_structure_only_without_tokenizer(packed_copy, tmp_path):
    import json

    path = packed_copy / "manifest.json"
    data = json.loads(path.read_text())
    data["unhashed"]["provenance"]["tokenizer"] = str(tmp_path / "gone.json")  # unhashed: no reseal needed
    path.write_text(json.dumps(data))
    from packcli.errors import InputError

    with pytest.raises(InputError, match="not found"):
        verify_artifact(packed_copy)
    report = verify_artifact(packed_copy, reconstruct=False)
    assert report.ok and "reconstruction" not in {c.name for c in report.checks}


def test_verify_keeps_its_columns_in_a_folder_it_made_and_removes(packed, tmp_path, monkeypatch):
    """verify's per-example columns (the seam table's, the segments') are mapped files in a marked folder under
    the temporary folder (`packcli.job.scratch`), removed when it is done; a user's folder and file beside it
    stay. The report is the one the same checks give with every column in memory."""
    import mmap
    import tempfile

    from packcli.job.scratch import IN_MEMORY
    from packcli.owned import MARKER_NAME
    from packcli.verify import suite

    monkeypatch.setattr(mmap, "PAGESIZE", 1)  # the fixture's columns are smaller than a page: map them anyway
    temp = tmp_path / "tmp"
    (temp / "packcli-verify-mine").mkdir(parents=True)  # a user's folder with packcli's prefix: not packcli's
    (temp / "packcli-verify-mine" / "notes.txt").write_text("mine")
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    seen = {}
    plan = suite.check_plan

    def spying(manifest, rows, facts, result, *args, **kwargs):
        ours = [p for p in temp.iterdir() if (p / MARKER_NAME).is_file()]
        seen.update(folders=ours, files=sorted(f.name for p in ours for f in p.iterdir()),
                    mapped=isinstance(getattr(rows["example_id"].values.base, "obj", None), mmap.mmap))
        return plan(manifest, rows, facts, result, *args, **kwargs)

    monkeypatch.setattr(suite, "check_plan", spying)
    report = verify_artifact(packed, reconstruct=False)
    assert report.ok
    assert len(seen["folders"]) == 1 and seen["mapped"]
    assert any(name.startswith("column-") for name in seen["files"])
    assert sorted(p.name for p in temp.iterdir()) == ["packcli-verify-mine"]  # ours gone, the user's kept
    assert (temp / "packcli-verify-mine" / "notes.txt").read_text() == "mine"
    monkeypatch.setattr(suite, "Scratch", lambda folder: IN_MEMORY)
    assert verify_artifact(packed, reconstruct=False).to_dict() == report.to_dict()
