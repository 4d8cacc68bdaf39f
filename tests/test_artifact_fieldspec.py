"""The one table of what a valid manifest field is (`packcli.artifact.fieldspec`): every field of the typed
manifest has a spec, `packcli.artifact.manifest.problems` names each type and range problem, the readers (stats,
show, the loader) refuse a mistyped manifest by name, and pack, stats and verify bound a setting by this table."""

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

FIXTURE = FIXTURES / "packed"


def _data() -> dict:
    return json.loads((FIXTURE / MANIFEST_NAME).read_text(encoding="utf-8"))


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
    (lambda d: d["config"].update(capacity="1024"), "config.capacity = '1024' is not an int"),
    (lambda d: d["config"].update(seed=True), "config.seed = True is not an int"),  # a bool is no number here
    (lambda d: d["config"].update(shuffle=1), "config.shuffle = 1 is not a bool"),
    (lambda d: d["config"].update(window=1.5), "config.window = 1.5 is not an int or NoneType"),
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
    (lambda d: d["inputs"][1].update(size="12"), "inputs[1].size = '12' is not an int"),
    (lambda d: d["counts"].update(packed=None), "counts.packed = None is not an int"),
    (lambda d: d["metrics"].update(density="high"), "metrics.density = 'high' is not an int or float"),
    (lambda d: d["config"].update(capacity={"value": 1024}), "config.capacity holds .value: it is not an int"),
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
    assert "config.capacity = '1024' is not an int" in result.output


def test_the_loader_refuses_a_mistyped_shard_by_name(tmp_path):
    from packcli.data.read import PackReader

    shutil.copytree(FIXTURE, tmp_path / "a")
    data = _data()
    data["shards"][0]["rows"] = "16"
    (tmp_path / "a" / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ContractError, match=r"shards\[0\]\.rows = '16' is not an int"):
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
