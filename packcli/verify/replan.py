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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.artifact.fieldspec import setting_bounds
from packcli.artifact.manifest import Manifest, PackSettings
from packcli.choices import Overlong
from packcli.contract import DROPPED, DUPLICATE, PACKED, REJECTED, SPLIT, STATUSES, TRUNCATED, UNSAMPLED, shard_name
from packcli.job.chunks import Cut, SplitRule, pinned_rule
from packcli.job.fates import Chunked, Fates, decide_fates, loss_problem, split_rows
from packcli.job.plan import Placement, place_examples, plan_examples, plan_metrics
from packcli.job.select import unsampled_reason
from packcli.mix import Mixture, manifest_problems
from packcli.pack import STRATEGIES, PackPlan, check_budgets
from packcli.pack.strategies import resolved_window
from packcli.verify.chunking import claimed_cut, match_chunks
from packcli.verify.columns import as_ints, take_rows
from packcli.verify.reconstruct import Reconstructed
from packcli.verify.report import CheckResult, Violation

FATE_COLUMNS = ("status", "chunk_start", "reason", "length", "supervised", "supervised_lost")


def check_plan(manifest: Manifest, rows: dict[str, list], facts: Reconstructed | None, result: CheckResult) -> None:
    """Re-derive fates, chunks, plan, placement, shards and metrics from the lengths; compare with the artifact.

    The examples go to the planner in the order pack reads them (`read_order`), whatever order the seam table
    holds: the planner's shuffle and packing depend on that order, so a table in another order (and packs
    made for it) must not choose which examples share a pack.
    """
    config = manifest.config
    settings = _settings(config, len(manifest.inputs), result)
    if settings is None:
        return
    rows, facts = _in_read_order(manifest, rows, facts, result)
    result.checked = len(rows["example_id"])
    starts = example_starts(rows)
    first = starts[:-1]
    facts_in = _inputs(rows, facts, starts, settings)
    fates = decide_fates(facts_in.status, facts_in.length, facts_in.supervised, facts_in.reasons,
                         pinned_rule(settings), Overlong(settings.overlong), lambda j: facts_in.cuts[j])
    # Each record's first example (copy 0): its fate before a mixture's draw, as pack judges the reject budget on it.
    records = np.flatnonzero(np.asarray(rows["copy"])[first] == 0)

    def where(j: int) -> str:
        i = first[records[j]]
        return f"{rows['source'][i]}:{rows['line'][i]}"

    # judged here and reported in its turn below: the fates it reads go before the plan is made (memory)
    whole = len(records) == len(fates.status)  # every example a record's copy 0: the fates are the records'
    lost = loss_problem(fates if whole else fates.take(records), where, settings.max_reject_fraction)
    fates = _unsampled(rows, first, fates, config.mix)
    expected = split_rows(fates, facts_in.length)
    del fates  # ``expected`` holds a row's fates (these very arrays when nothing is split): one copy an example
    plan = plan_examples(expected.fates, settings)
    placement = place_examples(plan, expected.fates, settings.packs_per_shard)
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
    match = match_chunks(rows, starts, expected, facts_in.length, settings, result)
    _check_fates(rows, match, expected, facts_in, settings, result)
    _check_placement(rows, match, placement, settings, result)


def read_order(manifest: Manifest, rows: dict[str, list]) -> tuple[list[int], npt.NDArray[np.int64]]:
    """The order pack reads the inputs (by name, then sha256: `packcli.ingest.describe_inputs`), as manifest
    indices, and the seam-table rows in the order pack made its examples: by input in that order, then record,
    then copy, then chunk (a row naming no input of the manifest last; global reports it)."""
    inputs = manifest.inputs
    ranked = sorted(range(len(inputs)), key=lambda k: (inputs[k].name, inputs[k].sha256, k))
    rank = np.full(len(inputs) + 1, len(inputs), dtype=np.int64)
    rank[ranked] = np.arange(len(inputs))
    index = np.asarray(rows["input"], dtype=np.int64)
    index = np.where((index >= 0) & (index < len(inputs)), index, len(inputs))
    keys = [np.asarray(rows[c], np.int64) for c in ("chunk", "copy", "line")]
    return ranked, np.lexsort((*keys, rank[index]))


def _in_read_order(manifest: Manifest, rows: dict[str, list], facts: Reconstructed | None,
                   result: CheckResult) -> tuple[dict[str, list], Reconstructed | None]:
    """The rows and their reconstructed facts in `read_order`: as they are when the table is in that order
    (as pack writes it), else reordered, with the findings named."""
    ranked, order = read_order(manifest, rows)
    if ranked != sorted(ranked):
        k = next(j for j, r in enumerate(ranked) if r != j)
        names = manifest.inputs
        result.fail(Violation(f"the inputs are not in the order pack reads them (by name, then sha256): inputs[{k}] is "
                              f"{names[k].name!r}, but {names[ranked[k]].name!r} (inputs[{ranked[k]}]) comes "
                              "first; the plan is re-derived in pack's order", field="inputs"))
    if np.array_equal(order, np.arange(len(order))):
        return rows, facts
    i = int(np.flatnonzero(order != np.arange(len(order)))[0])
    result.fail(Violation(f"the seam table is not in input order (by input, then record, copy and chunk) from row {i} "
                          "on: the plan is re-derived in that order, never in the table's", **_loc(rows, int(order[i]))))
    picked = order.tolist()
    rows = take_rows(rows, order)
    if facts is not None:
        moved = np.empty_like(order)
        moved[order] = np.arange(len(order))  # where each row of the table went
        facts = Reconstructed(facts.length[order], facts.supervised[order],
                              {int(moved[i]): cut for i, cut in facts.cuts.items()},
                              [facts.rejection[j] for j in picked])
    return rows, facts


def _check_fates(rows: dict[str, list], match: np.ndarray, expected: Chunked, facts: ExampleFacts,
                 settings: PackSettings, result: CheckResult) -> None:
    """Every row's status, reason, length, supervised counts and chunk start are its re-derived fate's."""
    fates = expected.fates
    columns = {"status": lambda m: STATUSES[fates.status[m]], "reason": lambda m: fates.reasons[m],
               "length": lambda m: int(fates.used_len[m]), "supervised": lambda m: int(fates.used_sup[m]),
               "supervised_lost": lambda m: int(fates.lost[m]), "chunk_start": lambda m: int(expected.chunk_start[m])}
    for i, m in enumerate(as_ints(match)):
        if m < 0:
            continue  # match_chunks reported it
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
    reasons: list[str]
    reconstructed: np.ndarray
    cuts: dict[int, Cut]


def example_starts(rows: dict[str, list]) -> np.ndarray:
    """Where each example's rows start in the seam table, and its end: an example is a run of rows with one
    (input, line, copy), its chunks (one row, unless split)."""
    n = len(rows["example_id"])
    new = np.ones(n, dtype=bool)
    for column in ("input", "line", "copy"):  # a column at a time: no stack of them all
        key = np.asarray(rows[column])
        if n:
            new[1:] &= key[1:] == key[:-1]
    new[1:] = ~new[1:]
    return np.append(np.flatnonzero(new), n).astype(np.int64)


def _inputs(rows: dict[str, list], facts: Reconstructed | None, starts: np.ndarray,
            settings: PackSettings) -> ExampleFacts:
    """What each example's fate is decided from. Where reconstruction did not vouch for it
    (``--no-reconstruct``, a changed source), the seam table's own columns stand in, its chunks as the
    rows claim them. A row marked duplicate stays one: reconstruction recomputes the content keys that
    decide it."""
    count = len(starts) - 1
    status = np.full(count, PACKED, dtype=np.int8)
    length, supervised = np.zeros(count, np.int64), np.zeros(count, np.int64)
    reasons = [""] * count
    reconstructed = np.zeros(count, dtype=bool)
    cuts: dict[int, Cut] = {}
    rule = pinned_rule(settings)
    for j, i in enumerate(as_ints(starts[:-1])):
        claimed = rows["status"][i]
        if facts is not None and facts.length[i] >= 0:
            reconstructed[j] = True
            if claimed == STATUSES[DUPLICATE]:
                status[j], reasons[j], length[j] = DUPLICATE, rows["reason"][i], facts.length[i]
            elif facts.rejection[i] is not None:
                status[j], reasons[j] = REJECTED, facts.rejection[i]
            else:
                length[j], supervised[j] = facts.length[i], facts.supervised[i]
                if i in facts.cuts:
                    cuts[j] = facts.cuts[i]
            continue
        length[j] = rows["original_length"][i]
        if claimed in (STATUSES[REJECTED], STATUSES[DUPLICATE]):
            status[j], reasons[j] = STATUSES.index(claimed), rows["reason"][i]
            continue
        group = range(i, int(starts[j + 1]))
        supervised[j] = sum(rows["supervised"][r] + rows["supervised_lost"][r] for r in group)
        if length[j] > settings.capacity:
            cuts[j] = claimed_cut(rows, group, int(length[j]), rule)
    return ExampleFacts(status, length, supervised, reasons, reconstructed, cuts)


def _unsampled(rows: dict[str, list], first: np.ndarray, fates: Fates, mix: dict | None) -> Fates:
    """A usable example the mixture drew no copy of is ``unsampled``, in no pack (the copies check draws
    the copies again and owns which records those are)."""
    if mix is None:
        return fates
    mixture = Mixture.from_manifest(mix)  # `_settings` has checked it
    for j in fates.packable.tolist():
        i = int(first[j])
        if rows["status"][i] == STATUSES[UNSAMPLED]:
            fates.status[j], fates.used_len[j], fates.used_sup[j], fates.lost[j] = UNSAMPLED, 0, 0, 0
            fates.reasons[j] = unsampled_reason(mixture, rows["input"][i])
    return fates


def _status_message(rows: dict[str, list], i: int, expected: int, length: int, kept: int, settings: PackSettings,
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


def _loc(rows: dict[str, list], i: int) -> dict:
    return dict(example_id=rows["example_id"][i], source=rows["source"][i], line=rows["line"][i])


def _check_placement(rows: dict[str, list], match: np.ndarray, placement: Placement, settings: PackSettings,
                     result: CheckResult) -> None:
    """Every row at the shard, row and offset the plan gives it; nothing placed that is not packed."""
    shard_col, row_col, off_col = rows["shard"], rows["row"], rows["offset"]
    wrong = []
    for i, m in enumerate(as_ints(match)):
        if m < 0:
            continue
        k, r, o = int(placement.shard[m]), int(placement.row[m]), int(placement.offset[m])
        want = (shard_name(k), r, o) if k >= 0 else (None, -1, -1)
        if (shard_col[i], row_col[i], off_col[i]) != want:
            wrong.append((i, want))
    if not wrong:
        return
    plan = ", ".join(f"config.{key}={getattr(settings, key)!r}" for key in PackSettings.PLACEMENT)
    result.fail(Violation(f"{len(wrong)} of {len(shard_col)} examples are not where the plan puts them; re-run on "
                          f"the reconstructed lengths with {plan}"))
    for i, want in wrong:
        got = (shard_col[i], row_col[i], off_col[i])
        column = next(c for c, g, w in zip(("shard", "row", "offset"), got, want) if g != w)
        result.fail(Violation(f"the seam table puts it at (shard, row, offset) {got}, the plan at {want}",
                              field=column, **_loc(rows, i)))


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

