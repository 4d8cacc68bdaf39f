"""verify: a clean artifact passes; every seeded fault is caught by the check meant for it."""

from __future__ import annotations

import pytest

from packcli.contract import SEAM_TABLE_NAME
from packcli.verify import verify_artifact
from packcli.verify.faults import FAULTS, prepare_workspace, run_self_test

HASH_SEALED = {"byte-flip", "manifest-edited", "card-edited"}  # faults that do not re-seal the manifest


def test_clean_artifact_passes(packed):
    report = verify_artifact(packed)
    assert report.ok, report.to_dict()
    checks = {c.name: c for c in report.checks}
    from packcli.artifact.manifest import read_manifest

    assert checks["reconstruction"].checked == read_manifest(packed)["counts"]["records"]  # every record
    assert checks["pack_layout"].checked > 10 and checks["global"].checked > 200


def test_worker_processes_check_the_same_records(packed):
    serial, parallel = verify_artifact(packed, workers=1), verify_artifact(packed, workers=2)
    assert parallel.ok and serial.to_dict()["checks"] == parallel.to_dict()["checks"]


def test_a_small_artifact_is_reconstructed_here_alone(packed, monkeypatch):
    """Without --workers, sources of kilobytes start no worker process (`auto_processes`); --workers 2 does."""
    from packcli.engine import local

    started: list[int] = []
    real = local.SharedPool
    monkeypatch.setattr(local, "SharedPool", lambda workers, warm=None: started.append(workers) or real(workers, warm))
    assert verify_artifact(packed).ok and verify_artifact(packed, workers=2).ok
    assert started == [1, 2]


def test_verify_holds_one_shard_at_a_time(packed, monkeypatch):
    """Each shard is read, checked and reduced to its segments' digests before the next is read, so verify's
    memory follows the examples, not the tokens; a clean artifact reads no shard a second time."""
    import weakref

    from packcli.artifact.manifest import read_manifest
    from packcli.verify import integrity, packs

    live, loads, most = [], [], [0]

    def counting(real):
        def load(table, name):
            flat = real(table, name)
            live.append(weakref.ref(flat))
            loads.append(name)
            most[0] = max(most[0], sum(ref() is not None for ref in live))
            return flat
        return load

    monkeypatch.setattr(integrity, "load_flat", counting(integrity.load_flat))
    monkeypatch.setattr(packs, "load_flat", counting(packs.load_flat))
    assert verify_artifact(packed, render_oracle=None).ok
    shards = [info["name"] for info in read_manifest(packed)["shards"]]
    assert len(shards) >= 3 and loads == shards and most[0] == 1


@pytest.mark.parametrize("name", ["label-masked", "dropped-without-record"])
def test_worker_processes_catch_reconstruction_faults(name, packed, tmp_path):
    """The digest path: workers send digests, this process finds the mismatch and explains it."""
    fault = next(f for f in FAULTS if f.name == name)
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    serial, parallel = verify_artifact(copy, workers=1), verify_artifact(copy, workers=2)
    check = next(c for c in parallel.checks if c.name == "reconstruction")
    assert not check.ok and any(fault.expect in v.message for v in check.violations), check.violations
    assert serial.to_dict()["checks"] == parallel.to_dict()["checks"]


def test_a_packed_row_shorter_than_its_record_is_caught(packed_copy):
    """The seam table says packed with L - 1 tokens where the record has L: the pack holds a prefix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packcli.verify.faults import _reseal

    path = packed_copy / SEAM_TABLE_NAME
    seam = pq.read_table(path)
    i = seam["status"].to_pylist().index("packed")
    lengths = seam["length"].to_pylist()
    lengths[i] -= 1
    pq.write_table(seam.set_column(seam.schema.get_field_index("length"), "length", pa.array(lengths, pa.int32())),
                   path, compression="zstd", write_statistics=False)
    _reseal(packed_copy)
    check = next(c for c in verify_artifact(packed_copy).checks if c.name == "plan")
    assert any(v.field == "length" and f"length is {lengths[i]}" in v.message and f"gives {lengths[i] + 1}" in v.message
               for v in check.violations), check.violations


def test_workers_below_one_is_a_usage_error(packed):
    from packcli.errors import InputError

    with pytest.raises(InputError, match="`workers` must be an integer from 1 to 1,024, got 0"):
        verify_artifact(packed, workers=0)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_is_caught_by_its_check(fault, packed, tmp_path):
    copy = prepare_workspace(packed, tmp_path)
    assert verify_artifact(copy).ok, "the workspace copy must pass before the fault"
    kwargs = fault.apply(copy, tmp_path)
    report = verify_artifact(copy, **kwargs)
    checks = {c.name: c for c in report.checks}
    assert not report.ok
    assert any(fault.expect in v.message for v in checks[fault.check].violations), checks[fault.check]
    if fault.name not in HASH_SEALED and fault.check not in ("contract_drift", "integrity"):
        # A consistent forgery: hashes match, so only the semantic check stands between it and training.
        assert checks["integrity"].ok, checks["integrity"].violations


def test_violation_names_shard_row_and_example(packed, tmp_path):
    fault = next(f for f in FAULTS if f.name == "seam-label")
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    layout = next(c for c in verify_artifact(copy).checks if c.name == "pack_layout")
    v = layout.violations[0]
    assert v.shard == "shard-00000.parquet" and v.row is not None and v.example_id is not None


def test_self_test_runs_all_faults(packed, tmp_path):
    results = run_self_test(packed, tmp_path)
    assert [r.name for r in results] == ["clean-copy"] + [f.name for f in FAULTS]
    assert all(r.caught for r in results), [r for r in results if not r.caught]


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
