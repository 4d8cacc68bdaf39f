"""`pack` end to end: round trip, determinism, atomicity, budgets, bad input, contract versions."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, ROOT

from packcli.artifact import manifest as mf
from packcli.artifact.shards import load_flat
from packcli.chat import Renderer, load_template
from packcli.config import PackConfig
from packcli.contract import MANIFEST_NAME, REJECTS_NAME, SEAM_TABLE_NAME
from packcli.errors import BudgetError, ContractError, InputError, RecordError
from packcli.ingest import read_lines
from packcli.job.run import pack_corpus
from packcli.prepare import Preparer


def config(inputs, tokenizer_dir, out, **kw) -> PackConfig:
    return PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out, **kw)


def test_round_trip_equals_unpacked_tokenization(packed, tokenizer):
    """Every packed span equals the example tokenized alone; every record accounted for once."""
    manifest = mf.read_manifest(packed)
    seam = pq.read_table(packed / SEAM_TABLE_NAME).to_pylist()
    shards = {i["name"]: load_flat(pq.read_table(packed / i["name"]), i["name"]) for i in manifest["shards"]}
    tpl = load_template("auto", tokenizer)
    prep = Preparer(Renderer(tpl, "auto", bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token), tokenizer)
    by_line = {(r["source"], r["line"]): r for r in seam}
    total = 0
    for fi, entry in enumerate(manifest["inputs"]):
        batch = [(fi, line, raw) for line, raw in read_lines(ROOT / entry["path"], fi)]
        for (_, line, _), out in zip(batch, prep.prepare(batch)):
            row = by_line.pop((entry["path"], line))
            total += 1
            if isinstance(out, str):
                assert row["status"] == "rejected" and row["reason"] == out
                continue
            if row["status"] == "dropped":
                assert len(out.input_ids) > manifest["config"]["capacity"]
                continue
            shard = shards[row["shard"]]
            a = shard.row_offsets[row["row"]] + row["offset"]
            n = row["length"]
            assert np.array_equal(shard.ids[a:a + n], out.input_ids[:n])
            assert np.array_equal(shard.labels[a:a + n], out.labels[:n])
            assert np.array_equal(shard.positions[a:a + n], np.arange(n))
    assert not by_line and total == manifest["counts"]["records"]
    c = manifest["counts"]
    assert c["packed"] + c["truncated"] + c["dropped"] + c["rejected"] == c["records"]


def test_pack_contents(packed):
    manifest = mf.read_manifest(packed)
    assert manifest["counts"]["truncated"] >= 1, "the fixture corpus has over-long examples to truncate"
    rejects = [json.loads(l) for l in (packed / REJECTS_NAME).read_text().splitlines()]
    assert len(rejects) == manifest["counts"]["rejected"]
    # broken.jsonl: one line per bad case (fixtures/README.md); an empty assistant message is valid.
    reasons = sorted(r["reason"].split(":")[0].split(" at byte")[0] for r in rejects if r["source"].endswith("broken.jsonl"))
    assert reasons == sorted(["malformed JSON", "expected a JSON object, got array", "no known field (messages, "
                              "conversations, prompt/completion, text); keys", "messages", "messages[0].role",
                              "messages[0].content", "invalid UTF-8", "no assistant turn to supervise; use --loss all "
                              "to train on the whole text"])
    table = pq.read_table(packed / "shard-00000.parquet")
    assert table.column_names == ["input_ids", "labels", "position_ids", "cu_seqlens", "example_ids", "num_tokens",
                                  "num_supervised"]


def test_deterministic_bytes(tmp_path, corpus_files, tokenizer_dir):
    a = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "a", capacity=512, packs_per_shard=8))
    b = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "b", capacity=512, packs_per_shard=8))
    assert a.manifest["manifest_sha256"] == b.manifest["manifest_sha256"]
    for info in a.manifest["shards"] + [{"name": SEAM_TABLE_NAME}]:
        assert (tmp_path / "a" / info["name"]).read_bytes() == (tmp_path / "b" / info["name"]).read_bytes()
    c = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "c", capacity=512, packs_per_shard=8, seed=1))
    assert c.manifest["manifest_sha256"] != a.manifest["manifest_sha256"]


def test_refuses_non_empty_out_unless_forced(tmp_path, corpus_files, tokenizer_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not empty"):
        pack_corpus(config(corpus_files[:1], tokenizer_dir, out))
    assert (out / "keep.txt").exists()
    pack_corpus(config(corpus_files[:1], tokenizer_dir, out, force=True))
    assert (out / MANIFEST_NAME).exists() and not (out / "keep.txt").exists()


def test_failure_mid_write_leaves_nothing(tmp_path, corpus_files, tokenizer_dir, monkeypatch):
    import packcli.job.write as writing

    calls = []
    real = writing.write_shard

    def failing(table, path):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real(table, path)

    monkeypatch.setattr(writing, "write_shard", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "out", capacity=512, packs_per_shard=4))
    # Only the unit work directory survives (for resume); it holds no manifest and no shard.
    assert [p.name for p in tmp_path.iterdir()] == [".packcli-work-out"]
    assert not list((tmp_path / ".packcli-work-out").glob("*.parquet"))
    assert not list(tmp_path.rglob("manifest.json"))


def test_killed_run_leaves_no_valid_directory(tmp_path, tokenizer_dir):
    """SIGKILL mid-run: no --out directory, and any temp directory has no manifest."""
    big = tmp_path / "big.jsonl"
    line = (FIXTURES / "corpus" / "openai.jsonl").read_text(encoding="utf-8").split("\n")[0]
    big.write_text((line + "\n") * 60000, encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "packcli", "pack", str(big), "-t", str(tokenizer_dir), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob(".packcli-tmp-*")):
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    leftovers = list(tmp_path.glob(".packcli-tmp-*"))
    assert leftovers, "the run was killed before it started writing; make the input bigger"
    assert all(not (d / MANIFEST_NAME).exists() for d in leftovers)
    with pytest.raises(InputError, match="not a packcli artifact"):
        mf.read_manifest(leftovers[0])


def test_on_error_fail_names_file_and_line(tmp_path, tokenizer_dir):
    with pytest.raises(RecordError, match=r"broken.jsonl:\d+: "):
        pack_corpus(config([FIXTURES / "corpus" / "broken.jsonl"], tokenizer_dir, tmp_path / "o", on_error="fail"))
    assert not (tmp_path / "o").exists()


def test_budget_failure_writes_nothing(tmp_path, corpus_files, tokenizer_dir):
    with pytest.raises(BudgetError, match="density"):
        pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "o", strategy="sequential", min_density=0.999))
    assert not (tmp_path / "o").exists()


def test_unknown_contract_version_is_refused(packed_copy):
    path = packed_copy / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["contract_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError, match="contract version 99 is not supported"):
        mf.read_manifest(packed_copy)


def test_empty_input_file(tmp_path, tokenizer_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no records"):
        pack_corpus(config([empty], tokenizer_dir, tmp_path / "o"))


def test_invalid_config_reports_every_problem():
    with pytest.raises(Exception, match="capacity.*strategy"):
        PackConfig(inputs=("x",), tokenizer="t", out="o", capacity=0, strategy="magic")


def test_manifest_pins_everything(packed):
    m = mf.read_manifest(packed)
    assert m["manifest_sha256"] == mf.manifest_hash(m)
    assert m["conventions"]["first_label_of_example"] == "ignored"
    assert set(m["versions"]) >= {"packcli", "python", "tokenizers", "pyarrow", "numpy", "numba"}
    assert all(len(i["sha256"]) == 64 and i["size"] > 0 for i in m["inputs"])
    assert m["tokenizer"]["sha256"] and m["template"]["text"]
    assert {"capacity", "strategy", "window", "seed", "shuffle", "overlong"} <= set(m["config"])
