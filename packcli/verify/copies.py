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
from packcli.errors import InputError
from packcli.mix import Mixture, draw_copies, manifest_problems
from packcli.verify.columns import SeamColumns
from packcli.verify.report import CheckResult, Violation

USABLE = (*IN_PACKS, "unsampled")  # statuses of a record that could go into a pack


def check_copies(rows: SeamColumns, manifest: Manifest, result: CheckResult) -> None:
    """Recompute each record's copies and compare them with its seam-table rows.

    Every record is judged from the columns (sorted by input, line and copy); only the records found
    wanting are turned into Python values, to name what is wrong."""
    k, line, copy = (np.asarray(rows[c], np.int64) for c in ("input", "line", "copy"))
    mine = np.flatnonzero((k >= 0) & (k < len(manifest.inputs)))  # global reports a row of another input
    order = mine[np.lexsort((copy[mine], line[mine], k[mine]))]  # input order, as pack reads; stable: table order
    k, line, copy = k[order], line[order], copy[order]
    status = rows["status"].recode(STATUSES)[order]
    new_record = _changes(k, line)
    new_copy = new_record | _changes(copy)
    records, copies = np.flatnonzero(new_record), np.flatnonzero(new_copy)
    # per copy, in packs if any of its rows is (a split example's chunks), else its first row's status
    in_packs = np.isin(status, [STATUSES.index(s) for s in IN_PACKS])
    copy_in_packs = np.logical_or.reduceat(in_packs, copies) if len(copies) else np.zeros(0, bool)
    copy_usable = np.isin(np.where(copy_in_packs, STATUSES.index(IN_PACKS[0]), status[copies]),
                          [STATUSES.index(s) for s in USABLE])
    record_of_copy = np.cumsum(new_record)[copies] - 1
    copy_count = np.bincount(record_of_copy, minlength=len(records))
    usable = np.bincount(record_of_copy, weights=copy_usable.astype(np.float64), minlength=len(records)) > 0
    all_in_packs = np.bincount(record_of_copy, weights=(~copy_in_packs).astype(np.float64), minlength=len(records)) == 0
    mix = manifest.config.mix
    if mix is None:
        expected = usable.astype(np.int64)
    else:
        problems = manifest_problems(mix, len(manifest.inputs))
        file_index = k[records].astype(np.int32)
        try:
            expected = None if problems else draw_copies(Mixture.from_manifest(mix), usable, file_index,
                                                         manifest.config.seed)
        except InputError as exc:  # a source asked for examples has no usable record: pack refuses that mixture
            problems = [f"config.mix cannot be drawn on these records: {exc.message}"]
        if expected is None or problems:
            for problem in problems:
                result.fail(Violation(f"{problem}: the copies cannot be drawn again", field="config.mix"))
            return
    result.checked += len(records)
    wanted = np.where(usable & (expected > 0), expected, 1)  # copies 0..wanted-1 (a forged weight can make it huge)
    ends = np.append(records[1:], len(order)) if len(records) else records
    whole = (copy_count == wanted) & (copy[records] == 0) & (copy[ends - 1] == wanted - 1)
    # one copy (``whole`` with one wanted): its status is its first row's, unless a row of it is in packs
    unsampled = ~copy_in_packs[np.searchsorted(copies, records)] & (status[records] == UNSAMPLED)
    wrong = ~whole | (usable & (expected == 0) & ~unsampled) | (usable & (expected > 0) & ~all_in_packs)
    found = [_violation(rows, order[records[r]:ends[r]], int(expected[r]), bool(usable[r]), mix)
             for r in np.flatnonzero(wrong).tolist()]
    if found and mix is not None:  # first, as the per-record ones below can fill the report's violation limit
        result.fail(Violation(f"{len(found)} of {len(records)} records do not have the copies config.mix draws (seed "
                              f"config.seed {manifest.config.seed})", field="config.mix"))
    for violation in found:
        result.fail(violation)


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
