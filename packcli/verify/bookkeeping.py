"""Global bookkeeping: every example exactly once, in the pack the seam table says, counts that add up."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from packcli.artifact.shards import FlatShard
from packcli.contract import IGNORE_INDEX, IN_PACKS, STATUSES, token_hash
from packcli.verify.report import CheckResult, Violation


def check_global(shards: dict[str, FlatShard], seam: pa.Table, manifest: dict, result: CheckResult) -> None:
    """Every example exactly once, consistent with the seam table; counts equal the manifest's."""
    located: dict[int, tuple[str, int, int, int]] = {}
    for shard in shards.values():
        for r in range(shard.rows):
            cu = shard.cu[r]
            for k, eid in enumerate(shard.example_ids[r].tolist()):
                result.checked += 1
                if eid in located:
                    result.fail(Violation(f"example appears twice (also in {located[eid][0]} row {located[eid][1]})",
                                          shard=shard.name, row=r, example_id=eid))
                    continue
                if k + 1 < len(cu):
                    located[eid] = (shard.name, r, int(cu[k]), int(cu[k + 1] - cu[k]))
    rows = seam.to_pydict()
    counts = {s: 0 for s in STATUSES}
    by_input = [dict(counts, tokens=0, supervised_tokens=0) for _ in manifest["inputs"]]
    unknown = dict(counts, tokens=0, supervised_tokens=0)  # rows of an input the manifest does not list
    seen = set()
    tokens = supervised = 0
    inputs = manifest["inputs"]
    per_input = [0] * len(inputs)
    for i, eid in enumerate(rows["example_id"]):
        status = rows["status"][i]
        k = rows["input"][i]
        if not 0 <= k < len(inputs) or rows["source"][i] != inputs[k]["name"]:
            result.fail(Violation(f"seam table names input {k} ({rows['source'][i]}), which the manifest's inputs "
                                  "do not hold", example_id=eid, line=rows["line"][i]))
            mine = unknown
        else:
            per_input[k] += rows["copy"][i] == 0  # a record's first (or only) row: records read, not copies
            mine = by_input[k]
        counts[status] = counts.get(status, 0) + 1
        mine[status] = mine.get(status, 0) + 1
        if eid in seen:
            result.fail(Violation("example appears twice in the seam table", example_id=eid,
                                  source=rows["source"][i], line=rows["line"][i]))
        seen.add(eid)
        if status not in IN_PACKS:
            if eid in located:
                result.fail(Violation(f"example is {status} in the seam table but present in a pack", example_id=eid))
            continue
        where = located.pop(eid, None)
        expected = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
        if where != expected:
            result.fail(Violation(f"seam table says {expected}, the packs say {where}", example_id=eid,
                                  source=rows["source"][i], line=rows["line"][i]))
            continue
        shard = shards[where[0]]
        a = shard.row_offsets[where[1]] + where[2]
        span = shard.ids[a:a + where[3]]
        span_supervised = int(np.count_nonzero(shard.labels[a:a + where[3]] != IGNORE_INDEX))
        tokens += len(span)
        supervised += span_supervised
        mine["tokens"] += len(span)
        mine["supervised_tokens"] += span_supervised
        if token_hash(span) != rows["token_hash"][i]:
            result.fail(Violation("tokens in the pack do not hash to the seam table's token_hash", example_id=eid,
                                  shard=where[0], row=where[1], source=rows["source"][i], line=rows["line"][i]))
    for eid, (name, r, _, _) in located.items():
        result.fail(Violation("example in a pack has no packed row in the seam table", shard=name, row=r, example_id=eid))
    mc = manifest["counts"]
    actual = dict(counts, records=len(rows["example_id"]), tokens=tokens, supervised_tokens=supervised,
                  packs=sum(s.rows for s in shards.values()))
    for key, value in actual.items():
        if mc.get(key) != value:
            result.fail(Violation(f"count {key}: manifest says {mc.get(key)}, the artifact has {value}"))
    for k, pinned in enumerate(inputs):
        if pinned["records"] != per_input[k]:
            result.fail(Violation(f"input {k} ({pinned['name']}): manifest says {pinned['records']} records, the "
                                  f"seam table has {per_input[k]}"))
    for k, value in enumerate(by_input):
        given = (mc.get("by_input") or [])[k:k + 1]
        if given != [value]:
            result.fail(Violation(f"counts of input {k} ({inputs[k]['name']}): manifest says "
                                  f"{given[0] if given else None}, the artifact has {value}"))
    if sum(counts.values()) != mc.get("records"):
        result.fail(Violation(f"packed + truncated + dropped + rejected = {sum(counts.values())} != "
                              f"{mc.get('records')} input records"))
