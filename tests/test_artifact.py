"""The contract on disk: seq_lengths beside cu_seqlens, the dataset card; older contracts refused with a
rebuild command that works (contract 2's packs still read by the loader, whose shards are the same)."""

from __future__ import annotations

import shlex

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.artifact.card import render_card
from packcli.artifact.shards import load_flat
from packcli.cli import app
from packcli.contract import CARD_NAME, CONTRACT_VERSION, file_sha256
from packcli.errors import ContractError

V1 = FIXTURES / "packed-v1"
V2 = FIXTURES / "packed-v2"


def test_seq_lengths_are_the_seams(packed):
    manifest = mf.read_manifest(packed)
    for info in manifest["shards"]:
        flat = load_flat(pq.read_table(packed / info["name"]), info["name"])
        assert flat.rows
        for r in range(flat.rows):
            assert flat.seq_lengths[r].dtype == np.int32
            assert np.array_equal(flat.seq_lengths[r], np.diff(flat.cu[r]))
            assert int(flat.seq_lengths[r].sum()) == flat.num_tokens[r]


def test_contract_1_is_refused_with_the_rebuild_command():
    # fixtures/packed-v1 is the fixture artifact as packcli wrote it under contract 1
    with pytest.raises(ContractError, match=r"made by an older contract \(1\)") as caught:
        mf.read_manifest(V1)
    assert CONTRACT_VERSION == 3 and caught.value.hint.startswith("rebuild with: packcli pack ")
    from packcli.data import PackDataset, iter_packs

    with pytest.raises(ContractError, match="older contract"):
        next(iter_packs(V1))
    with pytest.raises(ContractError, match="older contract"):
        PackDataset(V1)


def test_cli_on_contract_1_prints_one_line_and_exits(monkeypatch):
    monkeypatch.delenv("PACKCLI_DEBUG", raising=False)
    result = CliRunner().invoke(app, ["verify", str(V1)])
    assert result.exit_code == ContractError.exit_code != 0
    assert "made by an older contract (1)" in result.output and "rebuild with: packcli pack" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("old_dir", [V1, V2], ids=["contract-1", "contract-2"])
def test_rebuild_command_rebuilds_the_same_packs(old_dir, tmp_path, monkeypatch):
    """The hint is a working command: run from the repository root, it makes a contract-3 artifact with
    the very packs of the old one (contract 2 added columns and counts, and example ids that name the
    input's occurrence and the copy; contract 3 the chunk columns of the seam table: the tokens, labels
    and seams are the same, and from contract 2 the shards' bytes too)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "rebuilt"
    old = mf.json.loads((old_dir / "manifest.json").read_text())
    args = shlex.split(mf.rebuild_command(old, out))
    assert args[:2] == ["packcli", "pack"]
    result = CliRunner().invoke(app, args[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    new = mf.read_manifest(out)
    assert new["contract_version"] == 3 and _known(new["counts"], old["counts"]) == old["counts"]
    for a, b in zip(old["shards"], new["shards"], strict=True):
        t_old, t_new = pq.read_table(old_dir / a["name"]), pq.read_table(out / b["name"])
        for column in ("input_ids", "labels", "position_ids", "cu_seqlens"):
            assert t_old[column].equals(t_new[column]), column
        if old_dir == V2:
            assert (old_dir / a["name"]).read_bytes() == (out / b["name"]).read_bytes()


def _known(new: object, old: object) -> object:
    """``new`` with only the keys ``old`` has, at every depth (the counts a later contract added left out)."""
    if isinstance(old, dict):
        return {k: _known(new[k], v) for k, v in old.items()}
    if isinstance(old, list):
        return [_known(n, o) for n, o in zip(new, old)]
    return new


def test_contract_2_is_refused_by_verify_stats_and_show_and_read_by_the_loader():
    """fixtures/packed-v2: verify, stats and show read the seam table, whose columns contract 3 changed, so they
    refuse it with the rebuild command; packcli.data reads only the packs, which contract 3 left alone."""
    from packcli.data import PackDataset, iter_packs
    from packcli.stats import artifact_stats

    with pytest.raises(ContractError, match=r"made by an older contract \(2\)") as caught:
        mf.read_manifest(V2)
    assert "rebuild with: packcli pack fixtures/corpus/broken.jsonl" in caught.value.hint
    with pytest.raises(ContractError, match="older contract"):
        artifact_stats(V2)
    for command in (["verify", str(V2)], ["show", str(V2), "--pack", "0"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == ContractError.exit_code and "made by an older contract (2)" in result.output
    packs = list(iter_packs(V2))
    assert len(packs) == mf.json.loads((V2 / "manifest.json").read_text())["counts"]["packs"]
    assert sum(len(batch["input_ids"][0]) for batch in PackDataset(V2, batch_packs=4, seed=0)) == sum(
        len(p.input_ids) for p in packs)


def test_card_is_pinned_and_describes_the_artifact(packed):
    manifest = mf.read_manifest(packed)
    card = manifest["dataset_card"]
    assert card["name"] == CARD_NAME and card["sha256"] == file_sha256(packed / CARD_NAME)
    text = (packed / CARD_NAME).read_text(encoding="utf-8")
    assert text == render_card(mf.Manifest.of(manifest))  # written from the hashed fields alone: reproducible
    assert text.startswith("---\nconfigs:\n- config_name: default\n") and 'path: "shard-*.parquet"' in text
    counts = manifest["counts"]
    for fact in (f"{counts['packs']:,}", f"{counts['supervised_tokens']:,}", f"packing contract {CONTRACT_VERSION}",
                 "padding_free=True", "max_length=None", '"skip_prepare_dataset": True', "load_dataset("):
        assert fact in text, fact


def test_load_dataset_reads_the_folder(packed, tmp_path, monkeypatch):
    """The folder is a Hugging Face dataset repository: load_dataset(out_dir) gets the packs and only them."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    from packcli.data import iter_packs

    ds = datasets.load_dataset(str(packed), split="train", cache_dir=str(tmp_path / "cache"))
    packs = list(iter_packs(packed))
    assert len(ds) == len(packs) == mf.read_manifest(packed)["counts"]["packs"]
    assert {"input_ids", "labels", "seq_lengths", "cu_seqlens"} <= set(ds.column_names)
    assert "example_id" not in ds.column_names  # examples.parquet is not a split
    for i in (0, len(ds) - 1):
        assert ds[i]["input_ids"] == packs[i].input_ids.tolist()
        assert ds[i]["seq_lengths"] == np.diff(packs[i].cu_seqlens).tolist()


def test_the_seam_table_written_group_by_group_is_the_table_written_at_once(packed, tmp_path, monkeypatch):
    """write_seam_table converts its columns one row group at a time (the driver never holds the corpus's whole
    table as Arrow); with groups as pq.write_table cuts them, the bytes are the same, nulls and codes included."""
    import pyarrow as pa

    from packcli.artifact import seams

    table = pq.read_table(packed / "examples.parquet")
    assert table["shard"].null_count and table.num_rows > 7  # rows in no pack: nulls to carry over
    rows = table.to_pydict()
    shards = sorted({s for s in rows["shard"] if s is not None})
    columns = {**rows,
               "status": seams.Codes([sorted(set(rows["status"])).index(s) for s in rows["status"]],
                                     sorted(set(rows["status"]))),
               "shard": seams.Codes([shards.index(s) if s else 0 for s in rows["shard"]], shards,
                                    null=np.array([s is None for s in rows["shard"]])),
               "token_hash": seams.FixedWidth(np.array([h.encode() for h in rows["token_hash"]], dtype="S16")),
               "format": seams.EmptyAsNull([f or "" for f in rows["format"]])}
    monkeypatch.setattr(seams, "ROW_GROUP", 7)
    seams.write_seam_table(tmp_path / "groups.parquet", columns)
    pq.write_table(pa.Table.from_pydict(rows, schema=seams.SEAM_TABLE_SCHEMA), tmp_path / "once.parquet",
                   compression="zstd", write_statistics=False, row_group_size=7)
    assert (tmp_path / "groups.parquet").read_bytes() == (tmp_path / "once.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "groups.parquet").metadata.num_row_groups == -(-table.num_rows // 7)
