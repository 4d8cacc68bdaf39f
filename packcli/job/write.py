"""Writing the artifact: shards as independent tasks, then the seam table, rejects and the manifest.

Once the packing plan is fixed, every shard is a pure function of its task (which examples, in which
order, cut into which packs) and the spills, so shards can be written in any order by any worker
and the bytes are the same: the local engine writes them one after another, the Ray engine as
tasks on the cluster, and `write_records` puts the results back in shard order. The manifest is
written last: a directory without one was never finished.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from packcli.artifact.manifest import FilePin, InputPin, Manifest, PackSettings, ShardPin, TemplatePin, TokenizerPin
from packcli.artifact.seams import Codes, EmptyAsNull, FixedWidth, write_rejects, write_seam_table
from packcli.artifact.shards import build_table, write_shard
from packcli.contract import (
    CONVENTIONS,
    DROPPED,
    DUPLICATE,
    IGNORE_INDEX,
    IN_PACK_CODES,
    PACKED,
    REJECTED,
    REJECTS_NAME,
    SEAM_TABLE_NAME,
    SPLIT,
    STATUSES,
    TRUNCATED,
    UNSAMPLED,
    file_sha256,
    shard_name,
    token_hash,
)
from packcli.ingest import InputFile
from packcli.job.pause import pause_at
from packcli.job.plan import ShardLayout, ShardTask, plan_metrics
from packcli.job.scratch import IN_MEMORY, Scratch, blocks
from packcli.job.select import Examples
from packcli.job.spill import SpillLayout, SpillReader

HASH_DTYPE = np.dtype("S16")  # a token hash: 16 hexadecimal digits (`packcli.contract.token_hash`)

if TYPE_CHECKING:
    from packcli.chat import ChatTemplate
    from packcli.config import PackConfig
    from packcli.pack import PackPlan
    from packcli.tokenizer import LoadedTokenizer


@dataclass(frozen=True)
class ShardResult:
    """The written shard, and the token hash of each of its examples (task order) for the seam table."""

    index: int
    info: ShardPin
    token_hashes: npt.NDArray[np.bytes_]  # `packcli.contract.token_hash`, ASCII, fixed width (no object per example)


def write_shard_task(layout: SpillLayout, task: ShardTask) -> ShardResult:
    """Gather the task's examples from the spills, build the shard's table and write it to ``task.path``."""
    with SpillReader(layout) as reader:
        ids, labels = reader.gather(task.spill_offsets, task.lengths)
    mask_chunk_starts(labels, task.lengths, task.masked)
    table = build_table(ids, labels, task.lengths, task.examples_per_pack, task.example_ids)
    info = write_shard(table, Path(task.path))
    pause_at("shard")  # a shard on disk, the rest of the artifact not: what a kill mid-write leaves
    bounds = np.concatenate([[0], np.cumsum(task.lengths)]).tolist()
    hashes = np.array([token_hash(ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])], dtype=HASH_DTYPE)
    del table
    # Arrow's allocator keeps freed buffers for reuse; over many shards that grew the write stage's
    # RSS with the shard count (+210 MiB from 20k to 200k conversations). Hand them back each shard.
    pa.default_memory_pool().release_unused()
    return ShardResult(task.index, info, hashes)


def mask_chunk_starts(labels: npt.NDArray[np.int32], lengths: npt.NDArray[np.int64],
                      masked: npt.NDArray[np.int64]) -> None:
    """Set the first ``masked[i]`` labels of segment ``i`` (segments end to end, ``lengths`` long) to -100, in
    place: every segment's first label, and a chunk's overlap (`packcli.job.chunks.SplitRule.masked`)."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    labels[starts[masked > 0]] = IGNORE_INDEX
    for start, count in zip(starts[masked > 1].tolist(), masked[masked > 1].tolist()):
        labels[start:start + count] = IGNORE_INDEX


OVERLONG_FATES = (PACKED, TRUNCATED, DROPPED, SPLIT)  # the examples whose lost tokens the over-long policy decides


def write_records(directory: Path, examples: Examples, layout: ShardLayout, thash: npt.NDArray[np.bytes_],
                  spill: SpillReader, files: Sequence[InputFile], scratch: Scratch = IN_MEMORY) -> int:
    """Write the seam table and rejects.jsonl; return the number of rejects.

    ``thash``: per row, the token hash of a packed example or chunk, put there from its shard task's
    `ShardResult` as each shard is written (b"" elsewhere); a dropped, duplicate or unsampled one's (or a
    dropped chunk's) is read from the spill here, so every tokenized example can still be matched to its
    record (a rejected one has no tokens, so no hash).
    """
    index, fates = examples.index, examples.fates
    # Columns as numpy arrays and codes into short lists of names, never a Python object per example: the
    # driver holds every example's row at once here (docs/benchmarks-pipeline.md, memory).
    full_len = np.asarray(index.length, dtype=np.int64)
    for i in np.flatnonzero(np.isin(fates.status, (DROPPED, DUPLICATE, UNSAMPLED))).tolist():
        thash[i] = token_hash(spill.read(index.spill_offset[i], examples.span[i])[0])
    names = [f.name for f in files]  # location-free: the manifest's ``inputs[i].name``
    placement = layout.placement
    shards = placement.shard  # int32: Codes' own type, so neither it nor the code below copies the column
    write_seam_table(directory / SEAM_TABLE_NAME, {
        "example_id": index.ids, "input": index.file_index, "source": Codes(index.file_index, names),
        "line": index.line, "copy": examples.copy, "chunk": examples.chunk, "chunk_start": examples.chunk_start,
        "status": Codes(scratch.put(fates.status, np.int32), STATUSES), "reason": fates.reasons,
        "shard": Codes(scratch.keep(np.maximum(shards, 0, dtype=np.int32)),
                       [shard_name(k) for k in range(int(shards.max(initial=-1)) + 1)], null=shards < 0),
        "row": placement.row, "offset": placement.offset, "length": fates.used_len, "original_length": full_len,
        "supervised": fates.used_sup, "supervised_lost": fates.lost, "token_hash": FixedWidth(thash),
        "format": EmptyAsNull(index.format),
    }, after_group=scratch.release)  # a row group written: its rows' pages of every column go back
    rejected = np.flatnonzero(fates.status == REJECTED).tolist()
    return write_rejects(directory / REJECTS_NAME, ((int(index.file_index[i]), names[index.file_index[i]],
                                                     int(index.line[i]), index.reason[i]) for i in rejected))


def provenance(config: PackConfig, files: Sequence[InputFile], template: ChatTemplate) -> dict:
    """Where the inputs, tokenizer and template were, as given to ``pack`` (the manifest's unhashed part):
    where ``verify`` looks first, relative to its working directory or ``--source-root``."""
    return {"inputs": [f.path for f in files], "tokenizer": config.tokenizer, "template": template.source}


def build_manifest(directory: Path, *, examples: Examples, plan: PackPlan, config: PackConfig, settings: PackSettings,
                   files: Sequence[InputFile], tokenizer: LoadedTokenizer, template: ChatTemplate,
                   shards: Sequence[ShardPin], rejects: int) -> Manifest:
    """The manifest's hashed fields: what shaped every seam, and what the artifact holds.

    Content only, never a location: inputs by name, size and sha256, the tokenizer and template by
    sha256, so the same data packed from two directories has the same hash (`provenance` has the paths).
    ``counts.records`` counts seam-table rows (a mixture's copies and a split example's chunks are rows
    of their own), and ``inputs[i].records`` the records read from input ``i``; ``counts.by_input[i]``
    breaks the statuses, examples and tokens down by input; with ``--allow-dropped-fields``,
    ``counts.dropped_fields`` counts per field the records the template dropped it from.
    """
    index, fates = examples.index, examples.fates
    n = len(index.ids)
    status, used_len, used_sup = fates.status, fates.used_len, fates.used_sup
    counts = count_examples(status, used_len, used_sup)
    tokens_lost, supervised_lost = overlong_losses(status, used_len, np.asarray(index.length, np.int64),
                                                   examples.chunk, examples.chunk_start, fates.lost)
    counts.update(records=n, packs=plan.num_packs, supervised_tokens_lost=supervised_lost, tokens_lost=tokens_lost,
                  by_input=count_by_input(status, used_len, used_sup, index.file_index, len(files)))
    if config.allow_dropped_fields:  # the records made into examples whose template dropped an allowed field
        counts["dropped_fields"] = {name: index.warnings.dropped.get(name, 0) for name in config.allowed_dropped()}
    seam_table = directory / SEAM_TABLE_NAME
    return Manifest(
        tokenizer=TokenizerPin(tokenizer.sha256, tokenizer.bos_token, tokenizer.eos_token),
        template=TemplatePin(template.origin, template.name, template.sha256, template.text),
        loss_policy=settings.loss, conventions=CONVENTIONS, config=settings,
        inputs=tuple(InputPin(f.name, f.kind.value, f.size, f.sha256, index.records_per_file[i])
                     for i, f in enumerate(files)),
        counts=counts, metrics=plan_metrics(plan, fates, settings.capacity), shards=tuple(shards),
        seam_table=FilePin(seam_table.name, seam_table.stat().st_size, file_sha256(seam_table), rows=n),
        rejects=FilePin(REJECTS_NAME, (directory / REJECTS_NAME).stat().st_size, file_sha256(directory / REJECTS_NAME),
                        rows=rejects))


def losses_by_fate(status: npt.NDArray[np.int8], length: npt.NDArray[np.int64], used_len: npt.NDArray[np.int64],
                   lost: npt.NDArray[np.int64]) -> dict[str, dict[str, int]]:
    """What the over-long policy took, by fate, over the records' fates (`Fates`, before copies): per fate
    (``truncated``: the cut tails; ``dropped``: whole examples; ``split``: the chunks dropped and the
    first label of every chunk after the first), the examples, their tokens in no pack and the supervised
    tokens lost. For the pack summary; the manifest's ``tokens_lost`` is `overlong_losses` over the
    seam table."""
    fates = {"truncated": TRUNCATED, "dropped": DROPPED, "split": SPLIT}
    out = {name: {"examples": 0, "tokens": 0, "supervised_tokens": 0} for name in fates}
    for rows in blocks(len(status)):
        here, cut = status[rows], np.asarray(length[rows], np.int64) - np.asarray(used_len[rows], np.int64)
        for name, code in fates.items():
            mask = here == code
            out[name]["examples"] += int(np.count_nonzero(mask))
            out[name]["tokens"] += int(cut[mask].sum())
            out[name]["supervised_tokens"] += int(np.asarray(lost[rows], np.int64)[mask].sum())
    return out


def count_examples(status: npt.NDArray[np.int8], used_len: npt.NDArray[np.int64],
                   used_sup: npt.NDArray[np.int64]) -> dict:
    """Examples per status, and the tokens and supervised tokens of those in packs (``verify``
    recounts the seam table with it), a block of rows at a time (`packcli.job.scratch.blocks`)."""
    counts = dict.fromkeys([*STATUSES, "tokens", "supervised_tokens"], 0)
    for rows in blocks(len(status)):
        here = status[rows]
        in_packs = np.isin(here, IN_PACK_CODES)
        for code, name in enumerate(STATUSES):
            counts[name] += int(np.count_nonzero(here == code))
        counts["tokens"] += int(used_len[rows][in_packs].sum())
        counts["supervised_tokens"] += int(used_sup[rows][in_packs].sum())
    return counts


def count_by_input(status: npt.NDArray[np.int8], used_len: npt.NDArray[np.int64], used_sup: npt.NDArray[np.int64],
                   inputs: npt.NDArray[np.integer], num_inputs: int) -> list[dict]:
    """`count_examples` of each input's rows (``inputs``: each row's input), a block of rows at a time."""
    out = [count_examples(status[:0], used_len[:0], used_sup[:0]) for _ in range(num_inputs)]
    for rows in blocks(len(status)):
        here = inputs[rows]
        for k, counts in enumerate(out):
            mask = here == k
            for key, value in count_examples(status[rows][mask], used_len[rows][mask], used_sup[rows][mask]).items():
                counts[key] += value
    return out


def overlong_losses(status: npt.NDArray[np.int8], length: npt.NDArray[np.int64], original_length: npt.NDArray[np.int64],
                    chunk: npt.NDArray[np.integer], chunk_start: npt.NDArray[np.int64],
                    supervised_lost: npt.NDArray[np.int64]) -> tuple[int, int]:
    """(tokens, supervised tokens) the over-long policy cost, over seam-table rows in input order (an
    example's chunks in order, its chunk 0 first): per example its tokens in no pack (its length less
    the tokens its packed rows cover, an overlap counted once), and the rows' ``supervised_lost``.
    ``verify`` recounts the seam table with it."""
    from packcli.job.chunks import covered_tokens

    chunk = np.asarray(chunk)
    whole = covered = supervised = 0
    for rows in _whole_examples(chunk):  # a block of rows at a time, never cutting an example's chunks apart
        here = status[rows]
        overlong = np.isin(here, OVERLONG_FATES)
        packed = overlong & np.isin(here, IN_PACK_CODES)
        firsts = chunk[rows] == 0
        example = np.cumsum(firsts) - 1  # rows of one example share it: each has one chunk 0
        covered += covered_tokens(np.asarray(chunk_start[rows], np.int64)[packed],
                                  np.asarray(length[rows], np.int64)[packed], example[packed])
        whole += int(np.asarray(original_length[rows], np.int64)[overlong & firsts].sum())
        supervised += int(np.asarray(supervised_lost[rows], np.int64)[overlong].sum())
    return whole - covered, supervised


def _whole_examples(chunk: npt.NDArray[np.integer]) -> Iterator[slice]:
    """Row ranges of about `packcli.job.scratch.BLOCK` rows, each starting at an example's chunk 0, so an
    example's rows are in one range."""
    start, n = 0, len(chunk)
    for rows in blocks(n):
        if rows.stop >= n:
            break
        ahead = chunk[rows.stop:2 * rows.stop - rows.start] == 0  # the next example's first row, a block on
        if not ahead.any():  # one example's chunks run on past a block: take them with the next
            continue
        stop = rows.stop + int(np.argmax(ahead))
        if stop > start:
            yield slice(start, stop)
            start = stop
    if start < n or n == 0:
        yield slice(start, n)
