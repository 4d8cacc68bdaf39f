"""The plan, re-derived: every fate, every pack and every position is what the pinned config makes of the
reconstructed lengths.

``pack`` promises that the same inputs and config give byte-identical shards; this check makes that
a checked property. From each example's reconstructed length, supervised counts and cut (`Reconstructed`;
the seam table's own columns where reconstruction did not run), taken in the order pack reads the
records (the inputs by name and sha256, each input's records in order, each record's copies and chunks:
`read_order`; never the order of the table under test, which would let a forger choose which examples
share a pack), it re-runs the pack job's own functions (`packcli.job.plan`: `decide_fates`, `split_rows`, `plan_examples`, `place_examples`,
`plan_metrics`) under the manifest's ``config``, then demands that the seam table holds exactly those
rows (a split example's chunks matched one for one: `packcli.verify.chunking`) and fates (status,
reason, length, supervised, supervised_lost, chunk_start), that every row sits in the shard, row and
offset the plan gives it (global has tied those to the packs), that the shards are cut every
``packs_per_shard`` packs, that the budgets hold (density, displacement, reject fraction), and that
``metrics`` are the plan's.

The planner is deterministic and fast (numba kernels over one int64 per example), so this costs a
small fraction of reconstruction (docs/contract.md, "What verify proves").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.artifact.fieldspec import setting_bounds
from packcli.artifact.manifest import Manifest, PackSettings
from packcli.choices import Overlong
from packcli.contract import (
    DROPPED,
    DUPLICATE,
    IN_PACK_CODES,
    PACKED,
    REJECTED,
    SPLIT,
    STATUSES,
    TRUNCATED,
    UNSAMPLED,
    shard_name,
)
from packcli.job.chunks import Cut, SplitRule, pinned_rule
from packcli.job.fates import Chunked, Fates, decide_fates, loss_problem, split_rows
from packcli.job.plan import Placement, place_examples, plan_examples, plan_metrics
from packcli.job.scratch import IN_MEMORY, Scratch, TextColumn, blocks, code_of
from packcli.job.select import unsampled_reason
from packcli.mix import Mixture, manifest_problems
from packcli.pack import STRATEGIES, PackPlan, check_budgets
from packcli.pack.strategies import resolved_window
from packcli.verify.chunking import claimed_cut, match_chunks
from packcli.verify.columns import SeamColumns, Strings, as_ints, take_rows
from packcli.verify.reconstruct import Reconstructed
from packcli.verify.report import CheckResult, Violation

FATE_COLUMNS = ("status", "chunk_start", "reason", "length", "supervised", "supervised_lost")


def check_plan(manifest: Manifest, rows: SeamColumns, facts: Reconstructed | None, result: CheckResult,
               scratch: Scratch = IN_MEMORY) -> None:
    """Re-derive fates, chunks, plan, placement, shards and metrics from the lengths; compare with the artifact.

    The examples go to the planner in the order pack reads them (`read_order`), whatever order the seam table
    holds: the planner's shuffle and packing depend on that order, so a table in another order (and packs
    made for it) must not choose which examples share a pack.

    Every per-example array made here is ``scratch``'s (`packcli.job.scratch`: file-backed under a folder, so
    the check's resident memory is a stage's, not the corpus's; the report is the same either way), and the
    comparisons over every row are vectorised a block at a time, walking only the rows that differ.
    """
    config = manifest.config
    settings = _settings(config, len(manifest.inputs), result)
    if settings is None:
        return
    rows, facts = _in_read_order(manifest, rows, facts, result)
    result.checked = len(rows["example_id"])
    starts = example_starts(rows, scratch)
    first = starts[:-1]
    facts_in = _inputs(rows, facts, starts, settings, scratch)
    scratch.release()
    if _empty_examples(rows, facts_in, first, result):
        return
    fates = decide_fates(facts_in.status, facts_in.length, facts_in.supervised, facts_in.reasons,
                         pinned_rule(settings), Overlong(settings.overlong), lambda j: facts_in.cuts[j], scratch)
    scratch.release()
    # Each record's first example (copy 0): its fate before a mixture's draw, as pack judges the reject budget on it.
    records = _records(rows, first, scratch)  # None: every example is its record's copy 0

    def where(j: int) -> str:
        i = first[j if records is None else records[j]]
        return f"{rows['source'][i]}:{rows['line'][i]}"

    # judged here and reported in its turn below: the fates it reads go before the plan is made (memory)
    lost = loss_problem(fates if records is None else fates.take(records, scratch), where,
                        settings.max_reject_fraction)
    fates = _unsampled(rows, first, fates, config.mix)
    scratch.release()
    expected = split_rows(fates, facts_in.length, scratch=scratch)
    del fates  # ``expected`` holds a row's fates (these very arrays when nothing is split): one copy an example
    scratch.release()
    plan = plan_examples(expected.fates, settings, scratch)
    scratch.release()
    placement = place_examples(plan, expected.fates, settings.packs_per_shard, scratch)
    scratch.release()
    # Artifact-wide findings first: the per-example ones below can fill the report's violation limit.
    if (window := resolved_window(settings.strategy, settings.window)) != settings.window:
        result.fail(Violation(f"config.window is {settings.window!r}, but strategy {settings.strategy} packs with "
                              f"window {window!r}", field="config.window"))
    _check_shards(manifest, placement, plan, settings, result)
    for problem in check_budgets(plan, settings):
        budget = "config.min_density" if problem.startswith("density") else "config.max_displacement"
        result.fail(Violation(f"{budget} is not met by the plan (pack would have refused it): {problem}",
                              field=budget))
    if lost:
        result.fail(Violation(f"config.max_reject_fraction is not met (pack would have refused it): {lost[0]}: "
                              f"{lost[1]}", field="config.max_reject_fraction"))
    _check_metrics(manifest.metrics, plan_metrics(plan, expected.fates, settings.capacity), result)
    del plan
    match = match_chunks(rows, starts, expected, facts_in.length, settings, result, scratch)
    scratch.release()
    _check_fates(rows, match, expected, facts_in, settings, result, scratch)
    scratch.release()
    _check_placement(rows, match, placement, settings, result, scratch)
    scratch.release()


def read_order(manifest: Manifest, rows: SeamColumns) -> tuple[list[int], npt.NDArray[np.int64]]:
    """The order pack reads the inputs (by name, then sha256: `packcli.ingest.describe_inputs`), as manifest
    indices, and the seam-table rows in the order pack made its examples: by input in that order, then record,
    then copy, then chunk (a row naming no input of the manifest last; global reports it).

    A whole-column sort (about 50 bytes a row in memory): `_in_read_order` asks for it only when the table is
    not in that order already (as pack writes it), i.e. for a forged or damaged table."""
    ranked, rank = _input_rank(manifest)
    keys = [np.asarray(rows[c], np.int64) for c in ("chunk", "copy", "line")]
    return ranked, np.lexsort((*keys, _ranks(rank, np.asarray(rows["input"]))))


def _input_rank(manifest: Manifest) -> tuple[list[int], npt.NDArray[np.int64]]:
    """The inputs in the order pack reads them (manifest indices), and each input's place in that order (one
    more entry, last, for an index naming no input)."""
    inputs = manifest.inputs
    ranked = sorted(range(len(inputs)), key=lambda k: (inputs[k].name, inputs[k].sha256, k))
    rank = np.full(len(inputs) + 1, len(inputs), dtype=np.int64)
    rank[ranked] = np.arange(len(inputs))
    return ranked, rank


def _ranks(rank: npt.NDArray[np.int64], inputs: np.ndarray) -> npt.NDArray[np.int64]:
    """Per row of ``inputs`` (the seam table's input column, or a block of it), its input's `_input_rank`."""
    index = np.asarray(inputs, dtype=np.int64)
    return rank[np.where((index >= 0) & (index < len(rank) - 1), index, len(rank) - 1)]


def _in_order(rows: SeamColumns, rank: npt.NDArray[np.int64]) -> bool:
    """Whether the rows are in `read_order` already: each row's key (input rank, line, copy, chunk) at least
    the row's before it (the sort is stable, so then it is the identity), a block at a time."""
    columns = [np.asarray(rows[c]) for c in ("input", "line", "copy", "chunk")]
    for block in blocks(len(columns[0])):
        at = slice(max(block.start - 1, 0), block.stop)  # with the row before the block's first
        keys = [_ranks(rank, columns[0][at]), *(column[at] for column in columns[1:])]
        before, tie = np.zeros(len(keys[0]) - 1, bool), np.ones(len(keys[0]) - 1, bool)
        for key in keys:
            before |= tie & (key[:-1] < key[1:])
            tie &= key[:-1] == key[1:]
        if not (before | tie).all():
            return False
    return True


def _in_read_order(manifest: Manifest, rows: SeamColumns, facts: Reconstructed | None,
                   result: CheckResult) -> tuple[SeamColumns, Reconstructed | None]:
    """The rows and their reconstructed facts in `read_order`: as they are when the table is in that order
    (as pack writes it), else reordered in memory (a forged table costs more), with the findings named."""
    ranked, rank = _input_rank(manifest)
    if ranked != sorted(ranked):
        k = next(j for j, r in enumerate(ranked) if r != j)
        names = manifest.inputs
        result.fail(Violation(f"the inputs are not in the order pack reads them (by name, then sha256): inputs[{k}] is "
                              f"{names[k].name!r}, but {names[ranked[k]].name!r} (inputs[{ranked[k]}]) comes "
                              "first; the plan is re-derived in pack's order", field="inputs"))
    if _in_order(rows, rank):
        return rows, facts
    _, order = read_order(manifest, rows)
    i = int(np.flatnonzero(order != np.arange(len(order)))[0])
    result.fail(Violation(f"the seam table is not in input order (by input, then record, copy and chunk) from row {i} "
                          "on: the plan is re-derived in that order, never in the table's", **_loc(rows, int(order[i]))))
    rows = take_rows(rows, order)
    if facts is not None:
        moved = np.empty_like(order)
        moved[order] = np.arange(len(order))  # where each row of the table went
        rejection = facts.rejection  # a mapping of the rejected rows (kept one), or a list a row
        rejection = (type(rejection)({int(moved[i]): why for i, why in rejection.items()})
                     if isinstance(rejection, Mapping) else [rejection[j] for j in as_ints(order)])
        facts = Reconstructed(facts.length[order], facts.supervised[order],
                              {int(moved[i]): cut for i, cut in facts.cuts.items()}, rejection)
    return rows, facts


def _check_fates(rows: SeamColumns, match: np.ndarray, expected: Chunked, facts: ExampleFacts,
                 settings: PackSettings, result: CheckResult, scratch: Scratch = IN_MEMORY) -> None:
    """Every row's status, reason, length, supervised counts and chunk start are its re-derived fate's.

    The rows that differ are found a block at a time (`_differing_fates`); only they are walked, in row order,
    each named by the first column that differs."""
    fates = expected.fates
    columns = {"status": lambda m: STATUSES[fates.status[m]], "reason": lambda m: fates.reasons[m],
               "length": lambda m: int(fates.used_len[m]), "supervised": lambda m: int(fates.used_sup[m]),
               "supervised_lost": lambda m: int(fates.lost[m]), "chunk_start": lambda m: int(expected.chunk_start[m])}
    for i in as_ints(_differing_fates(rows, match, expected, scratch)):
        m = int(match[i])
        j = int(expected.example[m])
        if rows["status"][i] != columns["status"](m):
            kept = int(facts.cuts[j].supervised[0]) if j in facts.cuts else 0
            result.fail(Violation(_status_message(rows, i, fates.status[m], facts.length[j], kept, settings,
                                                  facts.reconstructed[j]), field="status", **_loc(rows, i)))
            continue
        for column in FATE_COLUMNS[1:]:
            want = columns[column](m)
            if rows[column][i] != want:
                result.fail(Violation(f"{column} is {rows[column][i]!r}; its fate under config.overlong "
                                      f"{settings.overlong!r} and config.capacity {settings.capacity} gives "
                                      f"{want!r}", field=column, **_loc(rows, i)))
                break


def _differing_fates(rows: SeamColumns, match: np.ndarray, expected: Chunked,
                     scratch: Scratch = IN_MEMORY) -> npt.NDArray[np.int64]:
    """The matched rows (``match`` >= 0) whose status, chunk start, reason, length or supervised counts differ from
    their expected row's, ascending: the strings compared by code (the table's codes translated into the expected
    reasons' codes, a value the expected reasons lack never equal), the numbers as numbers."""
    fates = expected.fates
    status_of = _lookup(rows["status"], STATUSES)
    reasons = fates.reasons
    reason_of = _lookup(rows["reason"], reasons.names)
    numbers = [(np.asarray(rows[c]), want) for c, want in (
        ("chunk_start", expected.chunk_start), ("length", fates.used_len), ("supervised", fates.used_sup),
        ("supervised_lost", fates.lost))]
    found = []
    for block in blocks(len(match), scratch):
        m = match[block]
        matched = np.flatnonzero(m >= 0)
        m = m[matched]
        at = matched + block.start
        differs = status_of[rows["status"].codes[at]] != fates.status[m]
        differs |= reason_of[rows["reason"].codes[at]] != reasons.codes[m]
        for got, want in numbers:
            differs |= got[at] != want[m]
        found.append(at[differs])
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _lookup(column: Strings, names: Sequence[str | None]) -> npt.NDArray[np.int64]:
    """Per code of a string column (its last entry for code -1, null), the index of its value among ``names``;
    -2 (no index) for a value not there. Null is looked up as None."""
    index = {name: k for k, name in enumerate(names)}
    return np.array([index.get(name, -2) for name in (*column.names, None)], dtype=np.int64)


def _settings(config: PackSettings, num_inputs: int, result: CheckResult) -> PackSettings | None:
    """The plan settings, or None (each bad one named) when the planner cannot run on them (or on the
    examples a malformed mixture would leave out)."""
    problems = []
    if config.mix is not None:
        problems += [("config.mix", problem) for problem in manifest_problems(config.mix, num_inputs)]
    if config.strategy not in STRATEGIES:
        problems.append(("config.strategy", f"config.strategy {config.strategy!r} is not a strategy "
                                            f"({', '.join(STRATEGIES)})"))
    if config.overlong not in {o.value for o in Overlong}:
        problems.append(("config.overlong", f"config.overlong {config.overlong!r} is not a policy "
                                            f"({', '.join(o.value for o in Overlong)})"))
    # (the manifest check has bounded every number: capacity, seed, the fractions, the split settings)
    if config.overlong == "split" or (config.split_overlap, config.split_min_last) != (0, 1):
        rule = SplitRule(config.capacity, config.split_overlap, config.split_min_last)
        for problem in rule.problems() if config.capacity >= setting_bounds("capacity")[0] else []:
            field = "config.split_overlap" if problem.startswith("`split_overlap`") else "config.split_min_last"
            problems.append((field, problem.replace("`split_overlap`", field).replace("`split_min_last`", field)))
        for key, default in (("split_overlap", 0), ("split_min_last", 1)) if config.overlong != "split" else ():
            if getattr(config, key) != default:
                problems.append((f"config.{key}", f"config.{key} is {getattr(config, key)}, but it applies only to "
                                                  f"config.overlong split (pack writes {default} otherwise)"))
    if config.strategy == "window" and config.window is None:
        problems.append(("config.window", "config.window is None, but strategy window needs a window size"))
    for field, message in problems:
        result.fail(Violation(message + ": the plan cannot be re-derived", field=field))
    return None if problems else config


@dataclass(frozen=True)
class ExampleFacts:
    """Per example (`example_starts`): accepted, rejected or duplicate, its full length and supervised tokens,
    the reason it is not packed, whether reconstruction vouched for them, and (``cuts``, by example) the
    cut of an over-long one under ``truncate`` or ``split``."""

    status: np.ndarray
    length: np.ndarray
    supervised: np.ndarray
    reasons: TextColumn
    reconstructed: np.ndarray
    cuts: dict[int, Cut]


def example_starts(rows: SeamColumns, scratch: Scratch = IN_MEMORY) -> npt.NDArray[np.int64]:
    """Where each example's rows start in the seam table, and its end: an example is a run of rows with one
    (input, line, copy), its chunks (one row, unless split). A ``scratch`` column, filled a block at a time
    (counted first: no in-memory index of every start)."""
    keys = [np.asarray(rows[column]) for column in ("input", "line", "copy")]
    n = len(keys[0])

    def new(block: slice) -> npt.NDArray[np.int64]:  # the block's rows that start an example
        at = slice(max(block.start - 1, 0), block.stop)  # with the row before the block's first
        same = np.ones(block.stop - at.start - 1, dtype=bool)
        for key in keys:
            same &= key[at][1:] == key[at][:-1]
        return np.flatnonzero(~same) + (block.start if block.start else 1)

    count = sum(len(new(block)) + (block.start == 0) for block in blocks(n, scratch))
    starts = scratch.empty(count + 1, np.int64)
    k = 0
    for block in blocks(n, scratch):
        found = new(block)
        if block.start == 0:
            found = np.concatenate([[0], found])
        starts[k:k + len(found)] = found
        k += len(found)
    starts[count] = n
    return starts


def _inputs(rows: SeamColumns, facts: Reconstructed | None, starts: npt.NDArray[np.int64], settings: PackSettings,
            scratch: Scratch = IN_MEMORY) -> ExampleFacts:
    """What each example's fate is decided from. Where reconstruction did not vouch for it
    (``--no-reconstruct``, a changed source), the seam table's own columns stand in, its chunks as the
    rows claim them. A row marked duplicate stays one: reconstruction recomputes the content keys that
    decide it. The columns are ``scratch``'s, filled a block of examples at a time; only the over-long,
    rejected and duplicate examples are visited one by one."""
    count = len(starts) - 1
    first = starts[:-1]
    status = scratch.full(count, PACKED, np.int8)
    length, supervised = scratch.zeros(count, np.int64), scratch.zeros(count, np.int64)
    names, index = [""], {"": 0}  # the reasons' strings (code 0: none), shared with the column (appended only)
    reasons = TextColumn(scratch.zeros(count, np.int32), names, index)
    reconstructed = scratch.zeros(count, bool)
    claimed_of = _lookup(rows["status"], STATUSES)
    row_reasons = rows["reason"]
    original, row_sup, row_lost = (np.asarray(rows[c]) for c in ("original_length", "supervised", "supervised_lost"))
    rejected_rows = None if facts is None else _rejected_rows(facts.rejection)
    capacity = settings.capacity
    overlong = []  # the examples whose seam rows claim their cut: over-long ones (a few)
    for block in blocks(count, scratch):
        f = first[block]
        claimed = claimed_of[rows["status"].codes[f]]
        vouched = np.zeros(len(f), bool) if facts is None else facts.length[f] >= 0
        reconstructed[block] = vouched
        duplicate = claimed == DUPLICATE
        # vouched for: a duplicate keeps its row's reason and takes the fresh length; a rejection takes its
        # reason from re-parsing; any other gets the fresh counts
        own = vouched & duplicate
        rejected = vouched & ~duplicate & (np.isin(f, rejected_rows) if facts is not None else False)
        fresh = vouched & ~duplicate & ~rejected
        # not vouched for: the seam table's own columns
        claims = ~vouched & ((claimed == REJECTED) | duplicate)
        accepted = ~vouched & ~claims
        status[block][own] = DUPLICATE
        status[block][rejected] = REJECTED
        status[block][claims] = claimed[claims]
        if facts is not None:
            length[block][own | fresh] = facts.length[f[own | fresh]]
            supervised[block][fresh] = facts.supervised[f[fresh]]
        length[block][~vouched] = original[f[~vouched]]
        rows_at = slice(int(starts[block.start]), int(starts[block.stop]))
        owned = np.add.reduceat(row_sup[rows_at].astype(np.int64) + row_lost[rows_at], f - rows_at.start) \
            if len(f) else np.zeros(0, np.int64)
        supervised[block][accepted] = owned[accepted]
        table = np.full(len(row_reasons.names) + 1, -1, np.int32)  # the table's reasons these examples keep
        keep = own | claims
        for code in np.unique(row_reasons.codes[f[keep]]).tolist():
            table[code] = code_of(row_reasons.names[code] if code >= 0 else None, names, index)
        reasons.codes[block][keep] = table[row_reasons.codes[f[keep]]]
        for j in (np.flatnonzero(rejected) + block.start).tolist():
            reasons[j] = facts.rejection[int(first[j])]
        overlong.append(np.flatnonzero(accepted & (length[block] > capacity)) + block.start)
    cuts: dict[int, Cut] = {}
    if facts is not None:  # the fresh cuts, by the example whose first row has one
        for i in sorted(facts.cuts):
            j = int(np.searchsorted(first, i))
            if j < count and first[j] == i and reconstructed[j] and status[j] == PACKED:
                cuts[j] = facts.cuts[i]
    rule = pinned_rule(settings)
    for j in as_ints(np.concatenate(overlong) if overlong else np.zeros(0, np.int64)):
        cuts[j] = claimed_cut(rows, range(int(starts[j]), int(starts[j + 1])), int(length[j]), rule)
    return ExampleFacts(status, length, supervised, reasons, reconstructed, dict(sorted(cuts.items())))


def _empty_examples(rows: SeamColumns, facts: ExampleFacts, first: npt.NDArray[np.int64], result: CheckResult) -> bool:
    """Whether an accepted example has no token, each such one named: pack rejects an empty record, and its planner
    packs 1 to ``capacity`` tokens an example, so there is no plan to re-derive (a forged ``original_length``
    under ``--no-reconstruct``)."""
    found = False
    for block in blocks(len(facts.status)):
        empty = np.flatnonzero((facts.status[block] == PACKED) & (facts.length[block] < 1)) + block.start
        for j in as_ints(empty):
            found = True
            i, length = int(first[j]), int(facts.length[j])
            what, field = (f"it re-tokenizes to {length} tokens", "length") if facts.reconstructed[j] else \
                (f"original_length is {length}", "original_length")
            result.fail(Violation(f"{what}, but it is not rejected: pack rejects an empty record and packs 1 to "
                                  "config.capacity tokens an example; the plan cannot be re-derived", field=field,
                                  **_loc(rows, i)))
    return found


def _rejected_rows(rejection: Mapping[int, str | None] | Sequence[str | None]) -> npt.NDArray[np.int64]:
    """The rows re-parsing rejects, ascending (a few, not one a row): from reconstruction's ``rejection``, a
    mapping of the rejected rows (the others read None) or a list a row."""
    pairs = rejection.items() if isinstance(rejection, Mapping) else enumerate(rejection)
    return np.array(sorted(i for i, why in pairs if why is not None), dtype=np.int64)


def _records(rows: SeamColumns, first: npt.NDArray[np.int64], scratch: Scratch) -> npt.NDArray[np.int64] | None:
    """The examples that are a record's copy 0 (a ``scratch`` column), or None when every example is."""
    copy = np.asarray(rows["copy"])
    count = sum(int(np.count_nonzero(copy[first[block]] == 0)) for block in blocks(len(first)))
    if count == len(first):
        return None
    records, k = scratch.empty(count, np.int64), 0
    for block in blocks(len(first)):
        found = np.flatnonzero(copy[first[block]] == 0) + block.start
        records[k:k + len(found)] = found
        k += len(found)
    return records


def _unsampled(rows: SeamColumns, first: npt.NDArray[np.int64], fates: Fates, mix: dict | None) -> Fates:
    """A usable example the mixture drew no copy of is ``unsampled``, in no pack (the copies check draws
    the copies again and owns which records those are)."""
    if mix is None:
        return fates
    mixture = Mixture.from_manifest(mix)  # `_settings` has checked it
    claimed_of = _lookup(rows["status"], STATUSES)
    inputs = np.asarray(rows["input"])
    for block in blocks(len(fates.status)):
        at = first[block]
        drawn_none = np.isin(fates.status[block], IN_PACK_CODES) & (claimed_of[rows["status"].codes[at]] == UNSAMPLED)
        found = np.flatnonzero(drawn_none) + block.start
        fates.status[found] = UNSAMPLED
        for column in (fates.used_len, fates.used_sup, fates.lost):
            column[found] = 0
        of_input = inputs[first[found]]
        for k in np.unique(of_input).tolist():
            fates.reasons.fill(found[of_input == k], unsampled_reason(mixture, k))
    return fates


def _status_message(rows: SeamColumns, i: int, expected: int, length: int, kept: int, settings: PackSettings,
                    reconstructed: bool) -> str:
    claimed = rows["status"][i]
    tokens = f"{length} tokens" + (" (reconstructed)" if reconstructed else " (original_length)")
    policy = f"config.overlong {settings.overlong!r}, config.capacity {settings.capacity}"
    if expected == TRUNCATED and claimed == STATUSES[DROPPED]:
        return (f"status is 'dropped', but truncating its {tokens} to the capacity keeps {kept} supervised tokens "
                f"({policy}): it must be truncated, not dropped")
    if expected == DROPPED and claimed in (STATUSES[TRUNCATED], STATUSES[SPLIT]):
        why = {Overlong.truncate: "truncating it keeps no supervised token",
               Overlong.split: "no chunk of it holds a supervised token"}.get(settings.overlong,
                                                                           "over-long examples are dropped")
        return f"status is {claimed!r}, but {why} ({tokens}; {policy}): it must be dropped"
    if expected == SPLIT:
        return f"status is {claimed!r}, but {policy} cuts an example of {tokens} into chunks: it must be split"
    return f"status is {claimed!r}; an example of {tokens} under {policy} is {STATUSES[expected]!r}"


def _loc(rows: SeamColumns, i: int) -> dict:
    return dict(example_id=rows["example_id"][i], source=rows["source"][i], line=rows["line"][i])


def _check_placement(rows: SeamColumns, match: np.ndarray, placement: Placement, settings: PackSettings,
                     result: CheckResult, scratch: Scratch = IN_MEMORY) -> None:
    """Every row at the shard, row and offset the plan gives it; nothing placed that is not packed.

    The misplaced rows are counted, then walked, a block at a time (`_misplaced`): only they become Python
    values."""
    shard_col, row_col, off_col = rows["shard"], rows["row"], rows["offset"]
    wrong = sum(len(_misplaced(rows, match, placement, block)) for block in blocks(len(match), scratch))
    if not wrong:
        return
    plan = ", ".join(f"config.{key}={getattr(settings, key)!r}" for key in PackSettings.PLACEMENT)
    result.fail(Violation(f"{wrong} of {len(shard_col)} examples are not where the plan puts them; re-run on "
                          f"the reconstructed lengths with {plan}"))
    for block in blocks(len(match), scratch):
        for i in as_ints(_misplaced(rows, match, placement, block)):
            m = int(match[i])
            k, r, o = int(placement.shard[m]), int(placement.row[m]), int(placement.offset[m])
            want = (shard_name(k), r, o) if k >= 0 else (None, -1, -1)
            got = (shard_col[i], row_col[i], off_col[i])
            column = next(c for c, g, w in zip(("shard", "row", "offset"), got, want) if g != w)
            result.fail(Violation(f"the seam table puts it at (shard, row, offset) {got}, the plan at {want}",
                                  field=column, **_loc(rows, i)))


def _misplaced(rows: SeamColumns, match: np.ndarray, placement: Placement, block: slice) -> npt.NDArray[np.int64]:
    """The matched rows of ``block`` (ascending) whose (shard, row, offset) is not the plan's: the shard compared
    as the index its name spells (`shard_name`; null is -1, the plan's "in no shard"; any other name -2)."""
    m = match[block]
    matched = np.flatnonzero(m >= 0)
    m = m[matched]
    at = matched + block.start
    shards = rows["shard"]
    spelled = [_shard_index(name) for name in shards.names] + [-1]
    differs = np.asarray(spelled, np.int64)[shards.codes[at]] != placement.shard[m]
    differs |= np.asarray(rows["row"])[at] != placement.row[m]
    differs |= np.asarray(rows["offset"])[at] != placement.offset[m]
    return at[differs]


def _shard_index(name: str) -> int:
    """The shard ``name`` names (``name == shard_name(k)``), or -2."""
    spelled = re.fullmatch(r"shard-([0-9]+)\.parquet", name)
    k = int(spelled.group(1)) if spelled else -2
    return k if 0 <= k < 2**31 and shard_name(k) == name else -2


def _check_shards(manifest: Manifest, placement: Placement, plan: PackPlan, settings: PackSettings,
                  result: CheckResult) -> None:
    """The shards are the plan's packs cut every ``packs_per_shard``."""
    pinned = [info.rows for info in manifest.shards]
    per = settings.packs_per_shard
    planned = [min(per, plan.num_packs - k * per) for k in range(placement.num_shards)]
    if pinned != planned:
        result.fail(Violation(f"the shards hold {pinned[:8]} packs; the plan's {plan.num_packs} packs cut every "
                              f"config.packs_per_shard={per} give {planned[:8]}", field="config.packs_per_shard"))


def _check_metrics(pinned: dict, derived: dict[str, int | float], result: CheckResult) -> None:
    """``metrics`` equal the re-run plan's, key for key (floats to 1e-9 relative: the same arithmetic)."""
    for key in sorted(set(pinned) | set(derived)):
        got, want = pinned.get(key), derived.get(key)
        same = (got == want if isinstance(want, int) or want is None or got is None
                else isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9, abs_tol=0.0))
        if not same:
            result.fail(Violation(f"metrics.{key} is {got!r}, the re-run plan's is {want!r}", field=f"metrics.{key}"))

