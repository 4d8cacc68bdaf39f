"""The typed manifest (`packcli.artifact.manifest`): the JSON read back key for key and byte for byte, the
settings pack pins, and every `problems` rule fed the shape it refuses."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.artifact import fieldspec as fs
from packcli.artifact import manifest as mf
from packcli.cli import app
from packcli.config import PackConfig
from packcli.contract import MANIFEST_NAME
from packcli.errors import ContractError, PackcliError
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


# -- one table says what a valid field is (`packcli.artifact.fieldspec`) --------------------------------------

PIN_SECTIONS = {"config": mf.PackSettings, "tokenizer": mf.TokenizerPin, "template": mf.TemplatePin,
                "seam_table": mf.FilePin, "rejects": mf.FilePin, "dataset_card": mf.FilePin,
                "inputs[]": mf.InputPin, "shards[]": mf.ShardPin}
NO_ROWS = {"dataset_card.rows"}  # the card has no rows: `FilePin.rows` is None for it and never written


def _unspecced(sections: dict[str, type], manifest: type = mf.Manifest) -> list[str]:
    """Fields of the typed manifest and its pins that the spec table does not know."""
    paths = [f"{where}.{f.name}" for where, kind in sections.items() for f in dataclasses.fields(kind)]
    top = [f.name for f in dataclasses.fields(manifest)
           if f.name.removesuffix("[]") not in {w.removesuffix("[]") for w in sections}
           and f.name not in fs.UNHASHED_KEYS and f.name != "data"]
    return ([p for p in paths if p not in NO_ROWS and fs.entry_of(fs.FIELD_SPECS, p) is None]
            + [name for name in top if name not in fs.FIELD_SPECS and f"{name}.*" not in fs.FIELD_SPECS])


def test_every_field_of_the_typed_manifest_has_a_spec():
    assert _unspecced(PIN_SECTIONS) == []
    named = {f.name for kind in (mf.Manifest, *PIN_SECTIONS.values()) for f in dataclasses.fields(kind)}
    stale = [p for p in fs.FIELD_SPECS if p.split(".")[-1].removesuffix("[]") not in named | {"*"}]
    assert stale == [], "specs of fields no manifest type has"


def test_a_planted_field_without_a_spec_is_found():
    planted = dataclasses.make_dataclass("PackSettings", [("planted", int, 0)], bases=(mf.PackSettings,), frozen=True)
    assert _unspecced(dict(PIN_SECTIONS, config=planted)) == ["config.planted"]
    top = dataclasses.make_dataclass("Manifest", [("planted", int, 0)], bases=(mf.Manifest,), frozen=True)
    assert _unspecced(PIN_SECTIONS, top) == ["planted"]


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d["config"].update(capacity="1024"), "config.capacity = '1024' is not a int"),
    (lambda d: d["config"].update(seed=True), "config.seed = True is not a int"),  # a bool is no number here
    (lambda d: d["config"].update(shuffle=1), "config.shuffle = 1 is not a bool"),
    (lambda d: d["config"].update(window=1.5), "config.window = 1.5 is not a int or NoneType"),
    (lambda d: d["config"].update(capacity=1),
     "config.capacity = 1 is outside 2..2,147,483,647: pack never writes it"),
    (lambda d: d["config"].update(seed=-1),
     "config.seed = -1 is outside 0..9,223,372,036,854,775,807: pack never writes it"),
    (lambda d: d["config"].update(max_reject_fraction=1.5),
     "config.max_reject_fraction = 1.5 is outside 0..1: pack never writes it"),
    (lambda d: d["config"].update(max_displacement=float("inf")),
     "config.max_displacement = inf is not a finite number: pack never writes it"),
    (lambda d: d["shards"][0].update(bytes=2**64),
     f"shards[0].bytes = {2**64} does not fit 64 bits: pack never writes it"),
    (lambda d: d["inputs"][1].update(size="12"), "inputs[1].size = '12' is not a int"),
    (lambda d: d["counts"].update(packed=None), "counts.packed = None is not a int"),
    (lambda d: d["metrics"].update(density="high"), "metrics.density = 'high' is not a int or float"),
    (lambda d: d["config"].update(capacity={"value": 1024}), "config.capacity holds .value: it is not a int"),
    (lambda d: d["config"].update(allow_dropped_fields=["tools", 3]),
     "config.allow_dropped_fields[1] = 3 is not a str"),
])
def test_each_type_and_range_problem_is_named(edit, problem, tmp_path):
    data = copy.deepcopy(_data())
    edit(data)
    assert mf.problems(data) == [problem]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ContractError, match="malformed"):
        mf.load_manifest(tmp_path)


def test_a_field_it_does_not_know_is_no_problem():
    data = copy.deepcopy(_data())
    data["config"]["planted"] = "x"
    data["inputs"][0]["path"] = "/somewhere"
    assert mf.problems(data) == []  # verify reports it; a reader reads past it


@pytest.mark.parametrize("command", [["stats"], ["show", "--pack", "0"]])
def test_stats_and_show_refuse_a_mistyped_manifest_by_name(tmp_path, command):
    """A mistyped field is named at once, not met later as a traceback (stats divided by a string capacity)."""
    shutil.copytree(FIXTURE, tmp_path / "a")
    data = _data()
    data["config"]["capacity"] = "1024"
    (tmp_path / "a" / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    result = CliRunner().invoke(app, [command[0], str(tmp_path / "a"), *command[1:]])
    assert result.exit_code == 1, result.output  # a contract error, not success or an internal error (3)
    assert "config.capacity = '1024' is not a int" in result.output


def test_the_loader_refuses_a_mistyped_shard_by_name(tmp_path):
    from packcli.data.read import PackReader

    shutil.copytree(FIXTURE, tmp_path / "a")
    data = _data()
    data["shards"][0]["rows"] = "16"
    (tmp_path / "a" / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ContractError, match=r"shards\[0\]\.rows = '16' is not a int"):
        PackReader(tmp_path / "a")
    assert len(PackReader(FIXTURE).pins) == len(data["shards"])  # the fixture's own reads


def test_pack_stats_and_verify_bound_a_setting_by_the_one_table(tmp_path, monkeypatch):
    """Narrow capacity's range in the table alone: pack's config, stats' arguments and the manifest's readers
    (verify too) all take the new one, so no second definition of "capacity must be ..." is left."""
    from packcli.stats import length_stats_problems

    monkeypatch.setitem(fs.FIELD_SPECS, "config.capacity", fs.FieldSpec((int,), (8, 4096)))
    config = dict(inputs=(str(FIXTURES / "corpus" / "text.jsonl"),), tokenizer=str(FIXTURES / "tokenizer"),
                  out=tmp_path / "o")
    with pytest.raises(PackcliError, match="`capacity` must be an integer from 8 to 4,096, got 4"):
        PackConfig(**config, capacity=4)
    PackConfig(**config, capacity=8)
    assert "`capacities` must be an integer from 8 to 4,096, got 8192" in length_stats_problems(
        config["inputs"], config["tokenizer"], capacities=(8192,))
    data = _data()
    data["config"]["capacity"] = 5000
    assert mf.problems(data) == ["config.capacity = 5000 is outside 8..4,096: pack never writes it"]
