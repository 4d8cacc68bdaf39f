"""--engine ray: byte-identical to the local engine, resumable, and a clear message without Ray."""

from __future__ import annotations

import sys

import pytest

from packcli.config import PackConfig
from packcli.errors import PackcliError
from packcli.job.run import pack_corpus

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def cfg(corpus_files, tokenizer_dir, out, **kw):
    return PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=out, capacity=512,
                      lines_per_unit=20, **kw)


@pytest.mark.parametrize("workers", [1, 2])
def test_ray_is_byte_identical_to_local(ray_session, tmp_path, corpus_files, tokenizer_dir, workers):
    from packcli.engine.ray import RayEngine

    local = pack_corpus(cfg(corpus_files, tokenizer_dir, tmp_path / "local"))
    remote = pack_corpus(cfg(corpus_files, tokenizer_dir, tmp_path / "ray"), engine=RayEngine(workers=workers))
    assert local.manifest["manifest_sha256"] == remote.manifest["manifest_sha256"]
    names = [s["name"] for s in local.manifest["shards"]] + ["examples.parquet", "rejects.jsonl"]
    for name in names:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name


def test_ray_surfaces_record_errors(ray_session, tmp_path, tokenizer_dir):
    from conftest import FIXTURES

    from packcli.engine.ray import RayEngine
    from packcli.errors import RecordError

    with pytest.raises(RecordError, match="broken.jsonl:3"):
        pack_corpus(cfg([FIXTURES / "corpus" / "broken.jsonl"], tokenizer_dir, tmp_path / "o", on_error="fail"),
                    engine=RayEngine(workers=2))


def test_without_ray_installed_says_how_to_install(monkeypatch, tmp_path, corpus_files, tokenizer_dir):
    from packcli.engine.ray import RayEngine

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(PackcliError, match="needs Ray") as info:
        pack_corpus(cfg(corpus_files, tokenizer_dir, tmp_path / "o"), engine=RayEngine())
    assert "pip install 'packcli[ray]'" in str(info.value)
    assert not (tmp_path / "o").exists()


def test_multi_node_cluster_refuses_a_driver_local_out(ray_session, monkeypatch, tmp_path, corpus_files, tokenizer_dir):
    from packcli.engine.ray import RayEngine

    monkeypatch.setattr(ray_session, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    with pytest.raises(PackcliError, match="2 nodes") as info:
        pack_corpus(cfg(corpus_files, tokenizer_dir, tmp_path / "o"), engine=RayEngine(shared=f"`out` {tmp_path / 'o'}"))
    assert "`shared_fs`" in str(info.value)


def test_cli_engine_ray(ray_session, tmp_path, corpus_files, tokenizer_dir):
    import json

    from typer.testing import CliRunner

    from packcli.cli import app

    result = CliRunner().invoke(app, ["pack", *corpus_files, "-t", str(tokenizer_dir), "-o", str(tmp_path / "o"),
                                      "-c", "512", "--engine", "ray", "--workers", "2", "--unit-lines", "30", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["packs"] > 0


def test_ray_reads_parquet_and_datasets_like_the_local_engine(ray_session, tmp_path, tokenizer_dir):
    """Parquet spans, a datasets directory, a mixture and dedupe: byte-identical to the local engine."""
    datasets = pytest.importorskip("datasets")
    from conftest import jsonl_records, write_jsonl, write_parquet

    from packcli.engine.ray import RayEngine

    chat = jsonl_records("sharegpt.jsonl")
    inputs = [write_parquet(tmp_path / "qa.parquet", jsonl_records("prompt_completion.jsonl"), row_group_size=9),
              write_jsonl(tmp_path / "chat.jsonl", chat[:20] + chat[:5])]
    datasets.Dataset.from_list(chat[20:]).save_to_disk(str(tmp_path / "ds"), num_shards=2)
    inputs.append(tmp_path / "ds")

    def run(out, **kw):
        return pack_corpus(PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out,
                                      capacity=512, lines_per_unit=8, dedupe="exact",
                                      mix="chat.jsonl=2x,qa.parquet=0.5x"), **kw)
    local = run(tmp_path / "local")
    remote = run(tmp_path / "ray", engine=RayEngine(workers=2))
    # 5 repeated lines, and 2 sharegpt.jsonl records that differ only in a role alias ("bard"/"assistant")
    assert local.manifest["counts"]["duplicate"] == 7 and remote.units == local.units > len(inputs)
    assert local.manifest["manifest_sha256"] == remote.manifest["manifest_sha256"]
    names = [s["name"] for s in local.manifest["shards"]] + ["examples.parquet", "rejects.jsonl"]
    for name in names:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name


def test_verify_on_ray_gives_the_local_report(ray_session, packed):
    from packcli.engine.ray import RayEngine
    from packcli.verify import verify_artifact

    local, remote = verify_artifact(packed, workers=1), verify_artifact(packed, engine=RayEngine(workers=2))
    assert remote.ok and remote.to_dict() == local.to_dict()


@pytest.mark.parametrize("name", ["label-masked", "dropped-without-record"])
def test_verify_on_ray_catches_reconstruction_faults_as_locally(ray_session, packed, tmp_path, name):
    """Ray workers send digests back, as local workers do; the driver finds and explains the mismatch."""
    from packcli.engine.ray import RayEngine
    from packcli.verify import verify_artifact
    from packcli.verify.faults import FAULTS, prepare_workspace

    fault = next(f for f in FAULTS if f.name == name)
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    local, remote = verify_artifact(copy, workers=1), verify_artifact(copy, engine=RayEngine(workers=2))
    check = next(c for c in remote.checks if c.name == "reconstruction")
    assert not check.ok and any(fault.expect in v.message for v in check.violations), check.violations
    assert remote.to_dict() == local.to_dict()


def test_cli_verify_engine_ray(ray_session, packed, monkeypatch):
    import json

    from typer.testing import CliRunner

    from packcli.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(packed), "--engine", "ray", "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"]
    usage = runner.invoke(app, ["verify", str(packed), "--ray-address", "auto"])
    assert usage.exit_code == 2 and "--ray-address and --shared-fs need --engine ray" in usage.output
    monkeypatch.setattr(ray_session, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    refused = runner.invoke(app, ["verify", str(packed), "--engine", "ray"])
    assert refused.exit_code == 2 and "the sources and the tokenizer may be local" in refused.output
