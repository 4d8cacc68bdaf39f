"""`packcli.job.plan`: the pack plan of the packable examples under the pinned settings, its budgets, its
metrics, and where each example lands (shard, row, offset). Small plans worked by hand, sequential and
unshuffled, so every position is known."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FIXTURES

from packcli.artifact.manifest import PackSettings, read_manifest
from packcli.contract import DROPPED, PACKED, REJECTED, TRUNCATED
from packcli.errors import BudgetError
from packcli.job.fates import Fates
from packcli.job.plan import lay_out_shards, place_examples, plan_examples, plan_metrics, plan_packs

# examples 1 (rejected) and 4 (dropped) go into no pack; the others fill packs of 10 in input order:
# [0, 2] (4 + 5), [3, 5] (3 + 7), [6] (8)
STATUS = [PACKED, REJECTED, PACKED, TRUNCATED, DROPPED, PACKED, PACKED]
USED_LEN = [4, 0, 5, 3, 0, 7, 8]
USED_SUP = [3, 0, 5, 2, 0, 6, 1]


def fates() -> Fates:
    n = len(STATUS)
    return Fates(np.array(STATUS, np.int8), np.array(USED_LEN, np.int64), np.array(USED_SUP, np.int64),
                 np.zeros(n, np.int64), [""] * n)


def settings(**changes) -> PackSettings:
    pinned = PackSettings.of(read_manifest(FIXTURES / "packed")["config"])
    return dataclasses.replace(pinned, **{"capacity": 10, "strategy": "sequential", "window": None,
                                          "shuffle": False, "shuffle_packs": False, **changes})


def test_the_plan_packs_the_packable_examples_alone():
    plan = plan_examples(fates(), settings())
    assert plan.lengths.tolist() == [4, 5, 3, 7, 8]  # the packable examples' used lengths, input order
    assert plan.num_packs == 3 and plan.pack_of.tolist() == [0, 0, 1, 1, 2]


def test_a_missed_budget_raises_before_anything_is_written_and_names_the_budget():
    said = r"budget not met, nothing written: density 0\.9000 < `min_density` 0\.95 \(strategy=sequential\)"
    with pytest.raises(BudgetError, match=said):
        plan_packs(fates(), settings(min_density=0.95))  # 27 tokens in 3 packs of 10


def test_the_metrics_add_the_supervised_density():
    plan = plan_examples(fates(), settings())
    metrics = plan_metrics(plan, fates(), 10)
    assert metrics["supervised_density"] == pytest.approx(17 / 30)  # 3 + 5 + 2 + 6 + 1 supervised, 3 packs of 10
    assert metrics["num_packs"] == 3 and metrics["density"] == pytest.approx(27 / 30)
    nothing = Fates(np.array([REJECTED], np.int8), *(np.zeros(1, np.int64),) * 3, [""])
    assert plan_metrics(plan_examples(nothing, settings()), nothing, 10)["supervised_density"] == 0.0


def test_each_example_lands_in_its_shard_row_and_offset():
    placement = place_examples(plan_examples(fates(), settings()), fates(), packs_per_shard=2)
    assert placement.num_shards == 2 and placement.ordered.tolist() == [0, 2, 3, 5, 6]
    assert placement.shard.tolist() == [0, -1, 0, 0, -1, 0, 1]
    assert placement.row.tolist() == [0, -1, 0, 1, -1, 1, 0]
    assert placement.offset.tolist() == [0, -1, 4, 0, -1, 3, 0]


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_the_placement_is_the_same_whatever_block_it_is_worked_out_in(block, monkeypatch, tmp_path):
    """`place_examples` works a block of packed positions at a time, carrying the tokens before the block and the
    start of the pack that spans into it: any block size (a pack cut by a block boundary, a block inside a pack)
    gives each example the shard, row and offset its pack and the lengths before it in that pack give, file-backed
    or not."""
    import packcli.job.scratch
    from packcli.job.scratch import Scratch

    rng = np.random.default_rng(7)
    n = 300
    many = Fates(rng.choice(np.array([PACKED, REJECTED, TRUNCATED, DROPPED], np.int8), n, p=[.7, .1, .1, .1]),
                 rng.integers(1, 9, n).astype(np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), [""] * n)
    plan = plan_examples(many, settings(capacity=24, strategy="bfd", shuffle=True, shuffle_packs=True))
    packable = np.flatnonzero(np.isin(many.status, [PACKED, TRUNCATED]))
    want = {}  # the placement spelled out pack by pack
    for p in range(plan.num_packs):
        offset = 0
        for i in packable[plan.order[plan.pack_offsets[p]:plan.pack_offsets[p + 1]]].tolist():
            want[i] = (p // 4, p % 4, offset)
            offset += int(many.used_len[i])
    monkeypatch.setattr(packcli.job.scratch, "BLOCK", block)
    placement = place_examples(plan, many, packs_per_shard=4, scratch=Scratch(tmp_path))
    got = {i: (int(placement.shard[i]), int(placement.row[i]), int(placement.offset[i])) for i in range(n)}
    assert got == {i: want.get(i, (-1, -1, -1)) for i in range(n)}
    assert placement.ordered.tolist() == packable[plan.order].tolist()


def test_the_shard_tasks_carry_their_own_packs_alone():
    index = SimpleNamespace(spill_offset=np.arange(7, dtype=np.int64) * 100, ids=np.arange(7, dtype=np.int64) + 50)
    masked = np.ones(7, np.int64)
    layout = lay_out_shards(plan_examples(fates(), settings()), fates(), index, masked, packs_per_shard=2,
                            directory="out")
    first, second = layout.tasks
    assert first.path == "out/shard-00000.parquet" and second.label == "shard-00001.parquet"
    assert first.examples_per_pack.tolist() == [2, 2] and second.examples_per_pack.tolist() == [1]
    assert first.lengths.tolist() == [4, 5, 3, 7] and first.example_ids.tolist() == [50, 52, 53, 55]
    assert second.spill_offsets.tolist() == [600] and [r.tolist() for r in layout.task_rows] == [[0, 2, 3, 5], [6]]
