"""Every hashed manifest field, seam-table column and shard column is proved by the check that owns it.

The walk reads the manifest of a fresh pack, so a field added to the manifest without an owner in
`packcli.verify.owners` fails here (and in verify itself). For each field, a consistent edit (the
field changed alone, the manifest re-sealed) must make verify fail in the owning check, with a
violation that names the field.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import seam_rows
from forgery import caught, edit_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.artifact import manifest as mf
from packcli.artifact.seams import SEAM_TABLE_SCHEMA
from packcli.artifact.shards import SCHEMA
from packcli.contract import IGNORE_INDEX, MANIFEST_NAME, SEAM_TABLE_NAME
from packcli.errors import ContractError
from packcli.verify import forge, verify_artifact
from packcli.verify.forge import reseal
from packcli.verify.owners import MANIFEST_FIELDS, SEAM_COLUMNS, SHARD_COLUMNS, hashed_leaves, owner_of, pattern_of

# Edits the generic rule (numbers +1, strings changed, booleans flipped) cannot make false, with why.
EDITS = {
    "config.window": 7,  # any window above the example count packs alike (the fixture has 292 examples)
    "config.min_density": 0.9999,  # null: any budget the plan meets would be true; this one it misses
    "config.max_displacement": 0.0,
    "config.max_reject_fraction": 0.01,  # a looser budget is as true; the fixture loses 8 of 300 records
    "config.template_date": "not-a-date",  # the fixture's template prints no date: any real one renders alike
    "config.fields": {"text": ""},  # {}: a mapping pack refuses (a valid wrong one: test_verify_reconstruct.py)
    "config.mix": {"by": "repeat", "sources": [{"inputs": list(range(6)), "weight": 2.0}]},  # null: two copies each
}
RAISES = {"contract_version": ContractError}  # read_manifest refuses a version it does not know


def _edit(path: str, value: object) -> object:
    pattern = pattern_of(path)
    if pattern in EDITS:
        return EDITS[pattern]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.25
    if isinstance(value, str):
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):  # a sha256
            return value[:-1] + ("0" if value[-1] != "0" else "1")
        return value + "-x"
    raise AssertionError(f"{path} = {value!r}: no edit for this value; add one to EDITS")


def _one_path_per_pattern(manifest: dict) -> list[tuple[str, object]]:
    seen, out = set(), []
    for path, value in hashed_leaves(manifest):
        if pattern_of(path) not in seen:
            seen.add(pattern_of(path))
            out.append((path, value))
    return out


@pytest.fixture(scope="module")
def fresh_manifest(packed) -> dict:
    return mf.read_manifest(packed)


def test_every_hashed_field_of_a_fresh_pack_has_an_owner(fresh_manifest):
    unowned = [path for path, _ in hashed_leaves(fresh_manifest) if owner_of(path) is None]
    assert not unowned, f"hashed fields no check owns (add them to packcli.verify.owners.MANIFEST_FIELDS): {unowned}"


def test_every_owner_names_a_field_a_fresh_pack_has(fresh_manifest):
    patterns = {pattern_of(path) for path, _ in hashed_leaves(fresh_manifest)}
    stale = [p for p, owner in MANIFEST_FIELDS.items() if p not in patterns and not owner.optional and not (
        p.endswith(".*") and (p[:-2] in patterns or any(q.startswith(p[:-1]) for q in patterns)))]  # a subtree
    assert not stale, f"owners of fields pack no longer writes: {stale}"


def test_every_column_has_an_owner():
    assert list(SEAM_COLUMNS) == SEAM_TABLE_SCHEMA.names
    assert list(SHARD_COLUMNS) == SCHEMA.names


def test_versions_are_not_hashed(fresh_manifest):
    """verify cannot prove which library versions packed an artifact, so they are not in the hash."""
    assert "versions" not in fresh_manifest and fresh_manifest["unhashed"]["versions"]["packcli"]


@pytest.mark.slow
def test_each_hashed_field_edited_alone_fails_in_its_owner(packed, fresh_manifest, tmp_path):
    edits = _one_path_per_pattern(fresh_manifest)
    assert len(edits) > 40
    missed = []
    for k, (path, value) in enumerate(edits):
        copy = tmp_path / str(k)
        shutil.copytree(packed, copy)
        manifest = json.loads((copy / MANIFEST_NAME).read_text())
        forge.set_field(manifest, path, _edit(path, value))
        manifest["manifest_sha256"] = mf.manifest_hash(manifest)  # re-sealed: only the semantic check can tell
        mf.write_manifest(manifest, copy)
        expected_error = RAISES.get(pattern_of(path))
        if expected_error:
            with pytest.raises(expected_error):
                verify_artifact(copy, workers=1)
            continue
        report = verify_artifact(copy, workers=1)
        owner = owner_of(path).check
        check = next(c for c in report.checks if c.name == owner)
        named = [v for v in check.violations if v.field == path or path in v.message]
        if report.ok or not named:
            missed.append((path, owner, [(c.name, [v.message for v in c.violations][:2]) for c in report.checks
                                         if not c.ok]))
    assert not missed, "\n".join(map(str, missed))


def _first_packed(rows: list[dict]) -> int:
    return next(i for i, r in enumerate(rows) if r["status"] == "packed" and r["offset"] > 0)


SEAM_EDITS = {  # column -> edit of the first packed row that is not first in its pack
    "example_id": lambda r, rows: r["example_id"] + 1,
    "input": lambda r, rows: next(x["input"] for x in rows if x["input"] != r["input"]),
    "source": lambda r, rows: next(x["source"] for x in rows if x["source"] != r["source"]),
    "line": lambda r, rows: r["line"] + 1000,
    "copy": lambda r, rows: r["copy"] + 1,
    "chunk": lambda r, rows: r["chunk"] + 1,
    "chunk_start": lambda r, rows: r["chunk_start"] + 1,
    "status": lambda r, rows: "dropped",
    "reason": lambda r, rows: "re-worded",
    "shard": lambda r, rows: "shard-00003.parquet" if r["shard"] != "shard-00003.parquet" else "shard-00000.parquet",
    "row": lambda r, rows: r["row"] + 1,
    "offset": lambda r, rows: r["offset"] + 1,
    "length": lambda r, rows: r["length"] - 1,
    "original_length": lambda r, rows: r["original_length"] + 1,
    "supervised": lambda r, rows: r["supervised"] + 1,
    "supervised_lost": lambda r, rows: r["supervised_lost"] + 1,
    "token_hash": lambda r, rows: "0" * 16,
    "format": lambda r, rows: "text" if r["format"] != "text" else "messages",
}


@pytest.mark.slow
@pytest.mark.parametrize("column", list(SEAM_COLUMNS))
def test_each_seam_column_edited_alone_fails_in_its_owner(column, packed_copy):
    def mutate(rows: list[dict]) -> None:
        r = rows[_first_packed(rows)]
        r[column] = SEAM_EDITS[column](r, rows)
    forge.rewrite_seam(packed_copy, mutate)
    forge.reseal(packed_copy, recount_counts=True)
    report = verify_artifact(packed_copy, workers=1)
    check = next(c for c in report.checks if c.name == SEAM_COLUMNS[column])
    assert not report.ok and any(v.field == column or column in v.message for v in check.violations), \
        [(c.name, [(v.field, v.message) for v in c.violations][:3]) for c in report.checks if not c.ok]


def _seam_row(rows: list[dict]) -> dict:
    """The first pack with a seam."""
    return next(r for r in rows if len(r["cu_seqlens"]) > 2)


def _supervise_a_masked_label(row: dict) -> None:
    t = next(t for t in range(1, row["cu_seqlens"][1]) if row["labels"][t] == IGNORE_INDEX)
    row["labels"][t] = row["input_ids"][t]


SHARD_EDITS = {
    "input_ids": lambda row: row["input_ids"].__setitem__(1, row["input_ids"][1] + 1),
    "labels": _supervise_a_masked_label,
    "position_ids": lambda row: row["position_ids"].__setitem__(1, 5),
    "cu_seqlens": lambda row: row["cu_seqlens"].__setitem__(1, row["cu_seqlens"][1] - 1),
    "seq_lengths": lambda row: row["seq_lengths"].__setitem__(0, row["seq_lengths"][0] - 1),
    "example_ids": lambda row: row["example_ids"].__setitem__(0, row["example_ids"][0] + 1),
    "num_tokens": lambda row: row.__setitem__("num_tokens", row["num_tokens"] - 1),
    "num_supervised": lambda row: row.__setitem__("num_supervised", row["num_supervised"] + 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("column", list(SHARD_COLUMNS))
def test_each_shard_column_edited_alone_fails_in_its_owner(column, packed_copy):
    counts = column not in ("num_tokens", "num_supervised")  # a forger recounts, unless the count is the forgery
    forge.rewrite_packs(packed_copy, 0, lambda rows: SHARD_EDITS[column](_seam_row(rows)), recount_rows=counts)
    forge.reseal(packed_copy, recount_counts=True)
    report = verify_artifact(packed_copy, workers=1)
    check = next(c for c in report.checks if c.name == SHARD_COLUMNS[column])
    assert not report.ok and any(v.field == column or column in v.message for v in check.violations), \
        [(c.name, [(v.field, v.message) for v in c.violations][:3]) for c in report.checks if not c.ok]


def test_the_seam_table_edit_reaches_the_file(packed_copy):
    """The helpers above write what they say (a guard on the guards)."""
    forge.rewrite_seam(packed_copy, lambda rows: rows[0].update(reason="written"))
    assert pq.read_table(Path(packed_copy) / SEAM_TABLE_NAME)["reason"][0].as_py() == "written"


# -- verify judges the manifest by the artifact's one table (`packcli.artifact.fieldspec`) -------------------

def test_every_spec_has_an_owner_and_every_owner_a_spec():
    from packcli.artifact.fieldspec import FIELD_SPECS
    from packcli.verify.owners import _owned

    assert list(MANIFEST_FIELDS) == list(FIELD_SPECS)
    assert all(owner.spec is FIELD_SPECS[path] for path, owner in MANIFEST_FIELDS.items())
    with pytest.raises(KeyError, match="config.planted"):  # an owner of a field the table does not have
        _owned({"config.planted": ("plan", "the re-run plan")})


FIXTURE_MANIFEST = json.loads((Path(__file__).parent.parent / "fixtures" / "packed" / MANIFEST_NAME).read_text())
LEAVES = [path for path, _ in hashed_leaves(FIXTURE_MANIFEST)]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4)


def _set(manifest: dict, path: str, value: object) -> None:
    *parents, last = [int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split(".")]
    for key in parents:
        manifest = manifest[key]
    manifest[last] = value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(LEAVES), JSON_VALUES), min_size=1, max_size=3))
def test_verify_and_the_readers_agree_on_every_forged_value(edits):
    """Fields of the fixture's manifest set to any JSON value: verify's manifest check finds the manifest
    whole exactly when `problems` (what stats, show and the loader refuse) finds nothing, and every problem
    named is a violation verify reports, word for word."""
    from packcli.verify.owners import check_manifest
    from packcli.verify.report import CheckResult

    manifest = copy.deepcopy(FIXTURE_MANIFEST)
    for path, value in edits:
        try:
            _set(manifest, path, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit replaced an object this path ran through
    result = CheckResult("manifest", limit=10_000)
    whole = check_manifest(manifest, result)
    found = mf.problems(manifest)
    assert whole == (found == []), (found, [v.message for v in result.violations])
    assert set(found) <= {v.message for v in result.violations}


# -- forgeries only the manifest check catches; each re-seals what a forger could recompute (tests/forgery.py) --

def test_the_copies_verify_before_any_forgery(packed, packed_drop):
    assert verify_artifact(packed).ok and verify_artifact(packed_drop).ok
    assert any(r["status"] == "dropped" for r in seam_rows(packed_drop))
    assert any(r["status"] == "truncated" for r in seam_rows(packed))


def test_conventions_say_labels_are_shifted(packed_copy):
    reseal(packed_copy, lambda m: m["conventions"].update(labels="shifted"))
    caught(packed_copy, "manifest", "conventions.labels = 'shifted'")


def test_config_loss_disagrees_with_loss_policy(packed_copy):
    reseal(packed_copy, lambda m: m["config"].update(loss="all"))
    caught(packed_copy, "manifest", "config.loss 'all' and loss_policy 'auto' disagree")


def test_an_unknown_hashed_field(packed_copy):
    reseal(packed_copy, lambda m: m.update(reviewed_by="nobody"))
    caught(packed_copy, "manifest", "hashed field reviewed_by")


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m: m.pop("metrics"), "metrics"),
    (lambda m: m["config"].update(capacity="big"), "config.capacity"),
    (lambda m: m["shards"][0].pop("sha256"), "shards[0].sha256"),
    (lambda m: m.update(inputs={"name": "x"}), "inputs"),
], ids=["no-metrics", "capacity-a-string", "shard-without-sha256", "inputs-not-a-list"])
def test_a_malformed_manifest_is_named_not_a_traceback(edit, field, packed_copy):
    edit_manifest(packed_copy, edit)
    report = caught(packed_copy, "manifest", field)
    assert all(c["skipped"] for c in report["checks"] if c["name"] != "manifest")
