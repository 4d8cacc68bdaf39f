"""The typed manifest (`packcli.artifact.manifest`): the JSON read back key for key and byte for byte, the
settings pack pins, and every `problems` rule fed the shape it refuses."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.cli import app
from packcli.config import PackConfig
from packcli.contract import MANIFEST_NAME
from packcli.errors import ContractError
from packcli.pack.strategies import DEFAULT_WINDOW

FIXTURE = FIXTURES / "packed"


def _data() -> dict:
    return json.loads((FIXTURE / MANIFEST_NAME).read_text(encoding="utf-8"))


def test_the_fixture_manifest_round_trips_byte_for_byte(tmp_path):
    data = _data()
    manifest = mf.Manifest.of(data)
    assert manifest.to_dict() == data
    assert mf.manifest_hash(manifest.to_dict()) == data["manifest_sha256"]
    mf.write_manifest(manifest, tmp_path)
    assert (tmp_path / MANIFEST_NAME).read_bytes() == (FIXTURE / MANIFEST_NAME).read_bytes()


def test_attributes_read_what_the_json_holds():
    data = _data()
    manifest = mf.Manifest.of(data)
    assert manifest.config.capacity == data["config"]["capacity"] == 1024
    assert manifest.inputs[1].sha256 == data["inputs"][1]["sha256"]
    assert manifest.shards[0].rows == data["shards"][0]["rows"]
    assert manifest.seam_table.rows == data["seam_table"]["rows"] and manifest.dataset_card.rows is None
    assert manifest.provenance["tokenizer"] == data["unhashed"]["provenance"]["tokenizer"]


def test_allow_dropped_fields_is_written_only_when_given():
    config = _data()["config"]
    assert "allow_dropped_fields" not in mf.PackSettings.of(config).to_dict()
    given = dict(config, allow_dropped_fields=["tools"])
    settings = mf.PackSettings.of(given)
    assert settings.allow_dropped_fields == ("tools",) and settings.to_dict() == given


def test_pack_settings_resolve_the_window_once(tmp_path):
    def settings(**kw) -> mf.PackSettings:
        return PackConfig(inputs=("x.jsonl",), tokenizer="t", out=tmp_path, **kw).settings()

    assert settings().window == DEFAULT_WINDOW  # the default strategy, window, with no --window
    assert settings(window=64).window == 64
    assert settings(strategy="bfd", window=64).window is None  # only the window strategy has one
    assert settings(strategy="bfd").to_dict()["strategy"] == "bfd"


def test_a_pin_ignores_a_field_it_does_not_know():
    """verify reports an unknown hashed field itself (`packcli.verify.owners`); reading it must not fail first."""
    data = _data()
    data["inputs"][0]["path"] = "/somewhere/else"
    manifest = mf.Manifest.of(data)
    assert manifest.inputs[0].name == data["inputs"][0]["name"]
    assert manifest.data is data  # what verify hashes: the forged field included


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d["config"].pop("capacity"), "config.capacity is missing"),
    (lambda d: d.pop("tokenizer"), "manifest.tokenizer is missing"),
    (lambda d: d["shards"][1].pop("sha256"), "shards[1].sha256 is missing"),
    (lambda d: d.update(template="chatml"), "template is not an object"),
    (lambda d: d.update(inputs={"name": "x"}), "inputs is not a list"),
    (lambda d: d.update(counts=[1, 2]), "counts is not an object"),
])
def test_each_problem_is_named(edit, problem):
    data = copy.deepcopy(_data())
    edit(data)
    assert problem in mf.problems(data)


def test_a_whole_manifest_has_no_problems():
    assert mf.problems(_data()) == []
    assert mf.problems([]) == ["the manifest is not a JSON object"]


def test_a_malformed_manifest_is_a_contract_error_naming_the_field():
    data = _data()
    del data["config"]["seed"]
    with pytest.raises(ContractError, match=r"config\.seed is missing"):
        mf.Manifest.of(data)


def test_stats_of_a_malformed_manifest_is_a_clean_error(tmp_path):
    """A reader that trusts the shape (stats, show) says what is missing, never a traceback."""
    data = _data()
    del data["shards"][0]["rows"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    result = CliRunner().invoke(app, ["stats", str(tmp_path)])
    assert result.exit_code not in (0, 3), result.output  # a contract error, not success or an internal error
    assert "shards[0].rows is missing" in result.output


def test_shard_pins_read_contract_2_too():
    v2 = json.loads((FIXTURES / "packed-v2" / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert [pin.name for pin in mf.shard_pins(v2)] == [s["name"] for s in v2["shards"]]
    assert dataclasses.asdict(mf.shard_pins(v2)[0]) == v2["shards"][0]


def test_verify_owns_every_setting_and_no_other():
    """verify's field table (`packcli.verify.owners.MANIFEST_FIELDS`) names each `PackSettings` field once: a
    setting added to one and not the other fails here, not in a forger's hands."""
    from packcli.verify.owners import MANIFEST_FIELDS

    owned = {path.split(".")[1].removesuffix("[]") for path in MANIFEST_FIELDS if path.startswith("config.")}
    assert owned == {f.name for f in dataclasses.fields(mf.PackSettings)}
