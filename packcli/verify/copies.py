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
import pyarrow as pa

from packcli.contract import IN_PACKS
from packcli.errors import InputError
from packcli.mix import Mixture, draw_copies, manifest_problems
from packcli.verify.report import CheckResult, Violation

USABLE = (*IN_PACKS, "unsampled")  # statuses of a record that could go into a pack


def check_copies(seam: pa.Table, manifest: dict, result: CheckResult) -> None:
    """Recompute each record's copies and compare them with its seam-table rows."""
    rows = seam.select(["example_id", "input", "source", "line", "copy", "status"]).to_pydict()
    statuses_of: dict[tuple[int, int, int], list[str]] = {}  # (input, line, copy) -> its rows' statuses
    records: dict[tuple[int, int], list[int]] = {}  # (input, line) -> its rows
    for i, (k, line) in enumerate(zip(rows["input"], rows["line"])):
        if not 0 <= k < len(manifest["inputs"]):
            continue  # the global check reports a row of an input the manifest does not hold
        records.setdefault((k, line), []).append(i)
        statuses_of.setdefault((k, line, rows["copy"][i]), []).append(rows["status"][i])
    keys = sorted(records)  # input order: by input, then by record number, as pack reads them
    copies = {k: sorted({rows["copy"][i] for i in records[k]}) for k in keys}
    # per record, one status per copy: in packs if any of its rows is (a split example's chunks)
    statuses = [[_copy_status(statuses_of[(*k, c)]) for c in copies[k]] for k in keys]
    usable = np.array([any(s in USABLE for s in st) for st in statuses], dtype=bool)
    mix = manifest["config"].get("mix")
    if mix is None:
        expected = usable.astype(np.int64)
    else:
        problems = manifest_problems(mix, len(manifest["inputs"]))
        file_index = np.array([k[0] for k in keys], dtype=np.int32)
        try:
            expected = None if problems else draw_copies(Mixture.from_manifest(mix), usable, file_index,
                                                         manifest["config"]["seed"])
        except InputError as exc:  # a source asked for examples has no usable record: pack refuses that mixture
            problems = [f"config.mix cannot be drawn on these records: {exc.message}"]
        if expected is None or problems:
            for problem in problems:
                result.fail(Violation(f"{problem}: the copies cannot be drawn again", field="config.mix"))
            return
    found = []
    for k, st, want, ok in zip(keys, statuses, expected.tolist(), usable.tolist()):
        result.checked += 1
        mine = records[k]
        got = copies[k]  # a copy named twice (the same chunk): global reports the second row
        loc = dict(example_id=rows["example_id"][mine[0]], source=rows["source"][mine[0]], line=k[1])
        why = ("without --mix, one example per record" if mix is None else
               f"the mixture draws {want} cop{'y' if want == 1 else 'ies'} of it" if ok else "it is not usable")
        wanted = want if ok and want else 1  # copies 0..wanted-1 (a count: a forged weight can make it huge)
        if len(got) != wanted or got != list(range(wanted)):
            found.append(Violation(f"has copies {got[:6]}, expected {list(range(min(wanted, 6)))}"
                                   f"{'...' if wanted > 6 else ''} ({why})", field="copy", **loc))
        elif ok and want == 0 and st != ["unsampled"]:
            found.append(Violation(f"the mixture draws no copy of it, but the seam table says {st}", field="status",
                                   **loc))
        elif ok and want and not all(s in IN_PACKS for s in st):
            found.append(Violation(f"{why}, but the seam table says {st}", field="status", **loc))
    if found and mix is not None:  # first, as the per-record ones below can fill the report's violation limit
        result.fail(Violation(f"{len(found)} of {len(keys)} records do not have the copies config.mix draws (seed "
                              f"config.seed {manifest['config']['seed']})", field="config.mix"))
    for violation in found:
        result.fail(violation)


def _copy_status(statuses: list[str]) -> str:
    """One copy's status: its row's, or for a split example's chunks ``split`` when one is in a pack."""
    return next((s for s in statuses if s in IN_PACKS), statuses[0])
