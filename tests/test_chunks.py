"""--overlong split: the cut (packcli.job.chunks) as properties, and split artifacts end to end.

Expected values come from first principles: chunk k of an example of L tokens starts at k * (C - o),
holds min(C, L - start) tokens, masks its first max(1, o) labels (its first for chunk 0), and the
example's tokens are the chunks' tokens with the overlaps taken out once.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.contract import IGNORE_INDEX
from packcli.job.chunks import SplitRule, chunk_labels, covered_tokens, cut_example


@st.composite
def examples(draw):
    capacity = draw(st.integers(2, 64))
    overlap = draw(st.integers(0, capacity // 2))
    min_last = draw(st.integers(1, capacity - overlap))
    length = draw(st.integers(1, 400))
    supervised = draw(st.lists(st.booleans(), min_size=length, max_size=length))
    labels = np.where(supervised, np.arange(length, dtype=np.int32) + 1000, IGNORE_INDEX).astype(np.int32)
    labels[0] = IGNORE_INDEX  # as tokenization leaves every example
    return SplitRule(capacity, overlap, min_last), labels


@settings(max_examples=300, deadline=None)
@given(examples())
def test_chunks_tile_the_example(case):
    rule, labels = case
    cut = cut_example(labels, rule)
    length, c, o = len(labels), rule.capacity, rule.overlap
    expected = 1 if length <= c else 1 + -(-(length - c) // (c - o))
    assert cut.count == expected
    assert cut.start.tolist() == [k * (c - o) for k in range(expected)]
    assert (cut.length <= c).all() and (cut.length >= 1).all()
    assert cut.start[-1] + cut.length[-1] == length  # the last chunk ends where the example does
    assert all(cut.start[k] + cut.length[k] - cut.start[k + 1] == o for k in range(expected - 1))  # overlap o
    # every token in one chunk, or two where chunks overlap; none in three
    seen = np.zeros(length, np.int64)
    for a, n in zip(cut.start.tolist(), cut.length.tolist()):
        seen[a:a + n] += 1
    assert seen.min() >= 1 and seen.max() <= (2 if o else 1)
    assert covered_tokens(cut.start, cut.length) == length


@settings(max_examples=300, deadline=None)
@given(examples())
def test_every_supervised_label_is_owned_by_one_chunk(case):
    rule, labels = case
    cut = cut_example(labels, rule)
    total = int((labels != IGNORE_INDEX).sum())
    assert int(cut.owned.sum()) == total  # owned regions partition the example
    trained = np.zeros(len(labels), np.int64)
    for k, (a, n) in enumerate(zip(cut.start.tolist(), cut.length.tolist())):
        chunk = chunk_labels(labels, k, a, n, rule)
        assert (chunk[:rule.masked(k)] == IGNORE_INDEX).all()  # the seam, and the overlap after chunk 0
        assert np.array_equal(chunk[rule.masked(k):], labels[a + rule.masked(k):a + n])  # else the example's labels
        assert int((chunk != IGNORE_INDEX).sum()) == cut.supervised[k]
        trained[a:a + n] += chunk != IGNORE_INDEX
    assert trained.max(initial=0) <= 1  # no supervised token counted twice
    # what the cut costs: the first label of each later chunk without overlap, none with one
    cost = int(cut.owned.sum() - cut.supervised.sum())
    if rule.overlap:
        assert cost == 0
    else:
        assert cost == sum(int(labels[a] != IGNORE_INDEX) for a in cut.start[1:].tolist())


@settings(max_examples=300, deadline=None)
@given(examples())
def test_which_chunks_are_kept(case):
    rule, labels = case
    cut = cut_example(labels, rule)
    for k in range(cut.count):
        own = cut.length[k] - (rule.overlap if k else 0)
        short_tail = k == cut.count - 1 and k > 0 and own < rule.min_last
        assert cut.kept[k] == (cut.supervised[k] > 0 and not short_tail), (k, cut)
        assert (cut.reasons[k] == "") == bool(cut.kept[k])
    assert cut.kept_supervised == int(cut.supervised[cut.kept].sum())


def test_the_documented_example():
    """docs/contract.md and the module docstring: L = 10, C = 4, o = 1."""
    labels = np.arange(10, dtype=np.int32)
    labels[0] = IGNORE_INDEX
    rule = SplitRule(4, 1)
    cut = cut_example(labels, rule)
    assert cut.start.tolist() == [0, 3, 6] and cut.length.tolist() == [4, 4, 4]
    assert chunk_labels(labels, 1, 3, 4, rule).tolist() == [IGNORE_INDEX, 4, 5, 6]
    assert cut.supervised.tolist() == [3, 3, 3] and cut.owned.tolist() == [3, 3, 3]
    no_overlap = cut_example(labels, SplitRule(4))
    assert no_overlap.start.tolist() == [0, 4, 8] and no_overlap.supervised.tolist() == [3, 3, 1]
    assert no_overlap.owned.tolist() == [3, 4, 2]  # t4 and t8 lose their labels at the cut


def test_covered_tokens_counts_each_token_once_per_group():
    assert covered_tokens(np.array([0, 3, 0]), np.array([4, 4, 2]), np.array([0, 0, 1])) == 7 + 2
    assert covered_tokens(np.array([0, 8]), np.array([4, 2])) == 6  # a gap: a dropped chunk's tokens
    assert covered_tokens(np.zeros(0), np.zeros(0)) == 0


@pytest.mark.parametrize(("overlap", "min_last", "problem"), [
    (3, 1, None), (4, 1, None), (5, 1, "`split_overlap` must be from 0 to half the capacity (4)"),
    (0, 9, "`split_min_last` must be from 1 to the capacity minus the overlap (8)"), (2, 6, None),
    (2, 7, "`split_min_last` must be from 1 to the capacity minus the overlap (6)"),
])
def test_rule_problems(overlap, min_last, problem):
    problems = SplitRule(8, overlap, min_last).problems()
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_options_are_checked_before_any_work(tmp_path):
    from packcli.config import PackConfig
    from packcli.errors import PackcliError

    base = dict(inputs=("missing.jsonl",), tokenizer="missing", out=tmp_path / "o", capacity=512)
    with pytest.raises(PackcliError, match="`split_overlap` and `split_min_last` need `overlong='split'`"):
        PackConfig(**base, split_overlap=8)
    with pytest.raises(PackcliError, match="`split_overlap` must be from 0 to half the capacity"):
        PackConfig(**base, overlong="split", split_overlap=300)
    with pytest.raises(PackcliError, match="`split_min_last` must be an integer from 1"):
        PackConfig(**base, overlong="split", split_min_last=0)
    assert PackConfig(**base, overlong="split", split_overlap=256, split_min_last=256).split_overlap == 256


# --- end to end: a corpus of long documents, split ---


@pytest.fixture(scope="module")
def long_docs(tmp_path_factory) -> list[str]:
    """Text documents of 1 to 6 capacities' worth of fixture tokens (and a few short ones)."""
    from conftest import jsonl_records

    texts = [r["text"] for r in jsonl_records("text.jsonl")]
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(texts, size=int(k))) for k in rng.integers(1, 14, size=40)]
    return docs


def _pack_docs(tmp_path, tokenizer_dir, docs, **options):
    from conftest import write_jsonl

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    tmp_path.mkdir(parents=True, exist_ok=True)
    src = write_jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in docs])
    out = tmp_path / "out"
    summary = pack_corpus(PackConfig(inputs=(str(src),), tokenizer=str(tokenizer_dir), out=out, capacity=256,
                                     packs_per_shard=32, **options))
    return out, summary.manifest


def _reassemble(out, manifest):
    """Each example's chunks, read back from the packs through the seam table: {line: [(chunk, start, ids, labels)]}."""
    from packcli.artifact.shards import load_flat

    flats = {s["name"]: load_flat(pq.read_table(out / s["name"]), s["name"]) for s in manifest["shards"]}
    chunks: dict[int, list] = {}
    for row in pq.read_table(out / "examples.parquet").to_pylist():
        if row["shard"] is None:
            chunks.setdefault(row["line"], []).append((row["chunk"], row["chunk_start"], None, None))
            continue
        flat = flats[row["shard"]]
        a = flat.row_offsets[row["row"]] + row["offset"]
        chunks.setdefault(row["line"], []).append((row["chunk"], row["chunk_start"], flat.ids[a:a + row["length"]],
                                                   flat.labels[a:a + row["length"]]))
    return chunks


@pytest.mark.parametrize("overlap", [0, 16])
def test_split_keeps_every_token_and_the_labels_the_whole_example_had(overlap, long_docs, tmp_path, tokenizer_dir,
                                                                      tokenizer):
    from packcli.verify import verify_artifact

    out, manifest = _pack_docs(tmp_path, tokenizer_dir, long_docs, overlong="split", split_overlap=overlap)
    assert verify_artifact(out).ok
    eos = "<|im_end|>"
    rule = SplitRule(256, overlap)
    split = 0
    for line, chunks in _reassemble(out, manifest).items():
        whole = np.asarray(tokenizer.tokenizer.encode(long_docs[line - 1] + eos).ids, np.int32)
        labels = whole.copy()
        labels[0] = IGNORE_INDEX
        assert [c[0] for c in chunks] == list(range(len(chunks)))
        assert [c[1] for c in chunks] == rule.starts(len(whole)).tolist()
        split += len(chunks) > 1
        rebuilt = np.concatenate([ids[(overlap if k else 0):] for k, _, ids, _ in chunks])
        assert np.array_equal(rebuilt, whole)  # no token lost, none repeated beyond the overlap
        for k, start, ids, got in chunks:
            assert np.array_equal(got, chunk_labels(labels, k, start, len(ids), rule))
    assert split >= 10
    assert manifest["counts"]["tokens_lost"] == 0 and manifest["counts"]["dropped"] == 0
    lost = manifest["counts"]["supervised_tokens_lost"]
    assert lost == (0 if overlap else manifest["counts"]["split"] - split)  # one label per later chunk


def test_split_min_last_drops_short_tails_and_counts_them(long_docs, tmp_path, tokenizer_dir):
    from packcli.verify import verify_artifact

    out, manifest = _pack_docs(tmp_path, tokenizer_dir, long_docs, overlong="split", split_min_last=200)
    assert verify_artifact(out).ok and verify_artifact(out, reconstruct=False).ok
    rows = pq.read_table(out / "examples.parquet").to_pylist()
    tails = [r for r in rows if r["status"] == "dropped"]
    assert tails and all(r["chunk"] > 0 and "--split-min-last 200" in r["reason"] for r in tails)
    assert manifest["counts"]["tokens_lost"] == sum(r["original_length"] - r["chunk_start"] for r in tails)
    assert all(r["original_length"] - r["chunk_start"] < 200 for r in tails)


def test_split_keeps_what_truncate_and_drop_lose(long_docs, tmp_path, tokenizer_dir):
    counts = {}
    for policy in ("drop", "truncate", "split"):
        _, manifest = _pack_docs(tmp_path / policy, tokenizer_dir, long_docs, overlong=policy,
                                 max_reject_fraction=1.0)
        counts[policy] = manifest["counts"]
    total = counts["split"]["tokens"] + counts["split"]["tokens_lost"]
    assert counts["split"]["tokens_lost"] == 0 and counts["split"]["tokens"] == total
    assert counts["drop"]["tokens"] < counts["truncate"]["tokens"] < counts["split"]["tokens"]
    assert counts["truncate"]["tokens"] + counts["truncate"]["tokens_lost"] == total
    assert counts["drop"]["tokens"] + counts["drop"]["tokens_lost"] == total


def test_chunks_reach_the_trainer_as_segments(long_docs, tmp_path, tokenizer_dir):
    """packcli.data: every chunk is a segment of its own (positions restart, first label -100), split_examples
    gives one feature per chunk, and TRL's own collator sees the same seams."""
    from packcli.data import collate_varlen, iter_packs, split_examples, trl_features
    from packcli.verify.consumer import check_consumer

    out, manifest = _pack_docs(tmp_path, tokenizer_dir, long_docs, overlong="split", split_overlap=8)
    rows = pq.read_table(out / "examples.parquet").to_pylist()
    chunk_ids = {r["example_id"] for r in rows if r["chunk"] > 0}
    seen = 0
    for pack in iter_packs(out):
        features = split_examples(pack)
        assert len(features) == len(pack.example_ids)
        for eid, feature, start in zip(pack.example_ids.tolist(), features, pack.cu_seqlens[:-1].tolist()):
            assert feature["labels"][0] == IGNORE_INDEX
            assert pack.position_ids[start] == 0
            seen += eid in chunk_ids
        batch = collate_varlen([pack])
        assert np.array_equal(batch["cu_seqlens"], pack.cu_seqlens)
        assert trl_features(pack)["seq_lengths"] == pack.seq_lengths.tolist()
    assert seen >= 10
    report = check_consumer(out, "trl", max_packs=8)
    assert report.ok, report


def test_show_names_the_chunk(long_docs, tmp_path, tokenizer_dir):
    from typer.testing import CliRunner

    from packcli.cli import app

    out, _ = _pack_docs(tmp_path, tokenizer_dir, long_docs, overlong="split")
    rows = pq.read_table(out / "examples.parquet").to_pylist()
    row = next(r for r in rows if r["chunk"] == 2)
    result = CliRunner().invoke(app, ["show", str(out), "--example", str(row["example_id"]), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert [e["row"]["chunk"] for e in shown["examples"]] == list(range(sum(r["example_id"] == row["example_id"]
                                                                            for r in rows)))
    text = CliRunner().invoke(app, ["show", str(out), "--example", str(row["example_id"])]).stdout
    assert "chunk 2 of" in text


@pytest.mark.parametrize(("overlap", "min_last"), [(0, 1), (16, 64)])
def test_stats_counts_what_pack_keeps_under_each_policy(overlap, min_last, long_docs, tmp_path, tokenizer_dir):
    """stats' over-long table is what pack writes: examples, segments (seam-table rows in packs), tokens,
    supervised tokens and packs, policy by policy, at the same capacity."""
    from packcli.stats import length_stats

    src = tmp_path / "src"
    _pack_docs(src, tokenizer_dir, long_docs, overlong="drop", max_reject_fraction=1.0)
    stats = length_stats([str(src / "docs.jsonl")], str(tokenizer_dir), capacities=(256, 100_000), workers=1,
                         split_overlap=overlap, split_min_last=min_last)
    cells = {(c.capacity, c.policy): c for c in stats.overlong}
    assert cells[100_000, "split"].segments == cells[100_000, "drop"].segments == len(long_docs)  # nothing over-long
    for policy in ("drop", "truncate", "split"):
        options = dict(split_overlap=overlap, split_min_last=min_last) if policy == "split" else {}
        out, manifest = _pack_docs(tmp_path / policy, tokenizer_dir, long_docs, overlong=policy,
                                   max_reject_fraction=1.0, **options)
        counts, cell = manifest["counts"], cells[256, policy]
        rows = pq.read_table(out / "examples.parquet").to_pylist()
        in_packs = [r for r in rows if r["shard"] is not None]
        assert cell.segments == len(in_packs) == counts["packed"] + counts["truncated"] + counts["split"]
        assert cell.examples == len({r["line"] for r in in_packs})
        assert (cell.tokens, cell.supervised, cell.packs) == (counts["tokens"], counts["supervised_tokens"],
                                                              counts["packs"])
    assert cells[256, "drop"].tokens < cells[256, "truncate"].tokens < cells[256, "split"].tokens


def test_split_with_a_mixture_and_duplicates(long_docs, tmp_path, tokenizer_dir):
    """Copies of a split record each have its chunks; a duplicate of a split record is one row; verify holds."""
    from conftest import write_jsonl

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus
    from packcli.verify import verify_artifact

    a = write_jsonl(tmp_path / "a.jsonl", [{"text": d} for d in long_docs[:20]] + [{"text": long_docs[0]}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": d} for d in long_docs[20:]])
    out = tmp_path / "out"
    pack_corpus(PackConfig(inputs=(str(a), str(b)), tokenizer=str(tokenizer_dir), out=out, capacity=256,
                           overlong="split", split_overlap=4, mix="a.jsonl=2x,b.jsonl=0.5x", dedupe="exact"))
    report = verify_artifact(out)
    assert report.ok, [(c.name, [v.message for v in c.violations][:3]) for c in report.checks if not c.ok]
    rows = pq.read_table(out / "examples.parquet").to_pylist()
    split = [r for r in rows if r["status"] == "split"]
    by_copy: dict[tuple, list[int]] = {}
    for r in split:
        by_copy.setdefault((r["input"], r["line"], r["copy"]), []).append(r["chunk"])
    copies = {(k[0], k[1]) for k in by_copy if k[2] == 1}
    assert copies and all(by_copy[(*k, 0)] == by_copy[(*k, 1)] for k in copies)  # each copy cut alike
    assert [r["status"] for r in rows if r["input"] == 0 and r["line"] == 21] == ["duplicate"]
    assert any(r["status"] == "unsampled" for r in rows)
