"""`packcli.ingest.hf`: a ``datasets`` table on disk or a Hub name from the local cache, read offline; what is not a
table is a clear error."""

from __future__ import annotations

import pytest
from conftest import hub_cache, jsonl_records, pack_inputs, token_columns, write_jsonl, write_parquet

from packcli.errors import InputError
from packcli.ingest import SourceKind, expand_inputs, read_source, read_span, reader
from packcli.verify import verify_artifact


def test_datasets_directory_is_read_across_its_arrow_files(tmp_path, tokenizer_dir):
    datasets = pytest.importorskip("datasets")
    records = jsonl_records("sharegpt.jsonl")
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "ds"), num_shards=3)
    source = expand_inputs([tmp_path / "ds"])[0]
    assert source.kind is SourceKind.dataset and len(source.files) == 3
    spans = reader(SourceKind.dataset).split(source, 7)
    got = [(n, row) for span in spans for n, row in read_span(span)]
    assert [n for n, _ in got] == list(range(len(records))) and [r for _, r in got] == records
    jsonl = pack_inputs([write_jsonl(tmp_path / "s.jsonl", records)], tokenizer_dir, tmp_path / "j")
    ds = pack_inputs([tmp_path / "ds"], tokenizer_dir, tmp_path / "d", lines_per_unit=11)
    assert token_columns(tmp_path / "j", jsonl.manifest) == token_columns(tmp_path / "d", ds.manifest)
    assert verify_artifact(tmp_path / "d").ok


def test_a_datasetdict_or_plain_directory_is_a_clear_error(tmp_path):
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_list([{"text": "a"}])
    datasets.DatasetDict({"train": table, "test": table}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match="DatasetDict with splits train, test") as info:
        expand_inputs([tmp_path / "dd"])
    assert str(tmp_path / "dd" / "train") in info.value.hint
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        expand_inputs([tmp_path / "plain"])


def test_hub_name_from_the_local_cache_offline(tmp_path, tokenizer_dir, monkeypatch):
    pytest.importorskip("datasets")
    records = jsonl_records("prompt_completion.jsonl")
    cache = hub_cache(tmp_path, "tester/chat", {"train": write_parquet(tmp_path / "t.parquet", records),
                                                "test": write_parquet(tmp_path / "v.parquet", records[:5])})
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    train = expand_inputs(["hf:tester/chat"])[0]
    assert train.kind is SourceKind.dataset and [r for _, r in read_source(train)] == records
    assert len(list(read_source(expand_inputs(["hf:tester/chat:test"])[0]))) == 5
    summary = pack_inputs(["hf:tester/chat"], tokenizer_dir, tmp_path / "o")
    assert summary.manifest["inputs"][0]["name"] == "hf:tester/chat"  # location-free as it is
    assert verify_artifact(tmp_path / "o").ok
    assert "HF_HUB_OFFLINE" not in __import__("os").environ  # the caller's environment is left as it was
    with pytest.raises(InputError, match="hf:tester/nope: not readable from the local Hugging Face cache"):
        expand_inputs(["hf:tester/nope"])
    with pytest.raises(InputError, match="not a dataset name"):
        expand_inputs(["hf:a:b:c:d"])
