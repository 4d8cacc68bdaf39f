"""Mixtures (--mix) and exact duplicates (--dedupe exact): seeded counts, recorded, verified."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import jsonl_records, write_jsonl, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.cli import app
from packcli.config import PackConfig
from packcli.contract import SEAM_TABLE_NAME, file_sha256
from packcli.errors import InputError, PackcliError
from packcli.job.run import pack_corpus
from packcli.mix import PROPORTION, REPEAT, MixSource, Mixture, draw_copies, parse_mix, targets
from packcli.verify import verify_artifact


def pack(inputs, tokenizer_dir, out, **kw):
    kw.setdefault("capacity", 1024)
    return pack_corpus(PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out, **kw))


def seam(directory) -> dict:
    return pq.read_table(directory / SEAM_TABLE_NAME).to_pydict()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A small chat set (JSONL) and a prompt/completion set (Parquet), every record usable at 1024."""
    root = tmp_path_factory.mktemp("mix")
    chat = write_jsonl(root / "chat.jsonl", jsonl_records("sharegpt.jsonl")[:30])
    qa = write_parquet(root / "qa.parquet", jsonl_records("prompt_completion.jsonl"))
    return chat, qa


# ---- parsing and resolving: every problem before any work ---------------------------------------

@pytest.mark.parametrize("text,message", [
    ("a.jsonl=-0.5", "the weight must be a finite number >= 0"),
    ("a.jsonl=lots", "the weight does not parse"),
    ("a.jsonl=nan", "the weight must be a finite number >= 0"),
    ("a.jsonl", "is not SOURCE=WEIGHT"),
    ("a.jsonl=0.5,b.jsonl=2x", "proportions (0.7) and repeats (3x) cannot be mixed"),
    ("a.jsonl=0,b.jsonl=0", "the proportions add up to 0"),
    ("a.jsonl=1,a.jsonl=2", "a.jsonl is named twice"),
    ("a.jsonl=2000000x", "the weight must be a finite number >= 0 and at most 1,000,000x"),
])
def test_bad_mix_is_a_configuration_error(tmp_path, text, message):
    assert parse_mix(text)[0] is None
    with pytest.raises(PackcliError, match="invalid configuration: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        PackConfig(inputs=("a.jsonl",), tokenizer="t", out=tmp_path / "o", mix=text)


@pytest.mark.parametrize("mix,message", [
    ("chat.jsonl=0.7,other.jsonl=0.3", "--mix names other.jsonl, which is not an input"),
    ("chat.jsonl=1", "--mix gives no proportion for"),
    ("chat.jsonl=-1", "the weight must be a finite number >= 0"),
    ("chat.jsonl=3y", "the weight does not parse"),
])
def test_bad_mix_fails_before_any_work_on_the_command_line(tmp_path, sources, tokenizer_dir, monkeypatch, mix,
                                                          message):
    """Exit 2, one line and a hint, nothing written; the tokenizer is never loaded."""
    import packcli.job.run as pipeline

    monkeypatch.setattr(pipeline, "cached_tokenizer", lambda *a, **k: pytest.fail("the tokenizer was loaded"))
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["pack", *map(str, sources), "-t", str(tokenizer_dir), "-o", str(out),
                                      "--mix", mix])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())


def test_mix_keys_name_inputs_as_given_by_path_or_by_file_name(tmp_path, sources, tokenizer_dir):
    chat, qa = sources
    glob = str(chat.parent / "*.parquet")
    a = pack([chat, glob], tokenizer_dir, tmp_path / "a", mix=f"{glob}=0.25,chat.jsonl=0.75")
    b = pack([chat, qa], tokenizer_dir, tmp_path / "b", mix=f"{chat}=0.75,qa.parquet=0.25")
    assert a.manifest["config"]["mix"] == b.manifest["config"]["mix"] == {
        "by": "proportion", "sources": [{"inputs": [0], "weight": 0.75}, {"inputs": [1], "weight": 0.25}]}
    assert str(tmp_path) not in json.dumps(a.manifest["config"])  # location-free: inputs by index


# ---- the draw --------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 60), min_size=1, max_size=4), data=st.data())
def test_draw_gives_each_source_exactly_its_target(sizes, data):
    by = data.draw(st.sampled_from([PROPORTION, REPEAT]))
    weights = data.draw(st.lists(st.floats(0, 4, allow_nan=False), min_size=len(sizes), max_size=len(sizes)))
    if by == PROPORTION and not sum(weights) > 0:
        weights = [1.0] * len(sizes)
    seed = data.draw(st.integers(0, 2**32))
    mixture = Mixture(by, tuple(MixSource((k,), w, f"s{k}") for k, w in enumerate(weights)))
    file_index = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    usable = np.array(data.draw(st.lists(st.booleans(), min_size=len(file_index), max_size=len(file_index))), bool)
    counts = [int(usable[file_index == k].sum()) for k in range(len(sizes))]
    try:
        want = targets(mixture, counts)
    except InputError:  # a source asked for examples that has none: refused, never silently zero
        assert any(n == 0 for n in counts)
        return
    copies = draw_copies(mixture, usable, file_index, seed)
    assert (copies[~usable] == 0).all()
    for k, n in enumerate(counts):
        mine = copies[(file_index == k) & usable]
        assert mine.sum() == want[k]
        if n:
            assert set(mine.tolist()) <= {want[k] // n, want[k] // n + 1}  # as even as counts allow
    if by == PROPORTION:
        assert sum(want) == sum(counts)  # the epoch keeps its size; only its make-up changes
    assert np.array_equal(copies, draw_copies(mixture, usable, file_index, seed))  # seeded: same every time


def test_proportions_and_repeats_end_to_end(tmp_path, sources, tokenizer_dir):
    chat, qa = sources
    prop = pack([chat, qa], tokenizer_dir, tmp_path / "p", mix="chat.jsonl=0.8,qa.parquet=0.2", seed=3)
    by_input = prop.manifest["counts"]["by_input"]
    examples = [c["packed"] + c["truncated"] for c in by_input]
    assert examples == [56, 14]  # 70 usable records: 80% and 20% of them
    assert by_input[1]["unsampled"] == 40 - 14 and by_input[0]["unsampled"] == 0
    rows = seam(tmp_path / "p")
    copies = Counter((s, n) for s, n, st_ in zip(rows["source"], rows["line"], rows["status"]) if st_ == "packed")
    assert sorted(Counter(v for (s, _), v in copies.items() if s == chat.name).items()) == [(1, 4), (2, 26)]
    assert len(set(rows["example_id"])) == len(rows["example_id"])
    assert verify_artifact(tmp_path / "p").ok

    rep = pack([chat, qa], tokenizer_dir, tmp_path / "r", mix="chat.jsonl=3x,qa.parquet=0.5x", seed=3)
    by_input = rep.manifest["counts"]["by_input"]
    assert [c["packed"] for c in by_input] == [90, 20] and by_input[1]["unsampled"] == 20
    rows = seam(tmp_path / "r")
    chat_copies = sorted({c for s, c in zip(rows["source"], rows["copy"]) if s == chat.name})
    assert chat_copies == [0, 1, 2]
    assert verify_artifact(tmp_path / "r").ok

    again = pack([chat, qa], tokenizer_dir, tmp_path / "r2", mix="chat.jsonl=3x,qa.parquet=0.5x", seed=3)
    assert again.manifest["manifest_sha256"] == rep.manifest["manifest_sha256"]  # deterministic
    pack([chat, qa], tokenizer_dir, tmp_path / "r3", mix="chat.jsonl=3x,qa.parquet=0.5x", seed=4)
    drawn = [{n for s, n, st_ in zip(r["source"], r["line"], r["status"]) if s == qa.name and st_ == "packed"}
             for r in (seam(tmp_path / "r"), seam(tmp_path / "r3"))]
    assert drawn[0] != drawn[1]  # the seed decides which half


def test_summary_and_stats_show_per_source_counts(tmp_path, sources, tokenizer_dir):
    chat, qa = sources
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["pack", str(chat), str(qa), "-t", str(tokenizer_dir), "-o", str(out),
                                      "-c", "1024", "--mix", "chat.jsonl=2x", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "sources" in result.output and "2x" in result.output and "60" in result.output
    stats = CliRunner().invoke(app, ["stats", str(out), "--json"])
    assert stats.exit_code == 0, stats.output
    inputs = json.loads(stats.stdout)["inputs"]
    assert [(i["source"], i["weight"], i["packed"]) for i in inputs] == [("chat.jsonl", "2x", 60), ("qa.parquet", "1x", 40)]


# ---- verify accounts for every copy ------------------------------------------------------------------

def reseal(directory, edit_seam=None, edit_manifest=None) -> None:
    """Apply a consistent forgery: rewrite the seam table and/or manifest and recompute their hashes."""
    manifest = mf.read_manifest(directory)
    if edit_seam is not None:
        table = pq.read_table(directory / SEAM_TABLE_NAME)
        pq.write_table(edit_seam(table), directory / SEAM_TABLE_NAME)
        manifest["seam_table"].update(bytes=(directory / SEAM_TABLE_NAME).stat().st_size,
                                      sha256=file_sha256(directory / SEAM_TABLE_NAME))
    if edit_manifest is not None:
        edit_manifest(manifest)
    manifest["manifest_sha256"] = mf.manifest_hash(manifest)
    mf.write_manifest(manifest, directory)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, sources, tokenizer_dir):
    out = tmp_path_factory.mktemp("mixed") / "o"
    pack(list(sources), tokenizer_dir, out, mix="chat.jsonl=2.5x,qa.parquet=0.5x")
    return out


def test_verify_fails_when_the_mixture_changes_after_packing(mixed, tmp_path):
    forged = tmp_path / "f"
    shutil.copytree(mixed, forged)
    reseal(forged, edit_manifest=lambda m: m["config"]["mix"]["sources"][0].update(weight=2.0))
    report = verify_artifact(forged, reconstruct=False)
    copies = next(c for c in report.checks if c.name == "copies")
    assert not copies.ok and any("expected [0, 1] (the mixture draws 2 copies of it)" in v.message
                                 for v in copies.violations)


def test_verify_fails_when_an_unsampled_record_claims_to_be_drawn(mixed, tmp_path):
    forged = tmp_path / "f"
    shutil.copytree(mixed, forged)
    rows = seam(mixed)
    i = rows["status"].index("unsampled")

    def copy_of_unsampled_as_second_copy(table: pa.Table) -> pa.Table:
        copy = table["copy"].to_pylist()
        copy[i] = 1  # the record's only row now says "copy 1": copy 0 is missing
        return table.set_column(table.schema.get_field_index("copy"), "copy", pa.array(copy, pa.int32()))
    reseal(forged, edit_seam=copy_of_unsampled_as_second_copy)
    copies = next(c for c in verify_artifact(forged, reconstruct=False).checks if c.name == "copies")
    assert not copies.ok and any("has copies [1]" in v.message for v in copies.violations)


def test_verify_fails_when_counts_by_input_disagree(mixed, tmp_path):
    forged = tmp_path / "f"
    shutil.copytree(mixed, forged)
    reseal(forged, edit_manifest=lambda m: m["counts"]["by_input"][1].update(unsampled=0))
    glob = next(c for c in verify_artifact(forged, reconstruct=False).checks if c.name == "global")
    assert not glob.ok and "counts.by_input[1]." in glob.violations[0].message


# ---- exact duplicates ----------------------------------------------------------------------------------

def test_dedupe_exact_drops_later_copies_across_files_and_formats(tmp_path, tokenizer_dir):
    records = jsonl_records("prompt_completion.jsonl")[:10]
    a = write_jsonl(tmp_path / "a.jsonl", records + records[:3])  # three repeated in the same file
    b = write_parquet(tmp_path / "b.parquet", records[5:8] + [{"prompt": "new", "completion": "one"}])
    kept = pack([a, b], tokenizer_dir, tmp_path / "keep")
    assert kept.manifest["counts"]["packed"] == 17 and kept.manifest["counts"]["duplicate"] == 0
    assert verify_artifact(tmp_path / "keep").ok  # every record its own example and id

    summary = pack([a, b], tokenizer_dir, tmp_path / "d", dedupe="exact")
    counts = summary.manifest["counts"]
    assert (counts["packed"], counts["duplicate"]) == (11, 6)
    assert [c["duplicate"] for c in counts["by_input"]] == [3, 3]
    assert summary.manifest["config"]["dedupe"] == "exact"
    rows = seam(tmp_path / "d")
    dup = {(s, n): r for s, n, st_, r in zip(rows["source"], rows["line"], rows["status"], rows["reason"])
           if st_ == "duplicate"}
    assert dup[("a.jsonl", 11)] == "exact duplicate of a.jsonl:1 (input 0)"
    assert dup[("b.parquet", 0)] == "exact duplicate of a.jsonl:6 (input 0)"  # a Parquet row, the same record
    assert verify_artifact(tmp_path / "d").ok


def test_verify_fails_when_a_duplicate_names_the_wrong_first_record(tmp_path, tokenizer_dir):
    records = jsonl_records("text.jsonl")[:5]
    path = write_jsonl(tmp_path / "a.jsonl", records + records[:1])
    pack([path], tokenizer_dir, tmp_path / "d", dedupe="exact")
    i = seam(tmp_path / "d")["status"].index("duplicate")

    def wrong_first(table: pa.Table) -> pa.Table:
        reasons = table["reason"].to_pylist()
        reasons[i] = "exact duplicate of a.jsonl:2 (input 0)"
        return table.set_column(table.schema.get_field_index("reason"), "reason", pa.array(reasons, pa.string()))
    reseal(tmp_path / "d", edit_seam=wrong_first)
    check = next(c for c in verify_artifact(tmp_path / "d").checks if c.name == "reconstruction")
    assert not check.ok and "exact duplicate of a.jsonl:1 (input 0), but" in check.violations[0].message


def test_verify_fails_when_duplicates_are_claimed_without_dedupe(tmp_path, tokenizer_dir):
    records = jsonl_records("text.jsonl")[:5]
    path = write_jsonl(tmp_path / "a.jsonl", records + records[:1])
    pack([path], tokenizer_dir, tmp_path / "d", dedupe="exact")
    reseal(tmp_path / "d", edit_manifest=lambda m: m["config"].update(dedupe="none"))
    check = next(c for c in verify_artifact(tmp_path / "d").checks if c.name == "reconstruction")
    assert not check.ok and "the run did not deduplicate" in check.violations[0].message
