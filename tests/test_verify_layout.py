"""`packcli.verify.layout` (the ``pack_layout`` check): what a trainer reads from one row is leak-free by
construction, whatever the rest of the artifact claims."""

from __future__ import annotations

from forgery import caught

from packcli.verify.forge import reseal, rewrite_packs


def test_cu_seqlens_merged_across_a_seam(packed_copy):
    """Two examples merged into one segment (one id); the positions still restart at the seam."""
    def merge(rows: list[dict]) -> None:
        row = next(r for r in rows if len(r["cu_seqlens"]) > 2)
        del row["cu_seqlens"][1]
        del row["example_ids"][1]
        row["seq_lengths"][:2] = [row["seq_lengths"][0] + row["seq_lengths"][1]]  # TRL's seams follow
    rewrite_packs(packed_copy, 0, merge)
    reseal(packed_copy)
    report = caught(packed_copy, "pack_layout", "cu_seqlens merge examples across a seam")
    assert not any("position_ids not reset" in v["message"] for c in report["checks"] for v in c["violations"])


def test_lowered_capacity_is_not_blamed_on_a_worker(packed_copy):
    reseal(packed_copy, lambda m: m["config"].update(capacity=1000))
    report = caught(packed_copy, "pack_layout", "> config.capacity 1000", "--workers", "1")
    caught(packed_copy, "plan", "config.capacity 1000", "--workers", "1")
    messages = [v["message"] for c in report["checks"] for v in c["violations"]]
    assert not any("worker" in m or "tokenized it differently" in m for m in messages), messages
