"""Global bookkeeping: the seam table and the packs are a bijection, and every count adds up.

Every seam-table row names an input of the manifest (by index, and by its name in ``source``), a
line, a copy and a chunk no other row names, and carries the documented id of that copy of that record
(`packcli.contract.example_id`).
Every segment of every pack (a cu_seqlens span: together they cover every token) belongs to exactly
one packed, truncated or split row (a split example's chunks are segments of one id, each claimed by
its own row), at the shard, row, offset and length the row says, and holds the tokens its
``token_hash`` pins; every other row is in no pack. rejects.jsonl is exactly what pack writes for
the rejected rows, byte for byte. The manifest's ``counts`` and each input's ``records`` are recounted
from the seam table and the packs. That every source line has a row (and no row a line that is not a record) is
reconstruction's half.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import zip_longest

import numpy as np

from packcli.artifact.manifest import InputPin, Manifest
from packcli.artifact.seams import reject_line
from packcli.contract import IN_PACK_CODES, IN_PACKS, REJECTED, STATUSES, example_id
from packcli.engine import Engine
from packcli.job.scratch import IN_MEMORY, Scratch, blocks
from packcli.job.units import occurrences
from packcli.job.write import OVERLONG_FATES, count_by_input, count_examples
from packcli.verify.columns import STEP, Ints, SeamColumns, Strings, status_codes
from packcli.verify.integrity import Artifact, reject_lines
from packcli.verify.packs import FIELDS, Segment, SegmentColumns, ShardTotals
from packcli.verify.report import CheckResult, Violation
from packcli.verify.spread import labels, map_parts


def check_global(artifact: Artifact, rows: SeamColumns, manifest: Manifest, result: CheckResult,
                 engine: Engine | None = None) -> None:
    """The seam table (``rows``: its columns) against the packs, rejects.jsonl and the manifest.

    Every row and segment is first checked as columns, a partition at a time (`_suspects`; with an ``engine``, on
    its workers); the rows of the examples found wanting are then walked one by one, in table order, to name
    what is wrong as each finding reads.
    """
    inputs = manifest.inputs
    occurrence = occurrences([entry.sha256 for entry in inputs])
    seen_rows: dict[tuple[int, int, int, int], int] = {}
    seen_ids: dict[tuple[int, int], int] = {}
    ids, inputs_col, sources, lines, copies, chunks, statuses = (
        rows[c] for c in ("example_id", "input", "source", "line", "copy", "chunk", "status"))
    claims = _Claims(artifact)

    def at(i: int) -> dict:  # where a violation is, built only when there is one
        return dict(example_id=ids[i], source=sources[i], line=lines[i])

    suspects, loose = _suspects(engine, artifact, rows, inputs, occurrence)
    for i in suspects.tolist():
        eid = ids[i]
        k, line, copy, chunk, status = inputs_col[i], lines[i], copies[i], chunks[i], statuses[i]
        if not 0 <= k < len(inputs):
            result.fail(Violation(f"input {k} is not an input of the manifest (it has {len(inputs)})", field="input",
                                  **at(i)))
        elif sources[i] != inputs[k].name:
            result.fail(Violation(f"source {sources[i]!r} is not the name of input {k}, inputs[{k}].name "
                                  f"{inputs[k].name!r}", field="source", **at(i)))
        elif eid != (want := example_id(inputs[k].sha256, occurrence[k], line, copy)):
            result.fail(Violation(f"example_id {eid} is not the id of its input, line and copy {sources[i]}:{line} "
                                  f"copy {copy} (expected {want})", field="example_id", **at(i)))
        if seen_rows.setdefault((k, line, copy, chunk), i) != i:
            result.fail(Violation(f"seam-table rows {seen_rows[k, line, copy, chunk]} and {i} both name "
                                  f"{sources[i]}:{line} copy {copy}" + (f" chunk {chunk}" if chunk else ""),
                                  field="chunk" if chunk else "line", **at(i)))
        if seen_ids.setdefault((eid, chunk), i) != i:
            result.fail(Violation(f"example appears twice in the seam table (rows {seen_ids[eid, chunk]} and {i})",
                                  field="example_id", **at(i)))
        if status not in STATUSES:
            result.fail(Violation(f"status {status!r} is not one of {', '.join(STATUSES)}", field="status", **at(i)))
        if status not in IN_PACKS or rows["shard"][i] in artifact.unreadable:
            continue  # in no pack; or integrity reported the shard
        expected = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
        segment = claims.claim(eid, expected)
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
    _check_unclaimed(claims, loose, rows, seen_ids, result)
    _check_rejects(artifact, rows, result)
    _check_counts(artifact, rows, manifest, result, engine)


def _judge(rows: SeamColumns, segs: SegmentColumns, shards: list[str], unreadable: Iterable[str], inputs: list[dict],
           occurrence: list[int], repeated_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_suspects` on ``rows`` and ``segs`` (every row and segment of some ids: each id is judged on its own rows
    and segments alone): the suspect rows, and the positions in ``segs`` of the first segment of each wanting id
    (ascending). ``repeated_key``: per row, whether another row of the whole table has its (input, line, copy,
    chunk)."""
    ids = np.asarray(rows["example_id"], np.int64)
    k, line, copy, chunk = (np.asarray(rows[c]) for c in ("input", "line", "copy", "chunk"))  # int32, not copied
    source = rows["source"]
    bad = ~((k >= 0) & (k < len(inputs)))
    if inputs:
        named = np.array([[name == entry.name for entry in inputs] for name in source.names]
                         + [[False] * len(inputs)], dtype=bool)
        bad |= ~named[source.codes, np.clip(k, 0, len(inputs) - 1)]
    hashes = [entry.sha256 for entry in inputs]
    rest = np.flatnonzero(~bad)
    for start in range(0, len(rest), STEP):  # Python ints a slice at a time, never a list a column
        part = rest[start:start + STEP]
        want = np.array([example_id(hashes[a], occurrence[a], b, c) for a, b, c in
                         zip(k[part].tolist(), line[part].tolist(), copy[part].tolist())], dtype=np.int64)
        bad[part[want != ids[part]]] = True
    status = rows["status"].recode(STATUSES)
    bad |= status < 0
    bad |= _repeated(ids, chunk)
    # the claims: each row in a readable pack against the segment at its place
    shard_of = {name: j for j, name in enumerate(shards)}
    shard_names = rows["shard"]
    shard_index = np.array([shard_of.get(name, -1) for name in shard_names.names] + [-1], np.int64)
    skipped = shard_names.isin(sorted(unreadable))
    placed = np.flatnonzero(np.isin(status, [STATUSES.index(s) for s in IN_PACKS]) & ~skipped)
    del skipped
    paired_row, paired_seg = _claims(rows, placed, shard_index, segs)
    token_hash = rows["token_hash"]
    at = placed[paired_row]
    same = ((np.asarray(token_hash.values)[at] == segs.ids_hash[paired_seg]) & token_hash.exact()[at]
            & (np.asarray(rows["supervised"])[at] == segs.supervised[paired_seg]))
    matched = np.zeros(len(placed), dtype=bool)
    matched[paired_row[same]] = True
    bad[placed[~matched]] = True
    claimed = np.zeros(len(segs.example_id), dtype=bool)
    claimed[paired_seg[same]] = True
    wanting = np.union1d(ids[bad | repeated_key], segs.example_id[~claimed])
    suspects = np.flatnonzero(np.isin(ids, wanting) | repeated_key)
    in_packs = np.flatnonzero(np.isin(segs.example_id, wanting))
    _, first = np.unique(segs.example_id[in_packs], return_index=True)
    return suspects, in_packs[np.sort(first)]


PART_ROWS = 1 << 18  # seam-table rows (and pack segments) of one partition: what one task holds
JUDGED = ("example_id", "input", "source", "line", "copy", "chunk", "status", "shard", "row", "offset", "length",
          "token_hash", "supervised")  # the columns `_judge` reads


def _suspects(engine: Engine | None, artifact: Artifact, rows: SeamColumns, inputs: tuple[InputPin, ...],
              occurrence: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The rows `check_global` must walk one by one (ascending), and the ids of examples with a segment no
    row may account for (in the order the shards first hold them).

    A row is clean when it names an input, that input's name and its own id, a known status, a
    (input, line, copy, chunk) and an (id, chunk) no other row names, and, when in a readable pack, exactly
    one segment of its id at its (shard, row, offset, length), whose digest and supervised count it
    carries. An example is clean when all its rows are and every segment of its id is one of theirs.
    Every row of an example that is not, and every row sharing its (input, line, copy, chunk) with
    another, is a suspect: the walk then sees each example's rows and each repeated key whole, as the
    checks that follow them need.

    Judged a partition at a time (on ``engine``'s workers; None: here, one after the other), so that the sorts
    and pairings over every row and segment (most of the global check's peak: docs/benchmarks-pipeline.md
    section 6) never hold more than `PART_ROWS` rows of them at once. First each (input, line, copy, chunk)
    seen again is found, the rows partitioned by line; then the rows and segments are partitioned by example
    id, each id judged whole in one partition (`_judge`). What comes back is suspect rows and wanting ids:
    the same answer however many partitions there are, which the tests compare (tests/test_verify_spread.py).
    """
    segs = artifact.packs.columns
    n = rows.rows
    parts = max(1, -(-max(n, len(segs.example_id)) // PART_ROWS))
    scratch = artifact.packs.scratch
    repeated_rows = _spread_repeated(engine, rows, parts, scratch)
    by_id, seg_by_id = _labels(np.asarray(rows["example_id"]), parts), _labels(segs.example_id, parts)
    scratch.release()  # the labels read every id: the partitions read what they need again
    common = (inputs, occurrence, list(artifact.packs.shards), sorted(artifact.unreadable))

    def partition(p: int) -> tuple:
        mine, theirs = _members(by_id, p), _members(seg_by_id, p)
        part = rows.gather(JUDGED, mine, scratch)
        return mine, part, _take_segments(segs, theirs, scratch), theirs, np.isin(mine, repeated_rows)

    judged = map_parts(engine, _judge_partition, common, parts, partition)
    scratch.release()
    suspects, first, loose = (np.concatenate([np.zeros(0, np.int64), *(part[k] for part in judged)]) for k in range(3))
    suspects.sort()
    return suspects, loose[np.argsort(first, kind="stable")]


def _spread_repeated(engine: Engine | None, rows: SeamColumns, parts: int, scratch: Scratch) -> np.ndarray:
    """The rows whose (input, line, copy, chunk) another row has (ascending), found a partition at a time (on
    ``engine``'s workers), the rows partitioned by line."""
    by_line = _labels(np.asarray(rows["line"]), parts)
    scratch.release()
    keys = ("input", "line", "copy", "chunk")

    def partition(p: int) -> tuple:
        mine = _members(by_line, p)
        part = rows.gather(keys, mine, scratch)
        return mine, *(np.asarray(part[c]) for c in keys)

    repeated = map_parts(engine, _repeated_keys, None, parts, partition)
    return np.sort(np.concatenate([np.zeros(0, np.int64), *repeated]))


def _labels(values: np.ndarray, parts: int) -> np.ndarray:
    """Per value, its partition (``value % parts``), in two bytes where that is enough (`labels`)."""
    return labels(len(values), lambda a, b: np.mod(values[a:b], parts), np.uint16 if parts <= 1 << 16 else np.int64)


def _members(labels: np.ndarray, p: int) -> np.ndarray:
    """The positions in partition ``p`` (ascending: table or read order kept)."""
    return np.flatnonzero(labels == p)


def _take_segments(segs: SegmentColumns, picked: np.ndarray, scratch: Scratch) -> SegmentColumns:
    """The segments at ``picked`` (ascending: read order kept), sorted by id again (a field at a time, ``scratch``'s
    pages handed back after each, as `SeamColumns.gather` does)."""
    fields = []
    for name in FIELDS:
        fields.append(getattr(segs, name)[picked])
        scratch.release()
    order = np.argsort(fields[0], kind="stable")
    return SegmentColumns(*fields, order=order, sorted_ids=fields[0][order])


def _repeated_keys(_: None, part: tuple) -> np.ndarray:
    """A worker's part of `_suspects`: of these rows (every row of some lines), those whose (input, line,
    copy, chunk) another row has."""
    mine, *keys = part
    return mine[_repeated(*keys)]


def _judge_partition(common: tuple, part: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A worker's part of `_suspects`: `_judge` on every row and segment of some ids. Returns the suspect
    rows and, per wanting id, the position of its first segment and the id, all as positions of the whole
    table and of every segment."""
    inputs, occurrence, shards, unreadable = common
    mine, rows, segs, theirs, repeated_key = part
    suspects, first = _judge(rows, segs, shards, unreadable, inputs, occurrence, repeated_key)
    return mine[suspects], theirs[first], segs.example_id[first]


def _claims(rows: SeamColumns, placed: np.ndarray, shard_index: np.ndarray,
            segs: SegmentColumns) -> tuple[np.ndarray, np.ndarray]:
    """(i, j): each row ``placed[i]`` whose (id, shard, row, offset, length) is held by no other placed row
    and by exactly one segment, ``j``. An id with one segment and one placed row (the common case) is
    compared where it is found; the others (a split example's chunks, a forger's copies) are paired by
    sorting their keys (`_pairs`), so no key array a row is built for all of them."""
    ids = np.asarray(rows["example_id"])[placed]
    lo = np.searchsorted(segs.sorted_ids, ids, "left")
    span = np.searchsorted(segs.sorted_ids, ids, "right") - lo
    present = span > 0
    rows_of = np.bincount(lo[present], minlength=len(segs.sorted_ids) + 1)  # placed rows an id (at its first)
    single = np.flatnonzero((span == 1) & (rows_of[lo] == 1))
    where = [shard_index[rows["shard"].codes[placed]], *(np.asarray(rows[c])[placed] for c in ("row", "offset", "length"))]
    seg = segs.order[lo[single]]
    here = np.ones(len(single), dtype=bool)
    for mine, theirs in zip(where, (segs.shard, segs.row, segs.offset, segs.length)):
        here &= mine[single] == theirs[seg]
    several = np.flatnonzero(present & ~((span == 1) & (rows_of[lo] == 1)))
    del lo, span, present, rows_of
    chosen = np.flatnonzero(np.isin(segs.example_id, np.unique(ids[several])))
    seg_keys = [segs.example_id[chosen], segs.shard[chosen], segs.row[chosen], segs.offset[chosen],
                segs.length[chosen]]
    left, right = _pairs([ids[several], *(w[several] for w in where)], seg_keys)
    return (np.concatenate([single[here], several[left]]).astype(np.int64),
            np.concatenate([seg[here], chosen[right]]).astype(np.int64))


def _repeated(*keys: np.ndarray) -> np.ndarray:
    """Per row, whether another row has the same values in every one of ``keys``."""
    n = len(keys[0])
    repeated = np.zeros(n, dtype=bool)
    if n < 2:
        return repeated
    order = np.lexsort(keys[::-1])
    same = np.ones(n - 1, dtype=bool)
    for key in keys:
        ordered = key[order]
        same &= ordered[1:] == ordered[:-1]
    repeated[order[1:][same]] = True
    repeated[order[:-1][same]] = True
    return repeated


def _pairs(left: list[np.ndarray], right: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(i, j): each position of ``left`` whose key (one value from each array) is held by exactly one position
    of ``left`` and one of ``right``, with that position of ``right``."""
    a, b = len(left[0]), len(right[0])
    keys = [np.concatenate([x.astype(np.int64), y.astype(np.int64)]) for x, y in zip(left, right)]
    side = np.concatenate([np.zeros(a, np.int8), np.ones(b, np.int8)])
    order = np.lexsort((side, *keys[::-1]))
    if a + b < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    same = np.ones(a + b - 1, dtype=bool)
    for key in keys:
        ordered = key[order]
        same &= ordered[1:] == ordered[:-1]
    # a pair: two equal keys, one from each side, and neither equal to its other neighbour
    before = np.concatenate([[False], same[:-1]])
    after = np.concatenate([same[1:], [False]])
    pair = same & ~before & ~after & (side[order[:-1]] == 0) & (side[order[1:]] == 1)
    starts = np.flatnonzero(pair)
    return order[starts], order[starts + 1] - a


class _Claims:
    """Which pack segments a seam-table row has accounted for: each exactly once, by the row at its place."""

    def __init__(self, artifact: Artifact) -> None:
        self.packs = artifact.packs
        self.claimed: set[tuple[int, int]] = set()  # (id, k): its k-th segment (`PackIndex.segments_of`)

    def claim(self, eid: int, where: tuple) -> Segment | None:
        """Claim the unclaimed segment of ``eid`` at ``where`` or, when none is there, its first unclaimed
        one (the row accounts for it, at a place the caller reports as wrong); None if none is left."""
        left = self._left(eid)
        k, segment = next(((k, s) for k, s in left if s.where == where), left[0] if left else (0, None))
        if segment is not None:
            self.claimed.add((eid, k))
        return segment

    def left(self, eid: int) -> list[Segment]:
        """The segments of ``eid`` no row has claimed."""
        return [s for _, s in self._left(eid)]

    def _left(self, eid: int) -> list[tuple[int, Segment]]:
        return [(k, s) for k, s in enumerate(self.packs.segments_of(eid)) if (eid, k) not in self.claimed]


def _check_unclaimed(claims: _Claims, loose: np.ndarray, rows: SeamColumns, seen_ids: dict[tuple[int, int], int],
                     result: CheckResult) -> None:
    """Every pack segment no seam-table row accounts for: a row that says its example is in no pack, a
    second copy of an example (or of a chunk), or an id the seam table does not hold. ``loose``: the ids
    that may have one (`_suspects`), whose rows the walk has claimed with."""
    loose = [e for e in loose.tolist() if claims.left(e)]
    if not loose:
        return
    rows_of: dict[int, list[int]] = {eid: [] for eid in loose}
    for (eid, _), i in seen_ids.items():
        if eid in rows_of:
            rows_of[eid].append(i)
    for eid in loose:
        for segment in claims.left(eid):
            mine = rows_of.get(eid, [])
            at = dict(shard=segment.shard, row=segment.row, example_id=eid)
            placed = [s for s in claims.packs.segments_of(eid) if s != segment]
            if not mine:
                result.fail(Violation(f"the segment at token {segment.offset} of the pack has no packed row in the "
                                      "seam table", field="example_ids", **at))
            elif not any(rows["status"][i] in IN_PACKS for i in mine):
                status = rows["status"][mine[0]]
                result.fail(Violation(f"example is {status} in the seam table but present in a pack", field="status",
                                      source=rows["source"][mine[0]], line=rows["line"][mine[0]], **at))
            else:
                also = f" (also in {placed[0].shard} row {placed[0].row})" if placed else ""
                result.fail(Violation(f"example appears twice in the packs{also}: the segment at token "
                                      f"{segment.offset} is not where any of its {len(mine)} seam-table rows puts it",
                                      field="example_ids", source=rows["source"][mine[0]],
                                      line=rows["line"][mine[0]], **at))


def _check_rejects(artifact: Artifact, rows: SeamColumns, result: CheckResult) -> None:
    """rejects.jsonl is, line for line and byte for byte, what pack writes for the seam table's rejected rows
    (both read a line at a time: neither side is held whole)."""
    if artifact.rejects is None:
        return  # integrity reported it
    status = rows["status"]
    rejected = (i for block in blocks(rows.rows)
                for i in (block.start + np.flatnonzero(status_codes(_rows_of(status, block.start, block.stop),
                                                                   STATUSES) == REJECTED)).tolist())
    expected = (reject_line(rows["input"][i], rows["source"][i], rows["line"][i], rows["reason"][i]) for i in rejected)
    for k, (got, want) in enumerate(zip_longest(reject_lines(artifact.rejects), expected)):
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


COUNTED = ("status", "length", "supervised", "original_length", "chunk", "chunk_start", "supervised_lost", "input")


def recount(totals: Iterable[ShardTotals], rows: Mapping[str, Sequence], num_inputs: int,
            engine: Engine | None = None, scratch: Scratch = IN_MEMORY) -> dict:
    """The manifest's ``counts`` as the seam table (``rows``: `SeamColumns`, or columns as lists) and the packs
    give them: totals from the shards' (`PackIndex.totals`), per status and per input from the seam table, as
    `packcli.job.write.count_examples` and `overlong_losses` count them over the whole table.

    Counted `PART_ROWS` rows at a time (with an ``engine``, on its workers), the partial counts merged here, so
    no process builds a per-row array of the whole table (about 115 bytes an example). The sums wrap as int64,
    as the whole-table sums do, so every forged table gets the same numbers (tests/test_verify_spread.py).
    ``scratch``: the columns' (its pages are handed back before each part is read)."""
    totals = list(totals)
    n = len(rows["status"])
    parts = max(1, -(-n // PART_ROWS))

    def window(p: int) -> tuple[np.ndarray, ...]:
        scratch.release()
        a, b = p * PART_ROWS, min(n, (p + 1) * PART_ROWS)
        status = status_codes(_rows_of(rows["status"], a, b), STATUSES).astype(np.int8)
        return (status, *(np.asarray(_rows_of(rows[c], a, b)) for c in COUNTED[1:]))

    counted = map_parts(engine, _count_part, num_inputs, parts, window)
    counts = _summed([part[0] for part in counted])
    by_input = [_summed([part[1][k] for part in counted]) for k in range(num_inputs)]
    whole, supervised_lost = (_wrapped(part[2][j] for part in counted) for j in (0, 1))
    covered = _covered(engine, counted, parts, window)
    counts.update(records=n, packs=sum(t.rows for t in totals), tokens=sum(t.tokens for t in totals),
                  supervised_tokens=sum(t.supervised for t in totals), tokens_lost=whole - covered,
                  supervised_tokens_lost=supervised_lost, by_input=by_input)
    return counts


def _rows_of(column: Sequence, a: int, b: int) -> Sequence:
    """Rows ``a`` to ``b`` of a `SeamColumns` column (a view) or a list."""
    if isinstance(column, Strings):
        return Strings(column.codes[a:b], column.names)
    if isinstance(column, Ints):
        return column.values[a:b]
    return column[a:b]


def _count_part(num_inputs: int, window: tuple[np.ndarray, ...]) -> tuple:
    """A part of `recount`: `count_examples` over these rows and per input; the over-long policy's whole
    lengths and supervised losses (`overlong_losses`' sums); and for the tokens its packs cover, how many
    examples start here (rows with chunk 0) and the furthest end of a packed over-long row's span."""
    status, length, supervised, original_length, chunk, chunk_start, lost, inputs = window
    length, supervised = length.astype(np.int64), supervised.astype(np.int64)
    counts = count_examples(status, length, supervised)
    by_input = count_by_input(status, length, supervised, inputs, num_inputs)
    overlong = np.isin(status, OVERLONG_FATES)
    whole = np.asarray(original_length, np.int64)[overlong & (chunk == 0)].sum()
    packed = overlong & np.isin(status, IN_PACK_CODES)
    ends = np.asarray(chunk_start, np.int64)[packed] + length[packed]
    return (counts, by_input, (int(whole), int(np.asarray(lost, np.int64)[overlong].sum())),
            int(np.count_nonzero(chunk == 0)), int(ends.max()) if len(ends) else None)


def _covered(engine: Engine | None, counted: list[tuple], parts: int,
             window: Callable[[int], tuple[np.ndarray, ...]]) -> int:
    """The tokens the packed rows of over-long examples cover, as `packcli.job.chunks.covered_tokens` counts
    them over the whole table (each example's spans shifted past the previous one's by the largest end).

    Each part counts with no reach carried in from the parts before it, and says from which reach on that
    would change its count; a part whose carried reach (the largest end before it) is past that is counted
    again with it: an example whose chunks straddle two parts, or a forged span that reaches back."""
    ends = [part[4] for part in counted if part[4] is not None]
    if not ends:
        return 0
    shift = max(ends) + 1
    examples = np.cumsum([0] + [part[3] for part in counted])  # examples started before each part

    def with_start(p: int) -> tuple:
        return window(p), int(examples[p])

    covered = map_parts(engine, _cover_part, (shift, None), parts, with_start)
    carry, again = None, []
    for p, part in enumerate(covered):
        if part is None:
            continue
        if carry is not None and carry > part[2]:
            again.append((p, carry))
        carry = part[1] if carry is None else max(carry, part[1])
    total = {p: part[0] for p, part in enumerate(covered) if part is not None}
    redone = map_parts(engine, _cover_again, shift, len(again), lambda q: (with_start(again[q][0]), again[q][1]))
    for (p, _), part in zip(again, redone):
        total[p] = part[0]
    return _wrapped(total.values())


def _cover_part(common: tuple[int, int | None], part: tuple) -> tuple[int, int, int] | None:
    """A part of `_covered`: (the tokens its packed over-long rows cover, given the reach carried in, or none;
    their largest shifted end; the least carried reach that would change the count). None: no such row."""
    shift, carry = common
    (status, length, _, _, chunk, chunk_start, _, _), before = part
    example = before + np.cumsum(chunk == 0) - 1  # rows of one example share it: each has one chunk 0
    packed = np.isin(status, OVERLONG_FATES) & np.isin(status, IN_PACK_CODES)
    if not packed.any():
        return None
    starts = np.asarray(chunk_start, np.int64)[packed] + example[packed] * shift
    ends = starts + np.asarray(length, np.int64)[packed]
    reach = np.concatenate([[starts[0] if carry is None else carry], np.maximum.accumulate(ends)[:-1]])
    if carry is not None:
        reach = np.maximum(reach, carry)
    floor = np.maximum(starts, reach)
    return int(np.maximum(0, ends - floor).sum()), int(ends.max()), int(floor.min())


def _cover_again(shift: int, part: tuple) -> tuple[int, int, int] | None:
    """`_cover_part` with the reach carried into this part."""
    rows, carry = part
    return _cover_part((shift, carry), rows)


def _summed(counts: list[dict]) -> dict:
    """Partial `count_examples` dicts added key by key, wrapping as int64 as one sum over every row does."""
    return {key: _wrapped(c[key] for c in counts) for key in counts[0]}


def _wrapped(values: Iterable[int]) -> int:
    """The sum of int64 partial sums as an int64 (wrapping), which is the sum over all their terms."""
    return int(np.array(list(values), np.int64).sum())


def _leaves(value: object, path: str) -> list[tuple[str, object]]:
    """(path, value) of every leaf under ``value``: ``counts.by_input[2].packed``."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [leaf for k, item in enumerate(value) for leaf in _leaves(item, f"{path}[{k}]")]
    return [(path, value)]


def _check_counts(artifact: Artifact, rows: SeamColumns, manifest: Manifest, result: CheckResult,
                  engine: Engine | None = None) -> None:
    """``counts`` and every input's ``records``, recounted; a count the manifest adds or leaves out is named."""
    actual = recount(artifact.packs.totals.values(), rows, len(manifest.inputs), engine, artifact.packs.scratch)
    over_packs = ("packs", "tokens", "supervised_tokens")
    if artifact.unreadable:
        for key in over_packs:
            actual.pop(key)  # integrity reported the shards these would be counted over
    counts = {k: v for k, v in manifest.counts.items() if k != "dropped_fields"}  # reconstruction's to recount
    pinned, derived = dict(_leaves(counts, "counts")), dict(_leaves(actual, "counts"))
    for path in sorted(set(pinned) | set(derived)):
        if path in derived and pinned.get(path) != derived[path]:
            result.fail(Violation(f"{path}: the manifest says {pinned.get(path)}, the artifact has {derived[path]}",
                                  field=path))
        elif path not in derived and path.removeprefix("counts.") not in over_packs:
            result.fail(Violation(f"{path} is not a count packcli writes", field=path))
    per_input = np.zeros(len(manifest.inputs), np.int64)
    for block in blocks(rows.rows):  # a block's masks and casts, not the table's
        index = np.asarray(rows["input"])[block].astype(np.int64)
        first = (np.asarray(rows["copy"])[block] == 0) & (np.asarray(rows["chunk"])[block] == 0)  # a record's first row
        first &= (index >= 0) & (index < len(manifest.inputs))
        per_input += np.bincount(index[first], minlength=len(manifest.inputs))
    per_input = per_input.tolist()
    for k, entry in enumerate(manifest.inputs):
        if per_input[k] != entry.records:
            result.fail(Violation(f"inputs[{k}].records is {entry.records}, the seam table has "
                                  f"{per_input[k]} records of input {k} ({entry.name})",
                                  field=f"inputs[{k}].records"))
