"""Copies: every record has exactly the examples its mixture gives it (one, without a mixture).

The expected number of copies is recomputed, not read: `packcli.mix.draw_copies` on the manifest's
mixture and seed and the seam table's usable records (packed, truncated or unsampled; reconstruction
checks those statuses against the sources). Each record must then have copies 0..k-1, each in
packs, or, where the draw gave it none, one ``unsampled`` row; any other record one row, copy 0. A copy of
a split example is several rows (its chunks, some perhaps dropped); it is in packs when one of them is,
and the plan check owns which chunks it has.
"""

from __future__ import annotations

import numpy as np

from packcli.artifact.manifest import Manifest
from packcli.contract import IN_PACKS, STATUSES, UNSAMPLED
from packcli.engine import Engine
from packcli.errors import InputError
from packcli.job.scratch import IN_MEMORY, Scratch
from packcli.mix import Mixture, draw_copies, draw_some_copies, manifest_problems, targets
from packcli.verify.columns import SeamColumns
from packcli.verify.report import CheckResult, Violation
from packcli.verify.spread import SLICE, labels, map_parts

USABLE = (*IN_PACKS, "unsampled")  # statuses of a record that could go into a pack


PART_LINES = 1 << 18  # lines of one input a partition of the spread check holds (with every row of each)
COPIED = ("example_id", "input", "source", "line", "copy", "status")  # the columns the check reads


def check_copies(rows: SeamColumns, manifest: Manifest, result: CheckResult, engine: Engine | None = None,
                 scratch: Scratch = IN_MEMORY) -> None:
    """Recompute each record's copies and compare them with its seam-table rows.

    Every record is judged from the columns (sorted by input, line and copy); only the records found
    wanting are turned into Python values, to name what is wrong. A table of more than `PART_LINES` rows, or
    any with an ``engine``, is judged a run of `PART_LINES` lines of one input at a time (`_spread`; on the
    engine's workers, or here one after the other), so no process sorts the whole table: with ``--mix``, each
    part's usable records are counted first, so that each part draws its share of the whole source's draw."""
    num_inputs = len(manifest.inputs)
    mix = manifest.config.mix
    problems = [] if mix is None else manifest_problems(mix, num_inputs)
    if not problems:
        try:
            mixture = None if mix is None else Mixture.from_manifest(mix)
            seed = manifest.config.seed
            if engine is None and rows.rows <= PART_LINES:  # one part holds it all: judged whole, here
                k = np.asarray(rows["input"])
                mine = np.flatnonzero((k >= 0) & (k < num_inputs))  # global reports a row of another input
                records, found = _judge_part((mix, mixture, seed, None), (rows, None, mine))
            else:
                records, found = _spread(engine, rows, num_inputs, mix, mixture, seed, scratch)
        except InputError as exc:  # a source asked for examples has no usable record: pack refuses that mixture
            problems = [f"config.mix cannot be drawn on these records: {exc.message}"]
    if problems:
        for problem in problems:
            result.fail(Violation(f"{problem}: the copies cannot be drawn again", field="config.mix"))
        return
    result.checked += records
    if found and mix is not None:  # first, as the per-record ones below can fill the report's violation limit
        result.fail(Violation(f"{len(found)} of {records} records do not have the copies config.mix draws (seed "
                              f"config.seed {manifest.config.seed})", field="config.mix"))
    for violation in found:
        result.fail(violation)




def _spread(engine: Engine | None, rows: SeamColumns, num_inputs: int, mix: dict | None,
            mixture: Mixture | None, seed: int | None, scratch: Scratch) -> tuple[int, list[Violation]]:
    """`_judge_part` (on ``engine``'s workers; None: here) for every run of `PART_LINES` lines of one input (each
    record whole in one, the parts in record order); with a mixture, the usable records of each part counted first.
    ``scratch``: the columns' (its pages are handed back before each part is gathered)."""
    k, line = np.asarray(rows["input"]), np.asarray(rows["line"])
    low = int(line.min()) // PART_LINES if len(line) else 0
    span = (int(line.max()) // PART_LINES - low + 1) if len(line) else 1

    def key(a: int, b: int) -> np.ndarray:  # (input, run of lines), in record order; -1: another input's row
        mine = (k[a:b] >= 0) & (k[a:b] < num_inputs)
        return np.where(mine, k[a:b].astype(np.int64) * span + (line[a:b].astype(np.int64) // PART_LINES - low), -1)

    present = np.unique(np.concatenate([np.zeros(0, np.int64), *(np.unique(key(a, min(len(k), a + SLICE)))
                                                                  for a in range(0, len(k), SLICE))]))
    present = present[present >= 0]  # the parts, in record order

    def index(a: int, b: int) -> np.ndarray:  # the part's index; len(present) for another input's row
        keys = key(a, b)
        return np.where(keys >= 0, np.searchsorted(present, keys), len(present))

    part_of = labels(len(k), index, np.uint16 if len(present) < 1 << 16 else np.int64)
    scratch.release()  # the labels read every row's input and line: each part reads its own again

    def part(p: int) -> SeamColumns:
        return rows.gather(COPIED, np.flatnonzero(part_of == p), scratch)

    before = draw = None
    if mixture is not None:
        counts = np.array(map_parts(engine, _usable_part, num_inputs, len(present), part), np.int64)
        counts = counts.reshape(len(present), num_inputs)
        per_source = np.stack([counts[:, list(s.inputs)].sum(axis=1) for s in mixture.sources], axis=1)
        sizes = per_source.sum(axis=0).tolist()
        draw = (targets(mixture, sizes), sizes)  # an InputError as draw_copies raises it
        before = np.cumsum(per_source, axis=0) - per_source
    judged = map_parts(engine, _judge_part, (mix, mixture, seed, draw), len(present),
                       lambda p: (part(p), None if before is None else before[p].tolist(), None))
    return sum(r for r, _ in judged), [v for _, found in judged for v in found]


def _usable_part(num_inputs: int, rows: SeamColumns) -> list[int]:
    """A worker's part of `_spread`: per input, the usable records among these rows."""
    recs = _Records(rows, None)
    return np.bincount(recs.k[recs.records][recs.usable], minlength=num_inputs).tolist()


def _judge_part(common: tuple, item: tuple) -> tuple[int, list[Violation]]:
    """The records of ``rows`` (of its rows ``mine``, None: all; every row of each record) judged: their number and
    what is wrong with them, in record order. ``draw``: per source its target and usable records in all, and
    ``before``: its usable records in earlier parts (None: these rows are every record's)."""
    mix, mixture, seed, draw = common
    rows, before, mine = item
    recs = _Records(rows, mine)
    usable, records = recs.usable, recs.records
    if mixture is None:
        expected = usable.astype(np.int64)
    else:
        file_index = recs.k[records].astype(np.int32)
        if draw is None:
            expected = draw_copies(mixture, usable, file_index, seed)
        else:
            expected = draw_some_copies(mixture, usable, file_index, seed, *draw, before)
    wanted_copies = np.where(usable & (expected > 0), expected, 1)  # copies 0..k-1 (a forged weight can make it huge)
    ends = np.append(records[1:], len(recs.order)) if len(records) else records
    copy = recs.copy
    whole = (recs.copy_count == wanted_copies) & (copy[records] == 0) & (copy[ends - 1] == wanted_copies - 1)
    # one copy (``whole`` with one wanted): its status is its first row's, unless a row of it is in packs
    unsampled = ~recs.copy_in_packs[np.searchsorted(recs.copies, records)] & (recs.status[records] == UNSAMPLED)
    wrong = ~whole | (usable & (expected == 0) & ~unsampled) | (usable & (expected > 0) & ~recs.all_in_packs)
    found = [_violation(rows, recs.order[records[r]:ends[r]], int(expected[r]), bool(usable[r]), mix)
             for r in np.flatnonzero(wrong).tolist()]
    return len(records), found


class _Records:
    """The rows ``mine`` (None: all) of ``rows``, every row of some records, sorted by (input, line, copy) (stably:
    table order within; ``order`` indexes ``rows``), and per copy and per record what the check compares."""

    def __init__(self, rows: SeamColumns, mine: np.ndarray | None) -> None:
        k, line, copy = (np.asarray(rows[c], np.int64) for c in ("input", "line", "copy"))
        if mine is not None:
            k, line, copy = k[mine], line[mine], copy[mine]
        order = np.lexsort((copy, line, k))  # input order, as pack reads; stable: table order
        self.k, line, self.copy = k[order], line[order], copy[order]
        status = rows["status"].recode(STATUSES)
        self.order = order = order if mine is None else mine[order]
        self.status = status = status[order]
        new_record = _changes(self.k, line)
        new_copy = new_record | _changes(self.copy)
        self.records, self.copies = records, copies = np.flatnonzero(new_record), np.flatnonzero(new_copy)
        # per copy, in packs if any of its rows is (a split example's chunks), else its first row's status
        in_packs = np.isin(status, [STATUSES.index(s) for s in IN_PACKS])
        self.copy_in_packs = np.logical_or.reduceat(in_packs, copies) if len(copies) else np.zeros(0, bool)
        copy_usable = np.isin(np.where(self.copy_in_packs, STATUSES.index(IN_PACKS[0]), status[copies]),
                              [STATUSES.index(s) for s in USABLE])
        record_of_copy = np.cumsum(new_record)[copies] - 1
        self.copy_count = np.bincount(record_of_copy, minlength=len(records))
        self.usable = np.bincount(record_of_copy, weights=copy_usable.astype(np.float64), minlength=len(records)) > 0
        self.all_in_packs = np.bincount(record_of_copy, weights=(~self.copy_in_packs).astype(np.float64),
                                        minlength=len(records)) == 0


def _changes(*keys: np.ndarray) -> np.ndarray:
    """Per position of sorted ``keys``, whether it starts a new run of equal keys."""
    new = np.zeros(len(keys[0]), dtype=bool)
    if len(new):
        new[0] = True
        for key in keys:
            new[1:] |= key[1:] != key[:-1]
    return new


def _violation(rows: SeamColumns, mine: np.ndarray, want: int, ok: bool, mix: dict | None) -> Violation:
    """What is wrong with one record's copies (its rows ``mine``, by copy, each copy's in table order)."""
    statuses_of: dict[int, list[str]] = {}
    for i in mine.tolist():
        statuses_of.setdefault(rows["copy"][i], []).append(rows["status"][i])
    got = sorted(statuses_of)  # a copy named twice (the same chunk): global reports the second row
    st = [_copy_status(statuses_of[c]) for c in got]
    first = int(mine.min())
    loc = {"example_id": rows["example_id"][first], "source": rows["source"][first], "line": rows["line"][first]}
    why = ("without `mix`, one example per record" if mix is None else
           f"the mixture draws {want} cop{'y' if want == 1 else 'ies'} of it" if ok else "it is not usable")
    wanted = want if ok and want else 1
    if len(got) != wanted or got != list(range(wanted)):
        return Violation(f"has copies {got[:6]}, expected {list(range(min(wanted, 6)))}"
                         f"{'...' if wanted > 6 else ''} ({why})", field="copy", **loc)
    if ok and want == 0 and st != ["unsampled"]:
        return Violation(f"the mixture draws no copy of it, but the seam table says {st}", field="status", **loc)
    return Violation(f"{why}, but the seam table says {st}", field="status", **loc)


def _copy_status(statuses: list[str]) -> str:
    """One copy's status: its row's, or for a split example's chunks ``split`` when one is in a pack."""
    return next((s for s in statuses if s in IN_PACKS), statuses[0])
