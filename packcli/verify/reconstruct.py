"""Reconstruction: re-derive every example from its source line and compare it with its pack span.

Re-reads every source file the manifest pins, runs every non-blank line through the same
`Preparer` as ``pack`` (always the reference tokenizer path), and demands that each line has
exactly one seam-table row whose fate it reproduces: the same tokens and labels in the pack,
the same over-long length when dropped, the same reason when rejected.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from packcli.chat import ChatTemplate, LossPolicy, Renderer
from packcli.console import NO_PROGRESS, Progress
from packcli.errors import InputError
from packcli.ingest import Format, describe_input, read_lines
from packcli.prepare import Preparer
from packcli.tokenization import LoadedTokenizer
from packcli.verify.invariants import FlatShard, resolve
from packcli.verify.report import CheckResult, Violation

BATCH = 2048


def check_reconstruction(manifest: dict, seam: pa.Table, shards: dict[str, FlatShard], tokenizer: LoadedTokenizer,
                         template_text: str, result: CheckResult, *, source_root: Path | None,
                         progress: Progress = NO_PROGRESS) -> None:
    config = manifest["config"]
    template = ChatTemplate(template_text, manifest["template"]["source"])
    renderer = Renderer(template, LossPolicy(manifest["loss_policy"]), bos_token=manifest["tokenizer"]["bos_token"],
                        eos_token=manifest["tokenizer"]["eos_token"])
    preparer = Preparer(renderer, tokenizer, Format(config["input_format"]))
    rows = seam.to_pydict()
    by_line = {(rows["source"][i], rows["line"][i]): i for i in range(len(rows["example_id"]))}
    capacity = config["capacity"]
    progress.start("reconstruct", "reconstructing", total=manifest["counts"]["records"])
    for fi, pinned in enumerate(manifest["inputs"]):
        path = resolve(pinned["path"], source_root)
        if not path.is_file():
            raise InputError(f"source {path}: no such file (named by the manifest)",
                             "run verify from the directory pack ran in, or pass --source-root")
        if describe_input(path).sha256 != pinned["sha256"]:
            result.fail(Violation("source file changed since packing (sha256 differs)", source=pinned["path"]))
            continue
        batch: list[tuple[int, int, bytes]] = []
        for line, raw in read_lines(path, fi):
            batch.append((fi, line, raw))
            if len(batch) == BATCH:
                _compare(batch, preparer, pinned["path"], by_line, rows, shards, capacity, result)
                progress.advance("reconstruct", len(batch))
                batch = []
        if batch:
            _compare(batch, preparer, pinned["path"], by_line, rows, shards, capacity, result)
            progress.advance("reconstruct", len(batch))
    for (source, line) in by_line:
        result.fail(Violation("seam table names a line that is not a record in the source", source=source, line=line))


def _compare(batch, preparer: Preparer, source: str, by_line: dict, rows: dict, shards: dict[str, FlatShard],
             capacity: int, result: CheckResult) -> None:
    for (_, line, _), outcome in zip(batch, preparer.prepare(batch)):
        result.checked += 1
        i = by_line.pop((source, line), None)
        if i is None:
            result.fail(Violation("record has no seam-table row (dropped without a record)", source=source, line=line))
            continue
        eid, status = rows["example_id"][i], rows["status"][i]
        loc = dict(example_id=eid, source=source, line=line)
        if isinstance(outcome, str):
            if status != "rejected" or rows["reason"][i] != outcome:
                result.fail(Violation(f"re-running gives rejection {outcome!r}; the seam table says {status} "
                                      f"{rows['reason'][i]!r}", **loc))
            continue
        n = len(outcome.input_ids)
        if status == "rejected":
            result.fail(Violation("record tokenizes now but the seam table says rejected", **loc))
        elif status == "dropped":
            if n <= capacity or rows["original_length"][i] != n:
                result.fail(Violation(f"dropped as over-long, but it has {n} tokens (capacity {capacity})", **loc))
        else:
            keep = capacity if status == "truncated" else n
            if status == "truncated" and n <= capacity:
                result.fail(Violation(f"truncated, but it has only {n} tokens", **loc))
                continue
            shard = shards.get(rows["shard"][i])
            if shard is None:
                result.fail(Violation(f"its shard {rows['shard'][i]} is unreadable", **loc))
                continue
            a = shard.row_offsets[rows["row"][i]] + rows["offset"][i]
            ids, labels = shard.ids[a:a + rows["length"][i]], shard.labels[a:a + rows["length"][i]]
            _diff(ids, outcome.input_ids[:keep], "tokens", shard, rows["row"][i], loc, result)
            _diff(labels, outcome.labels[:keep], "labels", shard, rows["row"][i], loc, result)


def _diff(got: np.ndarray, want: np.ndarray, what: str, shard: FlatShard, row: int, loc: dict,
          result: CheckResult) -> None:
    if len(got) == len(want) and np.array_equal(got, want):
        return
    differ = np.flatnonzero(got[:min(len(got), len(want))] != want[:min(len(got), len(want))])
    at = int(differ[0]) if len(differ) else min(len(got), len(want))
    result.fail(Violation(f"{what} differ from a fresh tokenization at position {at} "
                          f"(pack {got[at:at + 3].tolist()}, fresh {want[at:at + 3].tolist()}; "
                          f"lengths {len(got)} vs {len(want)})", shard=shard.name, row=row, **loc))
