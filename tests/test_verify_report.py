"""`packcli.verify.report`: the results name the offending shard, row and example, and the seam table with a
status per example (``verify --seam-status``) flags the broken one."""

from __future__ import annotations

from packcli.verify import verify_artifact
from packcli.verify.faults import FAULTS, prepare_workspace


def test_seam_status_names_the_broken_example(packed, tmp_path):
    import pyarrow.csv as pacsv

    from packcli.verify.report import write_seam_status

    fault = next(f for f in FAULTS if f.name == "seam-label")
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    report = verify_artifact(copy)
    bad = write_seam_status(report, str(copy), str(tmp_path / "seams.csv"))
    rows = pacsv.read_csv(tmp_path / "seams.csv").to_pylist()
    flagged = [r for r in rows if r["verify"] != "ok"]
    assert bad == len(flagged) >= 1 and "seam label supervised" in flagged[0]["verify"]
    from packcli.artifact.manifest import read_manifest

    assert len(rows) == read_manifest(copy)["counts"]["records"] and any(r["verify"] == "ok" for r in rows)


def test_violation_names_shard_row_and_example(packed, tmp_path):
    fault = next(f for f in FAULTS if f.name == "seam-label")
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    layout = next(c for c in verify_artifact(copy).checks if c.name == "pack_layout")
    v = layout.violations[0]
    assert v.shard == "shard-00000.parquet" and v.row is not None and v.example_id is not None
