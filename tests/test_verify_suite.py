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
