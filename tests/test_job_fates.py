"""`packcli.job.fates`: what the over-long policy makes of each example, the rows of split examples, and
when a run has lost too much to go on. Plain arrays in, plain arrays out: the numbers are worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.choices import Overlong
from packcli.contract import DROPPED, DUPLICATE, IGNORE_INDEX, PACKED, REJECTED, SPLIT, TRUNCATED
from packcli.job.chunks import SplitRule, cut_example
from packcli.job.fates import Fates, decide_fates, loss_hint, loss_problem, split_rows

CAPACITY = 8


def labels(length: int, supervised_from: int) -> np.ndarray:
    """``length`` tokens, the ones from ``supervised_from`` on carrying loss."""
    out = np.arange(length, dtype=np.int32) + 10
    out[:supervised_from] = IGNORE_INDEX
    return out


# example 0 fits; 1 is over-long with loss in its first 8 tokens; 2 is over-long with loss only past them;
# 3 is a reject; 4 a duplicate (over-long, but a duplicate puts nothing into a pack)
EXAMPLES = [labels(5, 1), labels(12, 2), labels(12, 10), labels(3, 3), labels(20, 1)]
STATUS = np.array([PACKED, PACKED, PACKED, REJECTED, DUPLICATE], np.int8)
LENGTH = np.array([len(e) for e in EXAMPLES], np.int64)
SUPERVISED = np.array([int((e != IGNORE_INDEX).sum()) for e in EXAMPLES], np.int64)
REASONS = ["", "", "", "not a conversation", "duplicate of a.jsonl:1"]


def fates_under(overlong: Overlong, rule: SplitRule | None = None) -> Fates:
    rule = rule or SplitRule(CAPACITY)
    return decide_fates(STATUS, LENGTH, SUPERVISED, list(REASONS), rule, overlong,
                        lambda i: cut_example(EXAMPLES[i], rule))


def test_truncation_keeps_the_first_capacity_tokens_or_drops_what_would_teach_nothing():
    fates = fates_under(Overlong.truncate)
    assert fates.status.tolist() == [PACKED, TRUNCATED, DROPPED, REJECTED, DUPLICATE]
    assert fates.used_len.tolist() == [5, CAPACITY, 0, 0, 0]
    # example 1 keeps labels 2..7 (6 tokens) of its 10; example 2's loss is all past the cut: dropped, all lost
    assert fates.used_sup.tolist() == [4, 6, 0, 0, 0] and fates.lost.tolist() == [0, 4, 2, 0, 0]
    assert fates.reasons[1] == "12 tokens > capacity 8; truncated to 8"
    assert fates.reasons[2] == "12 tokens > capacity 8; truncation would keep no supervised tokens"
    assert fates.reasons[3:] == REASONS[3:]  # rejects and duplicates keep their reasons
    assert fates.packable.tolist() == [0, 1]


def test_drop_drops_every_over_long_example_and_leaves_the_callers_arrays_alone():
    status, reasons = STATUS.copy(), list(REASONS)
    fates = decide_fates(status, LENGTH, SUPERVISED, reasons, SplitRule(CAPACITY), Overlong.drop,
                         lambda i: pytest.fail("drop cuts nothing"))
    assert fates.status.tolist() == [PACKED, DROPPED, DROPPED, REJECTED, DUPLICATE]
    assert fates.lost.tolist() == [0, 10, 2, 0, 0] and fates.used_len.tolist() == [5, 0, 0, 0, 0]
    assert status.tolist() == STATUS.tolist() and reasons == REASONS


def test_split_keeps_the_chunks_that_hold_loss_and_split_rows_gives_each_its_row():
    rule = SplitRule(CAPACITY, overlap=2)
    fates = fates_under(Overlong.split, rule)
    # example 1: chunks at 0 and 6 (step 6); chunk 1 holds labels 8..11 of its own, past its masked overlap
    assert fates.status.tolist() == [PACKED, SPLIT, SPLIT, REJECTED, DUPLICATE]
    assert sorted(fates.cuts) == [1, 2] and fates.reasons[1] == "12 tokens > capacity 8; split into 2 chunks"
    # example 2: chunk 0 holds no loss (dropped), chunk 1 (tokens 6..11) keeps labels 10, 11
    assert fates.used_len[2] == 6 and fates.used_sup[2] == 2 and fates.lost[2] == 0
    rows = split_rows(fates, LENGTH)
    assert rows.example.tolist() == [0, 1, 1, 2, 2, 3, 4]
    assert rows.chunk.tolist() == [0, 0, 1, 0, 1, 0, 0] and rows.chunk_start.tolist() == [0, 0, 6, 0, 6, 0, 0]
    assert rows.span.tolist() == [5, 8, 6, 8, 6, 3, 20]
    assert rows.fates.status.tolist() == [PACKED, SPLIT, SPLIT, DROPPED, SPLIT, REJECTED, DUPLICATE]
    assert rows.fates.reasons[3] == ("12 tokens > capacity 8; split into 2 chunks; chunk 0 dropped: "
                                     "holds no supervised token")
    assert rows.fates.lost.sum() == fates.lost.sum()  # the rows account for the examples' losses


def test_without_a_split_example_the_rows_are_the_fates_themselves():
    fates = fates_under(Overlong.truncate)
    rows = split_rows(fates, LENGTH)
    assert rows.fates.status is fates.status and rows.example.tolist() == list(range(len(EXAMPLES)))


def test_a_run_may_go_on_within_the_budget():
    assert loss_problem(fates_under(Overlong.truncate), str, max_fraction=0.5) is None


def test_losses_over_the_budget_name_the_top_reasons_and_where_each_occurs():
    what, top = loss_problem(fates_under(Overlong.truncate), lambda i: f"line {i}", max_fraction=0.2)
    assert what == ("2 of 5 records (40.0%) were rejected or dropped, more than `max_reject_fraction` 0.2")
    assert top == "1 x longer than `capacity` (e.g. line 2); 1 x not a conversation (e.g. line 3)"


def test_a_run_that_packs_nothing_is_a_problem_at_any_budget():
    status = np.full(5, REJECTED, np.int8)
    fates = Fates(status, np.zeros(5, np.int64), np.zeros(5, np.int64), np.zeros(5, np.int64),
                  [f"reason {k}" for k in range(5)])
    what, top = loss_problem(fates, str, max_fraction=1.0)
    assert what == "no example was packed"
    assert top.endswith("; and 2 other reasons") and top.count(" x reason") == 3


def test_the_hint_names_what_fixes_the_losses_there_are():
    fates = fates_under(Overlong.drop)
    assert loss_hint(fates, LENGTH) == (
        "fix the rejected records, or the `template`, `input_format` or field mapping that rejects them; "
        "raise `capacity` (the longest dropped example has 12 tokens) or use `overlong='truncate'`; "
        "or raise `max_reject_fraction` to train on what is left")
    nothing = Fates(np.array([DUPLICATE], np.int8), *(np.zeros(1, np.int64),) * 3, [""])
    assert loss_hint(nothing, [4]) == "check the inputs: no record made an example"
