"""JSON arrays in: a .json file whose top level is an array of records is read element by element (streamed,
``file:index`` locations), packs as the same records in JSON Lines would, and a file whose name says JSON
Lines but holds an array or CSV is named for what it is before any work."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from conftest import jsonl_records
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.checks import input_problems
from packcli.config import PackConfig
from packcli.errors import InputError
from packcli.ingest import SourceKind, describe_input, read_source, source_of
from packcli.ingest.jsonarray import Layout, iter_elements, sniff_layout
from packcli.job.run import pack_corpus
from packcli.verify import verify_artifact

UNIFORM = ("sharegpt.jsonl", "prompt_completion.jsonl", "text.jsonl")
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(json_values, max_size=8), indent=st.sampled_from([None, 0, 2]),
       ascii_only=st.booleans(), chunk=st.integers(1, 40))
def test_elements_are_the_arrays_elements_at_their_byte_offsets(values, indent, ascii_only, chunk):
    """Whatever the layout and wherever a read ends (a read of 1 byte splits every element and character)."""
    data = json.dumps(values, indent=indent, ensure_ascii=ascii_only).encode()
    got = list(iter_elements(io.BytesIO(data), "t.json", chunk=chunk))
    assert [json.loads(raw) for _, _, raw in got] == values
    assert [index for index, _, _ in got] == list(range(len(values)))
    assert all(data[offset:offset + len(raw)] == raw for _, offset, raw in got)


@pytest.mark.parametrize("chunk", range(1, 20))
def test_a_number_cut_by_a_read_is_read_whole(chunk):
    """The case hypothesis found: '[{"": false}, 0.0]' read 16 bytes at a time parsed '0' and then failed on '.'."""
    values = [{"": False}, 0.0, -1.5e-7, 12345, 1e5, -0]
    data = json.dumps(values).encode()
    assert [json.loads(raw) for _, _, raw in iter_elements(io.BytesIO(data), "t.json", chunk=chunk)] == values


def test_reads_are_bounded_by_the_chunk_and_the_largest_element():
    """Streamed: a file of many elements is never read whole."""
    data = json.dumps([{"text": "x" * (i % 50)} for i in range(2000)]).encode()
    reads = []

    class Spy(io.BytesIO):
        def read(self, n=-1):
            reads.append(n)
            return super().read(n)

    assert sum(1 for _ in iter_elements(Spy(data), "t.json", chunk=256)) == 2000
    assert max(reads) <= 256 * 2 and len(reads) > len(data) // 512


@pytest.mark.parametrize("data,what", [
    (b"[1,2", "the file ends inside the array at byte 4 \\(element 2\\)"),
    (b'[{"a": 1} {"b": 2}]', "expected , or \\] after an element, found '\\{' at byte 10 \\(element 1\\)"),
    (b'[{"a": 1}] []', "content after the array at byte 11 \\(element 1\\)"),
    (b'[{"a": 1}, ]', "Expecting value at byte 11 \\(element 1\\)"),
    (b'{"a": 1}', "the file does not start with \\["),
])
def test_a_broken_array_is_an_error_naming_the_byte_and_element(data, what):
    with pytest.raises(InputError, match="t.json: not a JSON array of records: " + what):
        list(iter_elements(io.BytesIO(data), "t.json"))


def test_an_element_with_invalid_utf8_is_rejected_alone(tmp_path, tokenizer_dir):
    good = json.dumps({"text": "fine"}).encode()
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf[" + good + b",\n" + b'{"text": "bad \xff\xfe"},' + good + b"]")
    assert source_of(path).kind is SourceKind.json_array
    raws = [raw for _, raw in read_source(source_of(path))]
    assert raws == [good, b'{"text": "bad \xff\xfe"}', good]  # byte for byte, the BOM skipped
    summary = pack_corpus(PackConfig(inputs=(str(path),), tokenizer=str(tokenizer_dir), out=tmp_path / "o",
                                     capacity=64))
    assert summary.manifest["counts"]["rejected"] == 1
    reject = json.loads((tmp_path / "o" / "rejects.jsonl").read_text())
    assert reject["source"] == "a.json" and reject["line"] == 1 and "invalid UTF-8" in reject["reason"]


@pytest.mark.parametrize("per_unit", [1, 4, 1000])
def test_a_json_array_packs_as_its_records_in_json_lines_do(tmp_path, tokenizer_dir, per_unit):
    records = jsonl_records(*UNIFORM)
    array = tmp_path / "data.json"
    array.write_text(json.dumps(records, indent=2, ensure_ascii=False), encoding="utf-8")
    lines = tmp_path / "data.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    a = pack_corpus(PackConfig(inputs=(str(array),), tokenizer=str(tokenizer_dir), out=tmp_path / "a", capacity=512,
                               lines_per_unit=per_unit))
    b = pack_corpus(PackConfig(inputs=(str(lines),), tokenizer=str(tokenizer_dir), out=tmp_path / "b", capacity=512))
    if per_unit == 4:
        assert a.units == -(-len(records) // 4)
    assert a.manifest["inputs"][0]["kind"] == "json-array"
    assert a.manifest["metrics"] == b.manifest["metrics"]
    assert {k: v for k, v in a.manifest["counts"].items() if k != "by_input"} == \
        {k: v for k, v in b.manifest["counts"].items() if k != "by_input"}
    import pyarrow.parquet as pq

    seams = pq.read_table(tmp_path / "a" / "examples.parquet").to_pydict()
    assert sorted(seams["line"]) == list(range(len(records)))  # elements from 0, as json.load(f)[i]
    assert verify_artifact(tmp_path / "a").ok


def test_a_compressed_json_array_is_one_span(tmp_path, tokenizer_dir):
    records = jsonl_records("text.jsonl")
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(records).encode()))
    source = describe_input(path)
    assert source.kind is SourceKind.json_array
    assert [json.loads(raw) for _, raw in read_source(source)] == records
    summary = pack_corpus(PackConfig(inputs=(str(path),), tokenizer=str(tokenizer_dir), out=tmp_path / "o",
                                     capacity=4096, lines_per_unit=3))
    assert summary.units == 1 and summary.manifest["counts"]["records"] == len(records)


@pytest.mark.parametrize("name,text,layout", [
    ("a.json", '[\n  {"text": "x"}\n]\n', Layout.array),
    ("b.json", '[{"text": "x"}, {"text": "y"}]', Layout.array),  # minified: one line, the whole file
    ("c.json", '{"text": "x"}\n{"text": "y"}\n', Layout.lines),  # datasets' to_json writes JSON Lines as .json
    ("d.jsonl", '["not", "an", "object"]\n{"text": "y"}\n', Layout.lines),  # JSON Lines: line 1 is rejected alone
    ("e.jsonl", 'instruction,input,output\nhi,,yo\n', Layout.csv),
    ("f.jsonl", 'a\tb\n1\t2\n', Layout.csv),
    ("g.jsonl", '', Layout.lines),
])
def test_the_layout_is_told_from_the_first_bytes(tmp_path, name, text, layout):
    (tmp_path / name).write_text(text)
    assert sniff_layout(tmp_path / name)[0] is layout


def test_a_json_lines_name_over_an_array_or_csv_is_named_before_any_work(tmp_path):
    (tmp_path / "array.jsonl").write_text(json.dumps([{"text": "x"}, {"text": "y"}], indent=1))
    (tmp_path / "table.jsonl").write_text("instruction,input,output\nhi,,yo\n")
    (tmp_path / "table.csv").write_text("instruction,input,output\nhi,,yo\n")
    (tmp_path / "fine.json").write_text(json.dumps([{"text": "x"}]))
    problems = input_problems([tmp_path / "array.jsonl", tmp_path / "table.jsonl", tmp_path / "table.csv",
                               tmp_path / "fine.json"])
    assert problems == [
        f"{tmp_path / 'array.jsonl'}: holds one JSON array, not JSON Lines (one object per line); name it .json to "
        "read its elements as records",
        f"{tmp_path / 'table.jsonl'}: holds CSV (header: instruction, input, output), not JSON; packcli reads JSON "
        "Lines, JSON arrays, Parquet and datasets tables: convert it first, e.g. datasets.load_dataset('csv', "
        f"data_files='{tmp_path / 'table.jsonl'}')['train'].save_to_disk(DIR), then pass DIR",
        f"{tmp_path / 'table.csv'}: a CSV file; packcli reads JSON Lines, JSON arrays, Parquet and datasets tables: "
        f"convert it first, e.g. datasets.load_dataset('csv', data_files='{tmp_path / 'table.csv'}')['train']"
        ".save_to_disk(DIR), then pass DIR",
    ]
