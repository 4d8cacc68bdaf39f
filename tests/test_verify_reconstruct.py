"""`packcli.verify.reconstruct` (the ``reconstruction`` check): every example re-derived from its source record
equals its pack span, against forgers who re-seal every hash (`packcli.verify.forge`, tests/forgery.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import seam_rows
from forgery import caught, manifest_of
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.contract import example_id
from packcli.verify import forge, verify_artifact
from packcli.verify.faults import FAULTS, prepare_workspace
from packcli.verify.forge import Segment, read_segments, reseal, rewrite_seam, write_segments


def test_an_extra_dropped_record_beyond_the_source(packed_copy):
    """301 records from a 300-line corpus: a dropped row for a line the file does not have, its id by the formula."""
    k, entry = next((k, e) for k, e in enumerate(manifest_of(packed_copy)["inputs"]) if e["name"] == "openai.jsonl")
    line = entry["records"] + 1

    def add_row(rows: list[dict]) -> None:
        last = max(i for i, r in enumerate(rows) if r["input"] == k)
        rows.insert(last + 1, dict(rows[last], example_id=example_id(entry["sha256"], 0, line), line=line,
                                   status="dropped", reason="2000 tokens > capacity 1024; truncation would keep no "
                                   "supervised tokens", shard=None, row=-1, offset=-1, length=0,
                                   original_length=2000, supervised=0, supervised_lost=10))
    rewrite_seam(packed_copy, add_row)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "reconstruction", "not a record in the source")
    caught(packed_copy, "reconstruction", f"{line - 1} records read from the source, inputs[{k}].records says {line}")


def test_two_lines_swapped_with_their_ids_recomputed(packed_copy):
    """The forger swaps two records' lines and gives each the documented id of its new line."""
    m = manifest_of(packed_copy)
    sha = [e["sha256"] for e in m["inputs"]]
    rows = seam_rows(packed_copy)
    a, b = [i for i, r in enumerate(rows) if r["status"] == "packed" and r["source"] == "openai.jsonl"][:2]
    new = {rows[a]["example_id"]: example_id(sha[rows[a]["input"]], 0, rows[b]["line"]),
           rows[b]["example_id"]: example_id(sha[rows[b]["input"]], 0, rows[a]["line"])}
    for k in range(len(m["shards"])):
        packs = read_segments(packed_copy, k)
        write_segments(packed_copy, k, [[Segment(new.get(s.example_id, s.example_id), s.input_ids, s.labels)
                                         for s in p] for p in packs])

    def swap(rows: list[dict]) -> None:
        rows[a]["line"], rows[b]["line"] = rows[b]["line"], rows[a]["line"]
        for i in (a, b):
            rows[i]["example_id"] = new[rows[i]["example_id"]]
        rows[a], rows[b] = rows[b], rows[a]  # input order by line again
    rewrite_seam(packed_copy, swap)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "reconstruction", "differ from a fresh tokenization")


def test_both_loss_fields_forged_alike(packed_copy):
    reseal(packed_copy, lambda m: (m["config"].update(loss="all"), m.update(loss_policy="all")))
    caught(packed_copy, "reconstruction", "labels differ from a fresh tokenization")


def test_input_format_forged(packed_copy):
    """Under --format messages the text and prompt/completion records would have been rejected."""
    reseal(packed_copy, lambda m: m["config"].update(input_format="messages"))
    caught(packed_copy, "reconstruction", "re-running gives rejection")


def test_a_valid_but_wrong_column_mapping(packed_copy):
    """config.fields says text records were read from a field they do not have."""
    reseal(packed_copy, lambda m: m["config"].update(fields={"text": "body"}))
    caught(packed_copy, "reconstruction", "re-running gives rejection")


def test_an_input_renamed_everywhere(packed_copy):
    """inputs[].name, the seam table's source and rejects.jsonl renamed alike; the file is still found (provenance)."""
    k = next(k for k, e in enumerate(manifest_of(packed_copy)["inputs"]) if e["name"] == "text.jsonl")
    rewrite_seam(packed_copy, lambda rows: [r.update(source="texts.jsonl") for r in rows if r["input"] == k])
    forge.rewrite_rejects(packed_copy, lambda rows: [r.update(source="texts.jsonl") for r in rows if r["input"] == k])
    reseal(packed_copy, lambda m: m["inputs"][k].update(name="texts.jsonl"))
    caught(packed_copy, "reconstruction", f"inputs[{k}].name is 'texts.jsonl', but the source is text.jsonl")


@pytest.fixture(scope="module")
def dropped_calls(tmp_path_factory, tokenizer_dir) -> Path:
    """Tool records under TRL's lfm2 training template, which never prints tool calls, packed with
    --allow-dropped-fields tool_calls."""
    from importlib import resources

    pytest.importorskip("trl")
    from chat_data import tool_conversations
    from conftest import write_jsonl

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    root = tmp_path_factory.mktemp("dropped")
    template = root / "lfm2_training.jinja"
    template.write_text((resources.files("trl") / "chat_templates" / "lfm2_training.jinja").read_text(), "utf-8")
    records = tool_conversations(12, reasoning=False) + [
        {"messages": [{"role": "user", "content": f"Q{k}?"}, {"role": "assistant", "content": f"A{k}."}]}
        for k in range(12)]
    for message in (m for r in records for m in r["messages"] if m.get("content") is None):
        message["content"] = ""
    out = root / "packed"
    pack_corpus(PackConfig(inputs=(str(write_jsonl(root / "tools.jsonl", records)),), tokenizer=str(tokenizer_dir),
                           out=out, capacity=2048, template=str(template), allow_dropped_fields=("tool_calls",)))
    assert verify_artifact(out).ok and manifest_of(out)["counts"]["dropped_fields"] == {"tool_calls": 12}
    return out


@pytest.fixture()
def dropped_copy(dropped_calls, tmp_path) -> Path:
    import shutil

    shutil.copytree(dropped_calls, tmp_path / "dropped")
    return tmp_path / "dropped"


def test_the_count_of_records_whose_calls_were_dropped_forged(dropped_copy):
    reseal(dropped_copy, lambda m: m["counts"]["dropped_fields"].update(tool_calls=0))
    caught(dropped_copy, "reconstruction", "counts.dropped_fields.tool_calls is 0, but re-rendering drops tool_calls "
                                           "from 12 records")


def test_the_permission_to_drop_calls_removed(dropped_copy):
    """Without config.allow_dropped_fields the same records are rejects: the packs hold what pack refuses."""
    def forge_it(m: dict) -> None:
        del m["config"]["allow_dropped_fields"]
        del m["counts"]["dropped_fields"]
    reseal(dropped_copy, forge_it)
    caught(dropped_copy, "reconstruction", "re-running gives rejection")


def test_worker_processes_check_the_same_records(packed):
    serial, parallel = verify_artifact(packed, workers=1), verify_artifact(packed, workers=2)
    assert parallel.ok and serial.to_dict()["checks"] == parallel.to_dict()["checks"]


def test_a_small_artifact_is_reconstructed_here_alone(packed, monkeypatch):
    """Without --workers, sources of kilobytes start no worker process (`auto_processes`); --workers 2 does."""
    from packcli.engine import local

    started: list[int] = []
    real = local.SharedPool
    monkeypatch.setattr(local, "SharedPool", lambda workers, warm=None: started.append(workers) or real(workers, warm))
    assert verify_artifact(packed).ok and verify_artifact(packed, workers=2).ok
    assert started == [1, 2]


@pytest.mark.parametrize("name", ["label-masked", "dropped-without-record"])
def test_worker_processes_catch_reconstruction_faults(name, packed, tmp_path):
    """The digest path: workers send digests, this process finds the mismatch and explains it."""
    fault = next(f for f in FAULTS if f.name == name)
    copy = prepare_workspace(packed, tmp_path)
    fault.apply(copy, tmp_path)
    serial, parallel = verify_artifact(copy, workers=1), verify_artifact(copy, workers=2)
    check = next(c for c in parallel.checks if c.name == "reconstruction")
    assert not check.ok and any(fault.expect in v.message for v in check.violations), check.violations
    assert serial.to_dict()["checks"] == parallel.to_dict()["checks"]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ordered=st.booleans(), block=st.sampled_from([1, 3, 1 << 16]))
def test_record_rows_hand_each_record_its_rows_in_table_order(seed: int, ordered: bool, block: int) -> None:
    """`RecordRows` (a table in pack's order: its own order, no sort; any other: sorted) gives each record's rows
    in table order, once, and names the records never asked for in the order of their first row: what a dict of
    lists gives, in memory and file-backed, whatever the block."""
    import mmap
    import tempfile

    from packcli.job import scratch as scratch_module
    from packcli.job.scratch import IN_MEMORY, Scratch
    from packcli.verify.reconstruct import RecordRows

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    index, line = rng.integers(-1, 3, n).astype(np.int32), rng.integers(-3, 6, n).astype(np.int32)
    if ordered:
        order = np.lexsort((line, index))
        index, line = index[order], line[order]
    rows = {"input": index, "line": line}
    want: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(index.tolist(), line.tolist())):
        want.setdefault(key, []).append(i)
    asked = [key for key in want if rng.random() < 0.5] + [(7, 7)]
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(scratch_module, "BLOCK", block)
        patch.setattr(mmap, "PAGESIZE", 1)
        for scratch in (IN_MEMORY, Scratch(Path(folder))):
            records = RecordRows(rows, scratch)
            assert [records.pop(key) for key in asked] == [want.get(key) for key in asked]
            assert records.pop(asked[0]) is None  # handed over once
            assert records.left() == [key for key in want if key not in asked]
