"""Global bookkeeping: the seam table and the packs are a bijection, and every count adds up.

Every seam-table row names an input of the manifest (by index, and by its name in ``source``), a
line and a copy no other row names, and carries the documented id of that copy of that record
(`packcli.contract.example_id`).
Every segment of every pack (a cu_seqlens span: together they cover every token) belongs to exactly
one packed or truncated row, at the shard, row, offset and length the row says, and holds the tokens
its ``token_hash`` pins; every other row is in no pack. rejects.jsonl is exactly what pack writes for
the rejected rows, byte for byte. The manifest's ``counts`` and each input's ``records`` are recounted from the seam table and
the packs. That every source line has a row (and no row a line that is not a record) is
reconstruction's half.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

import numpy as np

from packcli.artifact.seams import reject_line
from packcli.contract import IN_PACKS, REJECTED, STATUSES, example_id
from packcli.job.units import occurrences
from packcli.job.write import OVERLONG_FATES, count_examples
from packcli.verify.integrity import Artifact
from packcli.verify.packs import ShardTotals
from packcli.verify.report import CheckResult, Violation


def check_global(artifact: Artifact, rows: dict[str, list], manifest: dict, result: CheckResult) -> None:
    """The seam table (``rows``: its columns as lists) against the packs, rejects.jsonl and the manifest."""
    packs = artifact.packs
    for twice in packs.twice:
        result.fail(Violation(f"example appears twice in the packs (also in {twice.first.shard} row {twice.first.row})",
                              shard=twice.shard, row=twice.row, example_id=twice.example_id, field="example_ids"))
    segments = packs.segments
    claimed: set[int] = set()  # the segments a seam-table row has accounted for
    inputs = manifest["inputs"]
    occurrence = occurrences([entry["sha256"] for entry in inputs])
    seen_lines: dict[tuple[int, int, int], int] = {}
    seen_ids: dict[int, int] = {}
    ids, inputs_col, sources, lines, copies, statuses = (rows[c] for c in ("example_id", "input", "source", "line",
                                                                             "copy", "status"))

    def at(i: int) -> dict:  # where a violation is, built only when there is one
        return dict(example_id=ids[i], source=sources[i], line=lines[i])

    for i, eid in enumerate(ids):
        k, line, copy, status = inputs_col[i], lines[i], copies[i], statuses[i]
        if not 0 <= k < len(inputs):
            result.fail(Violation(f"input {k} is not an input of the manifest (it has {len(inputs)})", field="input",
                                  **at(i)))
        elif sources[i] != inputs[k]["name"]:
            result.fail(Violation(f"source {sources[i]!r} is not the name of input {k}, inputs[{k}].name "
                                  f"{inputs[k]['name']!r}", field="source", **at(i)))
        elif eid != (want := example_id(inputs[k]["sha256"], occurrence[k], line, copy)):
            result.fail(Violation(f"example_id {eid} is not the id of its input, line and copy {sources[i]}:{line} "
                                  f"copy {copy} (expected {want})", field="example_id", **at(i)))
        if seen_lines.setdefault((k, line, copy), i) != i:
            result.fail(Violation(f"seam-table rows {seen_lines[k, line, copy]} and {i} both name {sources[i]}:{line}"
                                  f" copy {copy}", field="line", **at(i)))
        if seen_ids.setdefault(eid, i) != i:
            result.fail(Violation(f"example appears twice in the seam table (rows {seen_ids[eid]} and {i})",
                                  field="example_id", **at(i)))
        if status not in STATUSES:
            result.fail(Violation(f"status {status!r} is not one of {', '.join(STATUSES)}", field="status", **at(i)))
        segment = None if eid in claimed else segments.get(eid)  # one row accounts for a segment
        if segment is not None:
            claimed.add(eid)
        if status not in IN_PACKS:
            if segment is not None:
                result.fail(Violation(f"example is {status} in the seam table but present in a pack",
                                      shard=segment.shard, row=segment.row, field="status", **at(i)))
            continue
        if rows["shard"][i] in artifact.unreadable:
            continue  # integrity reported the shard
        expected = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
        if segment is None or segment.where != expected:
            result.fail(Violation(f"seam table says (shard, row, offset, length) = {expected}, the packs say "
                                  f"{segment.where if segment else None}", **at(i)))
            continue
        if segment.ids_hash != rows["token_hash"][i]:
            result.fail(Violation("tokens in the pack do not hash to the seam table's token_hash", shard=segment.shard,
                                  row=segment.row, field="token_hash", **at(i)))
        if segment.supervised != rows["supervised"][i]:
            result.fail(Violation(f"supervised is {rows['supervised'][i]}, the pack span has {segment.supervised} "
                                  "supervised labels", shard=segment.shard, row=segment.row, field="supervised",
                                  **at(i)))
    result.checked += len(ids)
    for eid, segment in segments.items():
        if eid not in claimed:
            result.fail(Violation(f"the segment at token {segment.offset} of the pack has no packed row in the seam "
                                  "table", shard=segment.shard, row=segment.row, example_id=eid, field="example_ids"))
    _check_rejects(artifact, rows, result)
    _check_counts(artifact, rows, manifest, result)


def _check_rejects(artifact: Artifact, rows: dict[str, list], result: CheckResult) -> None:
    """rejects.jsonl is, line for line and byte for byte, what pack writes for the seam table's rejected rows."""
    if artifact.rejects is None:
        return  # integrity reported it
    expected = [reject_line(rows["input"][i], rows["source"][i], rows["line"][i], rows["reason"][i])
                for i, status in enumerate(rows["status"]) if status == STATUSES[REJECTED]]
    for k in range(max(len(expected), len(artifact.rejects))):
        got = artifact.rejects[k] if k < len(artifact.rejects) else None
        want = expected[k] if k < len(expected) else None
        if got != want:
            same = got is not None and want is not None and _parsed(got) == _parsed(want)
            result.fail(Violation(f"rejects.jsonl line {k + 1} is not what pack writes for the seam table's rejected "
                                  f"rows{' (the same object, spelled otherwise)' if same else ''}: {got} instead of "
                                  f"{want}", field="rejects"))
            return


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def recount(totals: Iterable[ShardTotals], rows: dict[str, list], num_inputs: int) -> dict:
    """The manifest's ``counts`` as the seam table (``rows``) and the packs give them: totals from the
    shards' (`PackIndex.totals`), per status and per input from the seam table
    (`packcli.job.write.count_examples`)."""
    totals = list(totals)
    code = {name: k for k, name in enumerate(STATUSES)}
    status = np.array([code.get(s, -1) for s in rows["status"]], dtype=np.int8)
    length, supervised = np.asarray(rows["length"], np.int64), np.asarray(rows["supervised"], np.int64)
    overlong = np.isin(status, OVERLONG_FATES)
    counts = count_examples(status, length, supervised)
    inputs = np.asarray(rows["input"])
    counts.update(records=len(status), packs=sum(t.rows for t in totals), tokens=sum(t.tokens for t in totals),
                  supervised_tokens=sum(t.supervised for t in totals),
                  tokens_lost=int((np.asarray(rows["original_length"], np.int64) - length)[overlong].sum()),
                  supervised_tokens_lost=int(np.asarray(rows["supervised_lost"], np.int64)[overlong].sum()),
                  by_input=[count_examples(status[inputs == k], length[inputs == k], supervised[inputs == k])
                            for k in range(num_inputs)])
    return counts


def _leaves(value: object, path: str) -> list[tuple[str, object]]:
    """(path, value) of every leaf under ``value``: ``counts.by_input[2].packed``."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [leaf for k, item in enumerate(value) for leaf in _leaves(item, f"{path}[{k}]")]
    return [(path, value)]


def _check_counts(artifact: Artifact, rows: dict[str, list], manifest: dict, result: CheckResult) -> None:
    """``counts`` and every input's ``records``, recounted; a count the manifest adds or leaves out is named."""
    actual = recount(artifact.packs.totals.values(), rows, len(manifest["inputs"]))
    over_packs = ("packs", "tokens", "supervised_tokens")
    if artifact.unreadable:
        for key in over_packs:
            actual.pop(key)  # integrity reported the shards these would be counted over
    counts = {k: v for k, v in manifest["counts"].items() if k != "dropped_fields"}  # reconstruction's to recount
    pinned, derived = dict(_leaves(counts, "counts")), dict(_leaves(actual, "counts"))
    for path in sorted(set(pinned) | set(derived)):
        if path in derived and pinned.get(path) != derived[path]:
            result.fail(Violation(f"{path}: the manifest says {pinned.get(path)}, the artifact has {derived[path]}",
                                  field=path))
        elif path not in derived and path.removeprefix("counts.") not in over_packs:
            result.fail(Violation(f"{path} is not a count packcli writes", field=path))
    per_input = Counter(k for k, copy in zip(rows["input"], rows["copy"]) if copy == 0)  # a record's first row
    for k, entry in enumerate(manifest["inputs"]):
        if per_input.get(k, 0) != entry["records"]:
            result.fail(Violation(f"inputs[{k}].records is {entry['records']}, the seam table has "
                                  f"{per_input.get(k, 0)} records of input {k} ({entry['name']})",
                                  field=f"inputs[{k}].records"))
