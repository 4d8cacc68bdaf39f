"""``verify --consumer``: run a trainer's own collation code on the artifact's packs and check what the
model would receive.

    trl      TRL's ``DataCollatorForLanguageModeling(padding_free=True)`` as SFTTrainer builds it, fed
             the rows as SFTTrainer passes them: only its signature columns (input_ids, labels,
             seq_lengths in TRL 1.16; asked of TRL itself, not copied here)
    hf       transformers' ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` fed the rows as
             a ``Trainer`` passes them (one feature per row)
    packcli  ``packcli.data.PackDataset`` with ``collate_hf``

The expected layout comes from the artifact alone (``cu_seqlens``), never from the consumer. Per
batch of ``batch_packs`` rows, in stored order: nothing truncated or changed, positions restart at
every seam (what sdpa/eager/flex models cut on) and no attention_mask overrides them, the varlen
boundaries equal the seams (what flash kernels cut on), no supervised label at a seam, no
supervised label lost. A consumer that fails is
named with why and what to change (``advice``), and ``verify`` exits 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packcli.contract import IGNORE_INDEX, SHARD_CONTRACTS
from packcli.data.read import Pack, PackReader
from packcli.errors import InputError
from packcli.verify.report import CheckResult, Violation

CONSUMERS = ("trl", "hf", "packcli")


@dataclass(frozen=True)
class Seen:
    """What the model receives from one collated batch, flattened to one row."""

    input_ids: npt.NDArray[np.int64]
    labels: npt.NDArray[np.int64]
    position_ids: npt.NDArray[np.int64] | None
    boundaries: npt.NDArray[np.int64] | None  # cu_seq_lens_q as the consumer emits it; None: not emitted
    attention_mask: bool = False  # the consumer passes one: HF then ignores the restarting positions


@dataclass
class ConsumerReport:
    consumer: str
    result: CheckResult
    runs: str = ""  # the consumer code that ran, in words
    versions: dict[str, str] = field(default_factory=dict)
    advice: str | None = None  # why it leaks and what to change, when it does
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result.ok

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {"consumer": self.consumer, "ok": self.ok, "runs": self.runs, "versions": self.versions,
                "advice": self.advice, "seconds": round(self.seconds, 3), "check": dict(asdict(self.result), ok=self.ok)}


def expected_batch(packs: list[Pack]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                                              npt.NDArray[np.int64]]:
    """ids, labels, example-local positions and global seams of packs laid end to end, from cu_seqlens."""
    ids = np.concatenate([p.input_ids for p in packs]).astype(np.int64)
    labels = np.concatenate([p.labels for p in packs]).astype(np.int64)
    lengths = np.concatenate([np.diff(p.cu_seqlens) for p in packs]).astype(np.int64)
    seams = np.concatenate([[0], np.cumsum(lengths)])
    positions = np.arange(len(ids)) - np.repeat(seams[:-1], lengths)
    return ids, labels, positions, seams


def check_batch(seen: Seen, packs: list[Pack], where: str) -> list[str]:
    """Every way ``seen`` differs from a leak-free batch of ``packs``; empty when it is one."""
    ids, labels, positions, seams = expected_batch(packs)
    n, problems = len(ids), []
    got = len(seen.input_ids)
    if got < n or not np.array_equal(seen.input_ids[:n], ids):
        first = int(np.flatnonzero(seen.input_ids[:n] != ids[:got])[0]) if got and np.any(seen.input_ids[:n] != ids[:got]) else min(got, n)
        problems.append(f"{where}: tokens truncated or changed: the model receives {got} tokens, the packs hold {n} "
                        f"(first difference at token {first})")
        return problems  # nothing below is meaningful on other tokens
    if np.any(seen.labels[n:] != IGNORE_INDEX):
        problems.append(f"{where}: {int(np.count_nonzero(seen.labels[n:] != IGNORE_INDEX))} padding tokens carry a label")
    if seen.attention_mask:
        problems.append(f"{where}: an attention_mask is passed with the packed position_ids: HF models then build "
                        "an ordinary causal mask over the whole row and ignore the seams")
    if seen.position_ids is None:
        problems.append(f"{where}: no position_ids: the model numbers the whole row 0..{got - 1}, so positions never "
                        "restart at a seam and sdpa/eager attention is causal over the whole row")
    else:
        wrong = np.flatnonzero(seen.position_ids[:n] != positions)
        if len(wrong):
            t = int(wrong[0])
            k = int(np.searchsorted(seams, t, side="right") - 1)
            problems.append(f"{where}: positions do not restart at every seam: token {t} (example {k} of the batch) "
                            f"has position {int(seen.position_ids[t])}, alone it has {int(positions[t])}; "
                            f"{len(wrong)} tokens affected")
    if seen.boundaries is not None:
        b = seen.boundaries
        b = b[:-1] if len(b) > len(seams) and b[-2] == n and b[-1] > n else b  # a trailing padding segment
        b = b[:len(seams)] if len(b) > len(seams) and np.all(b[len(seams):] == b[len(seams) - 1]) else b
        if not np.array_equal(b, seams):
            problems.append(f"{where}: varlen boundaries {b.tolist()[:8]}{'...' if len(b) > 8 else ''} are not the "
                            f"seams {seams.tolist()[:8]}{'...' if len(seams) > 8 else ''} ({len(b) - 1} segments "
                            f"for {len(seams) - 1} examples): flash kernels would let examples attend to each other")
    seam_labels = seen.labels[seams[:-1]]
    if np.any(seam_labels != IGNORE_INDEX):
        k = int(np.flatnonzero(seam_labels != IGNORE_INDEX)[0])
        problems.append(f"{where}: the first label of example {k} of the batch is supervised "
                        f"({int(seam_labels[k])}): the previous example's last token would be trained to predict it")
    lost = int(np.count_nonzero((labels != IGNORE_INDEX) & (seen.labels[:n] == IGNORE_INDEX)))
    if lost:
        problems.append(f"{where}: {lost} supervised labels were masked by the consumer")
    return problems


# The consumers: each turns batches of stored rows into what its model would receive.


def _rows(reader: PackReader, columns: list[str] | None) -> Iterator[tuple[Pack, dict]]:
    """Each pack (from its own columns, whatever else the shard holds) with the row a ``datasets``-backed
    trainer passes on: the shard's columns as lists, narrowed to ``columns`` (remove_unused_columns)."""
    import pyarrow.parquet as pq

    for group in reader.row_groups:
        table = pq.ParquetFile(reader.directory / reader.shards[group.shard]).read_row_group(group.index)
        keep = [c for c in table.column_names if columns is None or c in columns]
        stored = table.select(["input_ids", "labels", "position_ids", "cu_seqlens", "example_ids"]).to_pylist()
        for own, row in zip(stored, table.select(keep).to_pylist()):
            pack = Pack(np.asarray(own["input_ids"], np.int32), np.asarray(own["labels"], np.int32),
                        np.asarray(own["position_ids"], np.int32), np.asarray(own["cu_seqlens"], np.int32),
                        np.asarray(own["example_ids"], np.int64))
            yield pack, row


def _batched(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _seen(out: dict) -> Seen:
    def flat(key: str) -> npt.NDArray[np.int64] | None:
        value = out.get(key)
        return None if value is None else np.asarray(value).reshape(-1).astype(np.int64)

    return Seen(flat("input_ids"), flat("labels"), flat("position_ids"), flat("cu_seq_lens_q"),
                attention_mask="attention_mask" in out)


def trl_signature_columns() -> list[str]:
    """The columns SFTTrainer keeps for a text dataset, asked of TRL's own ``SFTTrainer``."""
    from types import SimpleNamespace

    from trl import SFTTrainer

    probe = SimpleNamespace(_signature_columns=None, _is_vision_dataset=False)
    SFTTrainer._set_signature_columns_if_needed(probe)
    return list(probe._signature_columns)


def _trl(reader: PackReader, batch_packs: int) -> tuple[Iterator[tuple[list[Pack], Seen]], str, dict[str, str]]:
    import trl
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    columns = trl_signature_columns()
    # SFTTrainer: DataCollatorForLanguageModeling(pad_token_id=..., padding_free=True, pad_to_multiple_of=None);
    # the pad id never appears without padding.
    collator = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)

    def run() -> Iterator[tuple[list[Pack], Seen]]:
        for batch in _batched(_rows(reader, columns), batch_packs):
            yield [p for p, _ in batch], _seen(collator([r for _, r in batch]))

    runs = (f"trl.trainer.sft_trainer.DataCollatorForLanguageModeling(padding_free=True) on rows narrowed to "
            f"SFTTrainer's columns {columns}")
    return run(), runs, {"trl": trl.__version__}


def _hf(reader: PackReader, batch_packs: int) -> tuple[Iterator[tuple[list[Pack], Seen]], str, dict[str, str]]:
    import transformers
    from transformers import DataCollatorWithFlattening

    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True)

    def run() -> Iterator[tuple[list[Pack], Seen]]:
        for batch in _batched(_rows(reader, ["input_ids", "labels", "position_ids"]), batch_packs):
            yield [p for p, _ in batch], _seen(collator([r for _, r in batch]))

    runs = "transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True), one feature per row"
    return run(), runs, {"transformers": transformers.__version__}


def _packcli(reader: PackReader, batch_packs: int) -> tuple[Iterator[tuple[list[Pack], Seen]], str, dict[str, str]]:
    from packcli import __version__
    from packcli.data.collate import collate_hf
    from packcli.data.dataset import PackDataset

    dataset = PackDataset(reader.directory, batch_packs=batch_packs, shuffle=False, rank=0, world_size=1,
                          collate=lambda packs: collate_hf(packs, as_torch=False))

    def run() -> Iterator[tuple[list[Pack], Seen]]:
        # the loader's own reading, against the packs read from the shards directly; a batch missing
        # from the loader arrives as an empty one, and check_batch reports its tokens as lost
        expected = _batched(_rows(reader, []), batch_packs)
        empty = Seen(np.zeros(0, np.int64), np.zeros(0, np.int64), None, None)
        for out in dataset:
            packs = [p for p, _ in next(expected, [])]
            if not packs:
                raise AssertionError("packcli.data.PackDataset yielded more batches than the artifact holds")
            yield packs, _seen(out)
        for batch in expected:
            yield [p for p, _ in batch], empty

    return run(), "packcli.data.PackDataset(collate=collate_hf), stored order", {"packcli": __version__}


_RUNNERS: dict[str, Callable[[PackReader, int], tuple[Iterator[tuple[list[Pack], Seen]], str, dict[str, str]]]] = {
    "trl": _trl, "hf": _hf, "packcli": _packcli}


def advice(consumer: str, reader: PackReader) -> str:
    """Why ``consumer`` leaks on this artifact, and what to change."""
    if consumer == "trl":
        if "seq_lengths" not in trl_signature_columns():
            return ("this TRL no longer keeps a seq_lengths column in SFTTrainer; feed the packs with "
                    "packcli.data.PackDataset instead, and report it to packcli")
        import pyarrow.parquet as pq

        names = pq.read_schema(reader.directory / reader.shards[0]).names if reader.shards else []
        if "seq_lengths" not in names:
            from packcli.artifact.manifest import rebuild_command

            return ("TRL drops position_ids (SFTTrainer keeps input_ids, labels, seq_lengths) and builds positions and "
                    "cu_seq_lens only from seq_lengths, which these shards lack, so every example attends to the ones "
                    f"before it in its pack; rebuild with contract >= {min(SHARD_CONTRACTS)}: "
                    f"{rebuild_command(reader.manifest, reader.directory)}")
        return ("TRL builds positions and cu_seq_lens from seq_lengths, and these disagree with cu_seqlens: run "
                "`packcli verify` on the artifact and rebuild it")
    if consumer == "hf":
        return ("DataCollatorWithFlattening restarts positions per feature, not per example, and a packcli row holds "
                "several examples, so they attend to each other; feed it one example per feature "
                "(packcli.data.split_examples), or train on packcli.data.PackDataset with collate_hf, or with TRL "
                "(--consumer trl)")
    return "packcli's own loader leaked: a bug; report it with this output"


def check_consumer(directory: str | Path, consumer: str, *, batch_packs: int = 2, max_packs: int | None = None,
                   max_violations: int = 20) -> ConsumerReport:
    """Run ``consumer``'s collation on the artifact's packs (stored order) and check each batch.

    Args:
        batch_packs: rows per collated batch (2 by default, so seams between rows are checked too).
        max_packs: stop after this many packs (None: every pack).

    Raises:
        InputError: an unknown consumer, or its library is not installed.
        PackcliError: not an artifact, or a contract this packcli does not read.
    """
    if consumer not in CONSUMERS:
        raise InputError(f"unknown consumer {consumer!r}; choose from {', '.join(CONSUMERS)}")
    if batch_packs < 1:
        raise InputError(f"batch_packs must be at least 1, got {batch_packs}")
    library = {"trl": "trl", "hf": "transformers"}.get(consumer)  # packcli's loader needs nothing more
    import importlib.util

    if library is not None and importlib.util.find_spec(library) is None:
        raise InputError(f"--consumer {consumer} runs {library}'s own code, and {library} is not installed",
                         "pip install 'packcli[dev]'")
    started = time.perf_counter()
    reader = PackReader(directory, check_hashes=False)  # integrity is verify's own check
    batches, runs, versions = _RUNNERS[consumer](reader, batch_packs)
    result = CheckResult(f"consumer:{consumer}", limit=max_violations)
    packs_seen = 0
    for b, (packs, seen) in enumerate(batches):
        result.checked += 1
        for problem in check_batch(seen, packs, f"batch {b} (packs {packs_seen}..{packs_seen + len(packs) - 1})"):
            result.fail(Violation(problem))
        packs_seen += len(packs)
        if max_packs is not None and packs_seen >= max_packs:
            break
    report = ConsumerReport(consumer, result, runs=runs, versions=versions, seconds=time.perf_counter() - started)
    if not report.ok:
        report.advice = advice(consumer, reader)
    return report
