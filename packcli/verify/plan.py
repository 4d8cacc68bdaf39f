"""The plan, re-derived: every fate, every pack and every position is what the pinned config makes of the
reconstructed lengths.

``pack`` promises that the same inputs and config give byte-identical shards; this check makes that
a checked property. From each record's reconstructed length and supervised counts (`Reconstructed`;
the seam table's own columns where reconstruction did not run), taken in the order pack reads the
records (the inputs by name and sha256, each input's records in order, each record's copies:
`read_order`; never the order of the table under test, which would let a forger choose which examples
share a pack), it re-runs the pack job's own
functions (`packcli.job.plan`: `decide_fates`, `plan_examples`, `place_examples`, `plan_metrics`)
under the manifest's ``config``, then demands that the seam table holds exactly those fates (status,
reason, length, supervised, supervised_lost), that every example sits in the shard, row and offset
the plan gives it (global has tied those to the packs), that the shards are cut every
``packs_per_shard`` packs, that the budgets hold (density, displacement, reject fraction), and that
``metrics`` are the plan's.

The planner is deterministic and fast (numba kernels over one int64 per example), so this costs a
small fraction of reconstruction (docs/contract.md, "What verify proves").
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from packcli.choices import Overlong
from packcli.contract import DROPPED, DUPLICATE, IN_PACKS, PACKED, REJECTED, STATUSES, TRUNCATED, UNSAMPLED, shard_name
from packcli.job.plan import (
    Fates,
    Placement,
    PlanSettings,
    decide_fates,
    loss_problem,
    place_examples,
    plan_examples,
    plan_metrics,
)
from packcli.job.select import unsampled_reason
from packcli.job.write import OVERLONG_FATES
from packcli.mix import Mixture, manifest_problems
from packcli.pack import STRATEGIES, PackPlan, check_budgets
from packcli.verify.reconstruct import Reconstructed
from packcli.verify.report import CheckResult, Violation

PLAN_FIELDS = ("strategy", "capacity", "window", "seed", "shuffle", "shuffle_packs", "packs_per_shard")
FATE_COLUMNS = ("status", "reason", "length", "supervised", "supervised_lost")


def check_plan(manifest: dict, rows: dict[str, list], facts: Reconstructed | None, result: CheckResult) -> None:
    """Re-derive fates, plan, placement, shards and metrics from the lengths; compare with the artifact.

    The examples go to the planner in the order pack reads them (`read_order`), whatever order the seam table
    holds: the planner's shuffle and packing depend on that order, so a table in another order (and packs
    made for it) must not choose which examples share a pack.
    """
    config = manifest["config"]
    settings = _settings(config, len(manifest["inputs"]), result)
    if settings is None:
        return
    rows, facts = _in_read_order(manifest, rows, facts, result)
    n = len(rows["example_id"])
    result.checked = n
    status, length, supervised, kept, reasons, reconstructed = _inputs(rows, facts)
    fates = decide_fates(status, length, supervised, reasons, settings.capacity, settings.overlong,
                         lambda i: int(kept[i]))
    # Each record's first row: its fate before a mixture's draw, as pack judges the reject budget on it.
    first = np.flatnonzero(np.asarray(rows["copy"]) == 0)
    record_fates = Fates(fates.status[first], fates.used_len[first], fates.used_sup[first],
                         [fates.reasons[i] for i in first.tolist()])
    fates = _unsampled(rows, fates, config["mix"])
    plan = plan_examples(fates, settings)
    placement = place_examples(plan, fates, settings.packs_per_shard)
    # Artifact-wide findings first: the per-example ones below can fill the report's violation limit.
    if plan.window != settings.window:
        result.fail(Violation(f"config.window is {settings.window!r}, but strategy {settings.strategy} packs with "
                              f"window {plan.window!r}", field="config.window"))
    _check_shards(manifest, placement, plan, settings, result)
    for problem in check_budgets(plan, min_density=settings.min_density, max_displacement=settings.max_displacement):
        budget = "config.min_density" if problem.startswith("density") else "config.max_displacement"
        result.fail(Violation(f"{budget} is not met by the plan (pack would have refused it): {problem}",
                              field=budget))
    lost = loss_problem(record_fates, lambda j: f"{rows['source'][first[j]]}:{rows['line'][first[j]]}",
                        settings.max_reject_fraction)
    if lost:
        result.fail(Violation(f"config.max_reject_fraction is not met (pack would have refused it): {lost[0]}: "
                              f"{lost[1]}", field="config.max_reject_fraction"))
    _check_metrics(manifest["metrics"], plan_metrics(plan, fates), result)
    _check_fates(rows, fates, length, kept, supervised, reconstructed, settings, result)
    _check_placement(rows, placement, settings, result)


def read_order(manifest: dict, rows: dict[str, list]) -> tuple[list[int], npt.NDArray[np.int64]]:
    """The order pack reads the inputs (by name, then sha256: `packcli.ingest.describe_inputs`), as manifest
    indices, and the seam-table rows in the order pack made its examples: by input in that order, then record,
    then copy (a row naming no input of the manifest last; global reports it)."""
    inputs = manifest["inputs"]
    ranked = sorted(range(len(inputs)), key=lambda k: (inputs[k]["name"], inputs[k]["sha256"], k))
    rank = np.full(len(inputs) + 1, len(inputs), dtype=np.int64)
    rank[ranked] = np.arange(len(inputs))
    index = np.asarray(rows["input"], dtype=np.int64)
    index = np.where((index >= 0) & (index < len(inputs)), index, len(inputs))
    return ranked, np.lexsort((np.asarray(rows["copy"], np.int64), np.asarray(rows["line"], np.int64), rank[index]))


def _in_read_order(manifest: dict, rows: dict[str, list], facts: Reconstructed | None,
                   result: CheckResult) -> tuple[dict[str, list], Reconstructed | None]:
    """The rows and their reconstructed facts in `read_order`: as they are when the table is in that order
    (as pack writes it), else reordered, with the findings named."""
    ranked, order = read_order(manifest, rows)
    if ranked != sorted(ranked):
        k = next(j for j, r in enumerate(ranked) if r != j)
        names = manifest["inputs"]
        result.fail(Violation(f"the inputs are not in the order pack reads them (by name, then sha256): inputs[{k}] is "
                              f"{names[k]['name']!r}, but {names[ranked[k]]['name']!r} (inputs[{ranked[k]}]) comes "
                              "first; the plan is re-derived in pack's order", field="inputs"))
    if np.array_equal(order, np.arange(len(order))):
        return rows, facts
    i = int(np.flatnonzero(order != np.arange(len(order)))[0])
    result.fail(Violation(f"the seam table is not in input order (by input, then record, then copy) from row {i} "
                          "on: the plan is re-derived in that order, never in the table's", **_loc(rows, int(order[i]))))
    picked = order.tolist()
    rows = {column: [values[j] for j in picked] for column, values in rows.items()}
    if facts is not None:
        facts = Reconstructed(facts.length[order], facts.supervised[order], facts.kept_supervised[order],
                              [facts.rejection[j] for j in picked])
    return rows, facts


def _check_fates(rows: dict[str, list], fates: Fates, length: np.ndarray, kept: np.ndarray, supervised: np.ndarray,
                 reconstructed: np.ndarray, settings: PlanSettings, result: CheckResult) -> None:
    """Every row's status, reason, length and supervised counts are its re-derived fate's."""
    expected = {"status": [STATUSES[s] for s in fates.status.tolist()], "reason": fates.reasons,
                "length": fates.used_len.tolist(), "supervised": fates.used_sup.tolist(),
                "supervised_lost": np.where(np.isin(fates.status, OVERLONG_FATES), supervised - fates.used_sup,
                                            0).tolist()}
    for i in range(len(fates.status)):
        if rows["status"][i] != expected["status"][i]:
            result.fail(Violation(_status_message(rows, i, fates.status[i], length[i], kept[i], settings,
                                                  reconstructed[i]), field="status", **_loc(rows, i)))
            continue
        for column in FATE_COLUMNS[1:]:
            if rows[column][i] != expected[column][i]:
                result.fail(Violation(f"{column} is {rows[column][i]!r}; its fate under config.overlong "
                                      f"{settings.overlong.value!r} and config.capacity {settings.capacity} gives "
                                      f"{expected[column][i]!r}", field=column, **_loc(rows, i)))
                break


def _settings(config: dict, num_inputs: int, result: CheckResult) -> PlanSettings | None:
    """The plan settings, or None (each bad one named) when the planner cannot run on them (or on the
    examples a malformed mixture would leave out)."""
    problems = []
    if config["mix"] is not None:
        problems += [("config.mix", problem) for problem in manifest_problems(config["mix"], num_inputs)]
    if config["strategy"] not in STRATEGIES:
        problems.append(("config.strategy", f"config.strategy {config['strategy']!r} is not a strategy "
                                            f"({', '.join(STRATEGIES)})"))
    if config["overlong"] not in {o.value for o in Overlong}:
        problems.append(("config.overlong", f"config.overlong {config['overlong']!r} is not a policy "
                                            f"({', '.join(o.value for o in Overlong)})"))
    # (the manifest check has bounded every number: capacity, seed, the fractions)
    if config["strategy"] == "window" and config["window"] is None:
        problems.append(("config.window", "config.window is None, but strategy window needs a window size"))
    for field, message in problems:
        result.fail(Violation(message + ": the plan cannot be re-derived", field=field))
    return None if problems else PlanSettings.of(config)


def _inputs(rows: dict[str, list], facts: Reconstructed | None) -> tuple:
    """Per row: accepted, rejected or duplicate, full length, supervised tokens, supervised tokens in
    the first ``capacity``, the reason it is not packed, and whether reconstruction vouched for them.
    Where it did not (``--no-reconstruct``, a changed source), the seam table's own columns stand in.
    A row marked duplicate stays one: reconstruction recomputes the content keys that decide it."""
    n = len(rows["example_id"])
    status = np.full(n, PACKED, dtype=np.int8)
    length, supervised, kept = (np.zeros(n, np.int64) for _ in range(3))
    reasons = [""] * n
    reconstructed = np.zeros(n, dtype=bool)
    for i in range(n):
        claimed = rows["status"][i]
        if facts is not None and facts.length[i] >= 0:
            reconstructed[i] = True
            if claimed == STATUSES[DUPLICATE]:
                status[i], reasons[i], length[i] = DUPLICATE, rows["reason"][i], facts.length[i]
            elif facts.rejection[i] is not None:
                status[i], reasons[i] = REJECTED, facts.rejection[i]
            else:
                length[i], supervised[i], kept[i] = facts.length[i], facts.supervised[i], facts.kept_supervised[i]
            continue
        if claimed in (STATUSES[REJECTED], STATUSES[DUPLICATE]):
            status[i], reasons[i] = STATUSES.index(claimed), rows["reason"][i]
            length[i] = rows["original_length"][i]
            continue
        length[i] = rows["original_length"][i]
        supervised[i] = rows["supervised"][i] + rows["supervised_lost"][i]
        # Truncation keeps what the pack holds; a dropped row claims truncation would keep nothing.
        kept[i] = rows["supervised"][i] if claimed in IN_PACKS else 0
    return status, length, supervised, kept, reasons, reconstructed


def _unsampled(rows: dict[str, list], fates: Fates, mix: dict | None) -> Fates:
    """A usable record the mixture drew no copy of is ``unsampled``, in no pack (the copies check
    draws the copies again and owns which records those are)."""
    if mix is None:
        return fates
    mixture = Mixture.from_manifest(mix)  # `_settings` has checked it
    for i in np.flatnonzero((fates.status == PACKED) | (fates.status == TRUNCATED)).tolist():
        if rows["status"][i] == STATUSES[UNSAMPLED]:
            fates.status[i], fates.used_len[i], fates.used_sup[i] = UNSAMPLED, 0, 0
            fates.reasons[i] = unsampled_reason(mixture, rows["input"][i])
    return fates


def _status_message(rows: dict[str, list], i: int, expected: int, length: int, kept: int, settings: PlanSettings,
                    reconstructed: bool) -> str:
    claimed = rows["status"][i]
    tokens = f"{length} tokens" + (" (reconstructed)" if reconstructed else " (original_length)")
    policy = f"config.overlong {settings.overlong.value!r}, config.capacity {settings.capacity}"
    if expected == TRUNCATED and claimed == STATUSES[DROPPED]:
        return (f"status is 'dropped', but truncating its {tokens} to the capacity keeps {kept} supervised tokens "
                f"({policy}): it must be truncated, not dropped")
    if expected == DROPPED and claimed == STATUSES[TRUNCATED]:
        why = ("truncating it keeps no supervised token" if settings.overlong is Overlong.truncate
               else "over-long examples are dropped")
        return f"status is 'truncated', but {why} ({tokens}; {policy}): it must be dropped"
    return f"status is {claimed!r}; an example of {tokens} under {policy} is {STATUSES[expected]!r}"


def _loc(rows: dict[str, list], i: int) -> dict:
    return dict(example_id=rows["example_id"][i], source=rows["source"][i], line=rows["line"][i])


def _check_placement(rows: dict[str, list], placement: Placement, settings: PlanSettings, result: CheckResult) -> None:
    """Every example at the shard, row and offset the plan gives it; nothing placed that is not packed."""
    shard_col, row_col, off_col = rows["shard"], rows["row"], rows["offset"]
    wrong = []
    for i, (k, r, o) in enumerate(zip(placement.shard.tolist(), placement.row.tolist(), placement.offset.tolist())):
        want = (shard_name(k), r, o) if k >= 0 else (None, -1, -1)
        if (shard_col[i], row_col[i], off_col[i]) != want:
            wrong.append((i, want))
    if not wrong:
        return
    plan = ", ".join(f"config.{key}={getattr(settings, key)!r}" for key in PLAN_FIELDS)
    result.fail(Violation(f"{len(wrong)} of {len(shard_col)} examples are not where the plan puts them; re-run on "
                          f"the reconstructed lengths with {plan}"))
    for i, want in wrong:
        got = (shard_col[i], row_col[i], off_col[i])
        column = next(c for c, g, w in zip(("shard", "row", "offset"), got, want) if g != w)
        result.fail(Violation(f"the seam table puts it at (shard, row, offset) {got}, the plan at {want}",
                              field=column, **_loc(rows, i)))


def _check_shards(manifest: dict, placement: Placement, plan: PackPlan, settings: PlanSettings,
                  result: CheckResult) -> None:
    """The shards are the plan's packs cut every ``packs_per_shard``."""
    pinned = [info["rows"] for info in manifest["shards"]]
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

