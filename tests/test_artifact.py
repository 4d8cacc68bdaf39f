"""Older contracts: refused with a rebuild command that works (contract 2's packs still read by the loader,
whose shards are the same)."""

from __future__ import annotations

import shlex

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.cli import app
from packcli.contract import CONTRACT_VERSION
from packcli.errors import ContractError

V1 = FIXTURES / "packed-v1"
V2 = FIXTURES / "packed-v2"


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
