"""`packcli.verify.chunking` (the plan check's half for ``--overlong split``): the seam table's chunk rows
against the re-derived cut, and the other checks' view of a forged chunk."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import seam_rows
from forgery import caught, manifest_of, roomiest

from packcli.verify import forge, verify_artifact
from packcli.verify.forge import Segment, follow_packs, read_segments, reseal, rewrite_seam, write_segments

# every plan check below runs file-backed too (tests/conftest.py): the same report, over files
pytestmark = pytest.mark.usefixtures("plan_file_backed_too")


@pytest.fixture(scope="module")
def packed_split(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """The fixture corpus at capacity 512, over-long examples split with an overlap of 32 tokens."""
    from conftest import FIXTURES

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path_factory.mktemp("split") / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]),
                           tokenizer=str(tokenizer_dir), out=out, capacity=512, packs_per_shard=16,
                           overlong="split", split_overlap=32))
    return out


@pytest.fixture()
def split_copy(packed_split, tmp_path) -> Path:
    import shutil

    shutil.copytree(packed_split, tmp_path / "split")
    return tmp_path / "split"


def _split_example(d: Path, *, chunks: int = 2, last_room: int = 0) -> list[int]:
    """The seam-table rows of the first split example with ``chunks`` chunks, all packed, whose last chunk
    leaves at least ``last_room`` tokens of room below the capacity."""
    rows, capacity = seam_rows(d), manifest_of(d)["config"]["capacity"]
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["input"], r["line"], r["copy"]), []).append(i)
    return next(g for g in groups.values() if len(g) == chunks and all(rows[i]["status"] == "split" for i in g)
                and rows[g[-1]]["length"] + last_room <= capacity)


def _shard_of(row: dict) -> int:
    return int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))


def _replace_segment(d: Path, row: dict, segment: Segment | None) -> None:
    """Put ``segment`` where ``row``'s chunk is in its pack (None: take the chunk out)."""
    k = _shard_of(row)
    packs = read_segments(d, k)
    pack, offset = packs[row["row"]], 0
    for q, s in enumerate(pack):
        if s.example_id == row["example_id"] and offset == row["offset"]:
            pack[q:q + 1] = [] if segment is None else [segment]
            break
        offset += len(s.input_ids)
    else:
        raise AssertionError("the chunk is not where its row says")
    write_segments(d, k, packs)


def _chunk_segment(d: Path, row: dict, chunk: int, start: int, length: int) -> Segment:
    """Chunk ``chunk`` of ``row``'s example cut at ``start`` for ``length`` tokens, masked as a chunk is."""
    from packcli.job.chunks import SplitRule, chunk_labels

    config = manifest_of(d)["config"]
    full = forge.fresh_example(d, row["input"], row["line"])
    rule = SplitRule(config["capacity"], config["split_overlap"], config["split_min_last"])
    return Segment(row["example_id"], full.input_ids[start:start + length].tolist(),
                   chunk_labels(full.labels, chunk, start, length, rule).tolist())


def test_a_split_pack_verifies_and_tiles_its_examples(packed_split):
    assert verify_artifact(packed_split).ok
    assert verify_artifact(packed_split, reconstruct=False).ok  # the plan from the seam table's own claims
    rows = seam_rows(packed_split)
    assert any(r["status"] == "dropped" and "holds no supervised token" in r["reason"] for r in rows)
    assert any(r["status"] == "split" and r["chunk"] == 2 for r in rows)
    overlap = manifest_of(packed_split)["config"]["split_overlap"]
    for g in (_split_example(packed_split), _split_example(packed_split, chunks=3)):
        starts = [rows[i]["chunk_start"] for i in g]
        assert starts == [k * (512 - overlap) for k in range(len(g))]
        assert rows[g[-1]]["chunk_start"] + rows[g[-1]]["length"] == rows[g[0]]["original_length"]


def test_a_chunk_dropped_from_its_pack_and_the_seam_table(split_copy):
    """The last chunk of an example taken out of its pack and its row deleted: its tokens are lost."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy)
    _replace_segment(split_copy, rows[g[-1]], None)
    rewrite_seam(split_copy, lambda rows: rows.pop(g[-1]))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, "plan", "chunk 1 (tokens 480..")
    caught(split_copy, "plan", "has no row: its tokens are lost")


@pytest.mark.parametrize(("chunk", "check", "phrase"), [
    (None, "plan", "chunk 1 has a second row: its tokens would be trained on twice"),
    (2, "plan", "chunk 2 is not a chunk of the example"),
], ids=["same-chunk", "renumbered-chunk-2"])
def test_a_chunk_duplicated_in_another_pack(chunk, check, phrase, split_copy):
    """A second copy of a chunk packed where there is room, with a seam row of its own naming the same chunk,
    or calling it chunk 2 of an example cut into two (a chunk the cut does not have)."""
    rows = seam_rows(split_copy)
    _, _, room = roomiest(split_copy)
    g = _split_example(split_copy, last_room=512 - room)
    row = rows[g[-1]]
    k, r, _ = roomiest(split_copy)
    chunk = row["chunk"] if chunk is None else chunk
    packs = read_segments(split_copy, k)
    packs[r].append(_chunk_segment(split_copy, row, chunk, row["chunk_start"], row["length"]))
    write_segments(split_copy, k, packs)
    rewrite_seam(split_copy, lambda rows: rows.insert(g[-1] + 1, dict(rows[g[-1]], chunk=chunk)))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, check, phrase)
    if chunk == row["chunk"]:
        caught(split_copy, "global", "both name")
    plan = next(c for c in verify_artifact(split_copy, reconstruct=False).checks if c.name == "plan")
    assert any(phrase in v.message for v in plan.violations)  # the plan sees it from the seam table alone too


def test_a_chunk_with_a_shifted_offset(split_copy):
    """Chunk 1 cut 7 tokens later than the rule says, its tokens and labels consistent with that start."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy)
    row = rows[g[1]]
    shifted = _chunk_segment(split_copy, row, 1, row["chunk_start"] + 7, row["length"] - 7)
    _replace_segment(split_copy, row, shifted)
    rewrite_seam(split_copy, lambda rows: rows[g[1]].update(chunk_start=row["chunk_start"] + 7))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, "plan", f"chunk_start is {row['chunk_start'] + 7}")


def _forge_chunk_1_labels(d: Path, edit) -> None:  # noqa: ANN001 - edit(labels, full example) in place
    """Chunk 1 of a split example rewritten with its labels edited, everything else consistent, re-sealed."""
    rows = seam_rows(d)
    row = rows[_split_example(d)[1]]
    segment = _chunk_segment(d, row, 1, row["chunk_start"], row["length"])
    edit(segment, forge.fresh_example(d, row["input"], row["line"]).labels[row["chunk_start"]:].tolist())
    _replace_segment(d, row, segment)
    follow_packs(d)
    reseal(d, recount_counts=True)


def test_a_chunk_whose_first_label_is_not_masked(split_copy):
    """Chunk 1 trained to predict its first token from nothing: the seam label supervised."""
    _forge_chunk_1_labels(split_copy, lambda segment, full: segment.labels.__setitem__(0, segment.input_ids[0]))
    caught(split_copy, "pack_layout", "seam label supervised")
    caught(split_copy, "reconstruction", "labels differ from a fresh tokenization at position 0")


def test_a_chunk_whose_overlap_is_supervised_twice(split_copy):
    """The overlap of chunk 1 (context, supervised in chunk 0) given its labels back: trained on twice."""
    _forge_chunk_1_labels(split_copy, lambda segment, full: segment.labels.__setitem__(slice(1, 32), full[1:32]))
    caught(split_copy, "reconstruction", "labels differ from a fresh tokenization at position 1")
    caught(split_copy, "plan", "supervised is")


def test_a_chunk_boundary_moved(split_copy):
    """Chunk 0 cut 10 tokens short and chunk 1 started 10 tokens earlier: every token still packed once,
    every label consistent, but not the cut the pinned rule makes."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy, last_room=10)
    first, second = rows[g[0]], rows[g[1]]
    _replace_segment(split_copy, first, _chunk_segment(split_copy, first, 0, 0, first["length"] - 10))
    _replace_segment(split_copy, second, None)  # the longer chunk 1 goes into a pack of its own
    last = len(manifest_of(split_copy)["shards"]) - 1
    packs = read_segments(split_copy, last)
    packs.append([_chunk_segment(split_copy, second, 1, second["chunk_start"] - 10, second["length"] + 10)])
    write_segments(split_copy, last, packs)
    rewrite_seam(split_copy, lambda rows: rows[g[1]].update(chunk_start=second["chunk_start"] - 10))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    report = caught(split_copy, "plan", "length is 502")
    caught(split_copy, "plan", f"chunk_start is {second['chunk_start'] - 10}")
    assert report["ok"] is False


def test_the_self_tests_overlong_fault_on_a_split_artifact(packed_split, tmp_path):
    """--self-test's overlong-policy fault on a split artifact: a split example's later chunks taken out and its
    first chunk called truncated (split keeps what truncation loses)."""
    from packcli.verify.faults import FAULTS, prepare_workspace

    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    copy = prepare_workspace(packed_split, tmp_path)
    fault.apply(copy, tmp_path)
    caught(copy, "plan", "it must be split")
