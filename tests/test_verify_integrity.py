"""`packcli.verify.integrity` (the ``integrity`` check): the artifact is what its manifest says, byte for byte,
and the folder is a closed set: what ``load_dataset(OUT)`` reads is what verify checks."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from forgery import REDIRECT, caught, edit_manifest

from packcli.contract import file_sha256
from packcli.verify import forge
from packcli.verify.forge import reseal, rewrite_packs


def test_a_shard_listed_twice(packed_copy):
    reseal(packed_copy, lambda m: m["shards"].append(dict(m["shards"][0])))
    caught(packed_copy, "integrity", "listed twice")


def test_rejects_jsonl_edited_without_resealing(packed_copy):
    forge.rewrite_rejects(packed_copy, lambda rows: rows.pop())
    caught(packed_copy, "integrity", "rejects.jsonl: sha256 differs")


def test_per_shard_tokens_and_supervised_forged(packed_copy):
    edit_manifest(packed_copy, lambda m: m["shards"][1].update(tokens=m["shards"][1]["tokens"] - 5,
                                                               supervised=m["shards"][1]["supervised"] + 5))
    report = caught(packed_copy, "integrity", "shards[1].tokens")
    assert any("shards[1].supervised" in v["field"] for c in report["checks"] for v in c["violations"] if v["field"])


def test_a_labels_row_shorter_than_its_input_ids(packed_copy):
    rewrite_packs(packed_copy, 0, lambda rows: rows[2]["labels"].pop())
    reseal(packed_copy)
    caught(packed_copy, "integrity", "malformed row: labels has")


def test_a_null_in_the_seam_table(packed_copy):
    import pyarrow.parquet as pq

    path = packed_copy / "examples.parquet"
    table = pq.read_table(path)
    lengths = table["length"].to_pylist()
    lengths[0] = None
    table = table.set_column(table.schema.get_field_index("length"), "length", pa.array(lengths, pa.int32()))
    pq.write_table(table, path)
    reseal(packed_copy)
    caught(packed_copy, "integrity", "null values in length")


def _poisoned_copy(d: Path) -> Path:
    """A Parquet file of the shards' schema whose first pack supervises every token (what a redirect points at)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(d / "shard-00000.parquet").to_pylist()
    rows[0]["labels"] = list(rows[0]["input_ids"])
    target = d / "data" / "train.parquet"
    target.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(d / "shard-00000.parquet")), target)
    return target


@pytest.mark.parametrize(("make", "name", "phrase"), [
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(path="data/*.parquet", extra="")) and
     _poisoned_copy(d), ".huggingface.yaml", "datasets.load_dataset reads it as the dataset card's YAML"),
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(
        path="shard-*.parquet", extra="  columns: [input_ids, seq_lengths]\n")), ".huggingface.yaml", "remove it"),
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(
        path="shard-*.parquet", extra="  filters: [[num_tokens, '>', 1000]]\n")), ".huggingface.yaml", "remove it"),
    (lambda d: (d / "shard-00099.parquet").write_bytes((d / "shard-00000.parquet").read_bytes()), "shard-00099.parquet",
     "the manifest does not list it"),
    (lambda d: _poisoned_copy(d), "data", "(a folder) is not part of the artifact"),
], ids=["yaml-redirect", "yaml-columns-without-labels", "yaml-filters", "extra-shard", "data-folder"])
def test_a_file_the_manifest_does_not_list(make, name, phrase, packed_copy):
    """Nothing pinned is touched: every hash still holds, and load_dataset(OUT) would read something else."""
    make(packed_copy)
    report = caught(packed_copy, "integrity", phrase, "--no-reconstruct")
    messages = [v["message"] for c in report["checks"] for v in c["violations"]]
    assert any(m.startswith(name) for m in messages), messages


def test_a_pinned_file_replaced_by_a_symlink(packed_copy, tmp_path):
    """The link points at identical bytes today: verify passes them, then the target can change."""
    elsewhere = tmp_path / "elsewhere.parquet"
    (packed_copy / "shard-00001.parquet").rename(elsewhere)
    (packed_copy / "shard-00001.parquet").symlink_to(elsewhere)
    caught(packed_copy, "integrity", "shard-00001.parquet is a symbolic link, not a regular file", "--no-reconstruct")


def test_the_cards_yaml_is_the_pinned_one(packed_copy):
    """The card's configs widened to every Parquet file (the seam table too), its sha256 re-pinned."""
    card = packed_copy / "README.md"
    card.write_text(card.read_text().replace('path: "shard-*.parquet"', 'path: "*.parquet"'))
    edit_manifest(packed_copy, lambda m: m["dataset_card"].update(bytes=card.stat().st_size,
                                                                   sha256=file_sha256(card)))
    caught(packed_copy, "integrity", "is not the card this manifest renders", "--no-reconstruct")


def _rejects_text(directory: Path, edit) -> None:
    """rejects.jsonl's text edited, then the manifest re-sealed (as a forger would)."""
    path = directory / "rejects.jsonl"
    path.write_bytes(edit(path.read_bytes()))
    reseal(directory)


def test_a_reject_line_that_is_not_json(packed_copy):
    _rejects_text(packed_copy, lambda text: text.replace(b"\n", b"\n{oops\n", 1))
    report = caught(packed_copy, "integrity", "rejects.jsonl:2: not a JSON object")
    assert not next(c for c in report["checks"] if c["name"] == "global")["violations"]  # nothing to compare


def test_rejects_without_its_last_newline_and_with_a_line_too_many(packed_copy):
    _rejects_text(packed_copy, lambda text: text + b'{"extra": 1}')
    caught(packed_copy, "integrity", "the last line does not end with a newline")
    caught(packed_copy, "integrity", "rows != rejects.rows")
    lines = (packed_copy / "rejects.jsonl").read_bytes().count(b"\n") + 1
    caught(packed_copy, "global", f'rejects.jsonl line {lines} is not what pack writes for the seam table\'s '
                                  'rejected rows: {"extra": 1} instead of None')


def test_reject_lines_split_at_newline_alone(tmp_path):
    """U+2028 and a carriage return are text inside a JSON line; a line's bytes decode as the file's would."""
    from packcli.verify.integrity import reject_lines

    path = tmp_path / "rejects.jsonl"
    path.write_bytes('{"a": "x\u2028y"}\r\n{"b": "\u00e9"}\n'.encode() + b"\xe2\n")  # and a broken character
    assert list(reject_lines(path)) == ['{"a": "x\u2028y"}\r', '{"b": "\u00e9"}', "\ufffd"]
