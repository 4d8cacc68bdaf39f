"""`packcli.verify.copies` (the ``copies`` check): every record has exactly the examples its mixture draws."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import seam_rows
from forgery import caught, manifest_of

from packcli.verify import forge, verify_artifact
from packcli.verify.forge import Segment, follow_packs, read_segments, reseal, rewrite_seam, write_segments


@pytest.fixture()
def mixed(corpus_files, tokenizer_dir, tmp_path) -> Path:
    """sharegpt.jsonl at half its records (some unsampled), text.jsonl twice over."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path / "mixed"
    files = [f for f in corpus_files if f.endswith(("sharegpt.jsonl", "text.jsonl"))]
    pack_corpus(PackConfig(inputs=tuple(files), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           packs_per_shard=16, mix="sharegpt.jsonl=0.5x,text.jsonl=2x"))
    return out


def test_a_mixed_pack_verifies(mixed):
    report = verify_artifact(mixed)
    rows = seam_rows(mixed)
    assert report.ok, [(c.name, [v.message for v in c.violations][:3]) for c in report.checks if not c.ok]
    assert any(r["status"] == "unsampled" for r in rows) and any(r["copy"] == 1 for r in rows)


def test_an_unsampled_record_smuggled_into_a_pack(mixed):
    """The forger packs a record the mixture did not draw, and calls it packed."""
    m, rows = manifest_of(mixed), seam_rows(mixed)
    i = next(i for i, r in enumerate(rows) if r["status"] == "unsampled")
    full = forge.fresh_example(mixed, rows[i]["input"], rows[i]["line"])
    last = len(m["shards"]) - 1
    packs = read_segments(mixed, last)
    packs.append([Segment(rows[i]["example_id"], full.input_ids.tolist(), full.labels.tolist())])
    write_segments(mixed, last, packs)
    rewrite_seam(mixed, lambda rows: rows[i].update(status="packed", reason="", supervised=full.supervised))
    follow_packs(mixed)
    reseal(mixed, recount_counts=True)
    caught(mixed, "copies", "the mixture draws no copy of it")
    caught(mixed, "plan", "the re-run plan")  # its packs are not the plan of the examples the mixture drew


def test_a_second_copy_dropped_from_a_mixture(mixed):
    """A record the mixture draws twice, its second copy removed from its pack and from the seam table."""
    rows = seam_rows(mixed)
    i = next(i for i, r in enumerate(rows) if r["copy"] == 1)
    row = rows[i]
    k = int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))
    packs = read_segments(mixed, k)
    packs[row["row"]] = [s for s in packs[row["row"]] if s.example_id != row["example_id"]]
    write_segments(mixed, k, packs)
    rewrite_seam(mixed, lambda rows: rows.pop(i))
    follow_packs(mixed)
    reseal(mixed, recount_counts=True)
    caught(mixed, "copies", "config.mix")
