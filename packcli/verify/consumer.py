"""``verify --consumer``: read the artifact as a trainer does, run its own collation code, and check what the
model would receive.

    trl      ``datasets.load_dataset(OUT)`` (the card's command: it honours the card's YAML and any
             ``.huggingface.yaml``), narrowed by transformers' ``Trainer`` to SFTTrainer's signature
             columns (input_ids, labels, seq_lengths in TRL 1.16; asked of TRL itself, not copied here),
             then TRL's ``DataCollatorForLanguageModeling(padding_free=True)`` as SFTTrainer builds it
    hf       ``load_dataset(OUT)`` narrowed to a causal LM's columns, then transformers'
             ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` (one feature per row)
    packcli  ``packcli.data.PackDataset`` with ``collate_hf``

So whatever the consumer would read is what is checked: a file that redirects, narrows or filters
``load_dataset`` is caught here as it would act in training. The expected side is the shards the
manifest lists, read here (``cu_seqlens``), never through the consumer. Per batch of ``batch_packs``
rows, in stored order: the same rows and tokens, positions restart at every seam (what
sdpa/eager/flex models cut on) and no attention_mask overrides them, the varlen boundaries equal
the seams (what flash kernels cut on), no supervised label at a seam, every label the packs'
(none lost, none added). A consumer that fails is named with why and what to change
(``advice``), and ``verify`` exits 1.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packcli.artifact.manifest import ShardPin
from packcli.contract import IGNORE_INDEX, SHARD_CONTRACTS
from packcli.data.read import Pack
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
    got_labels = seen.labels[:n]
    lost = int(np.count_nonzero((labels != IGNORE_INDEX) & (got_labels == IGNORE_INDEX)))
    if lost:
        problems.append(f"{where}: {lost} supervised labels were masked by the consumer")
    added = np.flatnonzero((labels == IGNORE_INDEX) & (got_labels != IGNORE_INDEX))
    if len(added):
        problems.append(f"{where}: {len(added)} labels the packs do not supervise are supervised by the consumer "
                        f"(first at token {int(added[0])}): the model would be trained on prompts, system or user "
                        "turns")
    changed = np.flatnonzero((labels != IGNORE_INDEX) & (got_labels != IGNORE_INDEX) & (labels != got_labels))
    if len(changed):
        problems.append(f"{where}: {len(changed)} supervised labels have another target than the packs' (first at "
                        f"token {int(changed[0])})")
    return problems


# The consumers: each reads the artifact its own way and turns batches of rows into what its model receives.


def pinned_packs(directory: Path, shards: Sequence[ShardPin]) -> Iterator[Pack]:
    """The artifact's packs as its manifest pins them (``shards``: `packcli.artifact.manifest.shard_pins`): the
    listed shards in order, read here, one row group at a
    time (the expected side; never through a consumer's own reading, which is what is checked). The seams are
    ``cu_seqlens``, whatever else a shard holds."""
    import pyarrow.parquet as pq

    columns = ["input_ids", "labels", "position_ids", "cu_seqlens", "example_ids"]
    for info in shards:
        handle = pq.ParquetFile(directory / info.name)
        for group in range(handle.num_row_groups):
            for row in handle.read_row_group(group, columns=columns).to_pylist():
                yield Pack(*(np.asarray(row[c], np.int64 if c == "example_ids" else np.int32) for c in columns))


@contextmanager
def loaded_dataset(directory: Path) -> Iterator[Any]:
    """The train split exactly as ``datasets.load_dataset(OUT)`` gives it (the command the dataset card gives:
    it honours the card's YAML and a ``.huggingface.yaml``), built in a temporary cache that goes with it."""
    import datasets

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="packcli-consumer-") as cache:
            yield datasets.load_dataset(str(directory), split="train", cache_dir=cache)
    finally:
        if bars:
            datasets.enable_progress_bars()


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


def trainer_columns(dataset: Any, signature: list[str]) -> Any:
    """The dataset as transformers' ``Trainer`` hands it to the collator: its own ``_remove_unused_columns``
    (``remove_unused_columns=True``, the default) with ``signature`` as the model's columns."""
    from types import SimpleNamespace

    from transformers import Trainer

    probe = SimpleNamespace(args=SimpleNamespace(remove_unused_columns=True), _signature_columns=signature,
                            _set_signature_columns_if_needed=lambda: None, model=None)
    return Trainer._remove_unused_columns(probe, dataset)


@dataclass
class Reading:
    """A consumer's batches (what its model receives), how it read them, and what its dataset holds (rows and
    columns; None for a loader that has no dataset of rows)."""

    batches: Iterator[Seen]
    runs: str
    versions: dict[str, str]
    columns: list[str] | None = None
    rows: int | None = None


Runner = Callable[[Path, int, ExitStack], Reading]


def _trl(directory: Path, batch_packs: int, stack: ExitStack) -> Reading:
    import trl
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    columns = trl_signature_columns()
    # SFTTrainer with the card's settings (skip_prepare_dataset, padding_free, max_length=None) prepares nothing:
    # Trainer narrows the rows to its signature columns, then DataCollatorForLanguageModeling(padding_free=True).
    # The pad id never appears without padding.
    dataset = trainer_columns(stack.enter_context(loaded_dataset(directory)), columns)
    collator = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    batches = (_seen(collator(rows)) for rows in _batched(iter(dataset), batch_packs))
    runs = (f"datasets.load_dataset(OUT, split='train'), narrowed by transformers' Trainer to SFTTrainer's columns "
            f"{columns}, then trl.trainer.sft_trainer.DataCollatorForLanguageModeling(padding_free=True)")
    return Reading(batches, runs, {"trl": trl.__version__, "datasets": _version("datasets")}, dataset.column_names,
                   len(dataset))


def _hf(directory: Path, batch_packs: int, stack: ExitStack) -> Reading:
    import transformers
    from transformers import DataCollatorWithFlattening

    # a causal LM's forward takes these of the artifact's columns (and attention_mask, which it has not)
    dataset = trainer_columns(stack.enter_context(loaded_dataset(directory)),
                              ["input_ids", "attention_mask", "position_ids", "labels", "label", "label_ids"])
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    batches = (_seen(collator(rows)) for rows in _batched(iter(dataset), batch_packs))
    runs = ("datasets.load_dataset(OUT, split='train'), narrowed by transformers' Trainer to a causal LM's columns, "
            "then transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True), one feature per row")
    return Reading(batches, runs, {"transformers": transformers.__version__, "datasets": _version("datasets")},
                   dataset.column_names, len(dataset))


def _packcli(directory: Path, batch_packs: int, stack: ExitStack) -> Reading:
    from packcli import __version__
    from packcli.data.collate import collate_hf
    from packcli.data.dataset import PackDataset

    dataset = PackDataset(directory, batch_packs=batch_packs, shuffle=False, rank=0, world_size=1,
                          collate=lambda packs: collate_hf(packs, as_torch=False))
    return Reading((_seen(out) for out in dataset), "packcli.data.PackDataset(collate=collate_hf), stored order",
                   {"packcli": __version__})


def _version(module: str) -> str:
    from importlib.metadata import version

    return version(module)


_RUNNERS: dict[str, Runner] = {"trl": _trl, "hf": _hf, "packcli": _packcli}
LIBRARIES = {"trl": ("trl", "datasets"), "hf": ("transformers", "datasets"), "packcli": ()}


def advice(consumer: str, directory: Path, manifest: dict, columns: list[str] | None) -> str:
    """Why ``consumer`` leaks on this artifact (``columns``: those the consumer's dataset has), and what to change."""
    if columns is not None and "labels" not in columns:
        return ("load_dataset(OUT) gives no labels column, so the trainer makes labels of every token: it trains on "
                "system and user turns too. A file beside the card (a .huggingface.yaml) or an edited card narrows "
                "the columns: `packcli verify` names it; remove it")
    if consumer == "trl":
        if "seq_lengths" not in trl_signature_columns():
            return ("this TRL no longer keeps a seq_lengths column in SFTTrainer; feed the packs with "
                    "packcli.data.PackDataset instead, and report it to packcli")
        if columns is not None and "seq_lengths" not in columns:
            from packcli.artifact.manifest import rebuild_command

            return ("TRL drops position_ids (SFTTrainer keeps input_ids, labels, seq_lengths) and builds positions and "
                    "cu_seq_lens only from seq_lengths, which these shards lack, so every example attends to the ones "
                    f"before it in its pack; rebuild with contract >= {min(SHARD_CONTRACTS)}: "
                    f"{rebuild_command(manifest, directory)}")
        return ("TRL reads other packs than the manifest pins, or builds positions and cu_seq_lens from seq_lengths "
                "that disagree with cu_seqlens: run `packcli verify` on the artifact and rebuild it")
    if consumer == "hf":
        return ("DataCollatorWithFlattening restarts positions per feature, not per example, and a packcli row holds "
                "several examples, so they attend to each other; feed it one example per feature "
                "(packcli.data.split_examples), or train on packcli.data.PackDataset with collate_hf, or with TRL "
                "(`consumer='trl'`)")
    return "packcli's own loader leaked: a bug; report it with this output"


def check_consumer(directory: str | Path, consumer: str, *, batch_packs: int = 2, max_packs: int | None = None,
                   max_violations: int = 20) -> ConsumerReport:
    """Read the artifact as ``consumer`` does, run its collation, and check each batch against the pinned packs.

    The consumer's side is its own reading (``datasets.load_dataset(OUT)`` for TRL and transformers, the
    loader for packcli) and its own collator, in stored order; the expected side is the shards the manifest
    lists, read here. A consumer that cannot read the artifact, or reads other rows than the shards hold,
    is a violation, as is every batch that differs.

    Args:
        batch_packs: rows per collated batch (2 by default, so seams between rows are checked too).
        max_packs: stop after this many packs (None: every pack).

    Raises:
        InputError: an unknown consumer, or its libraries are not installed.
        PackcliError: not an artifact, or a contract this packcli does not read.
    """
    import importlib.util

    from packcli.artifact.manifest import read_manifest, shard_pins

    if consumer not in CONSUMERS:
        raise InputError(f"unknown consumer {consumer!r}; choose from {', '.join(CONSUMERS)}")
    if batch_packs < 1:
        raise InputError(f"batch_packs must be at least 1, got {batch_packs}")
    missing = [library for library in LIBRARIES[consumer] if importlib.util.find_spec(library) is None]
    if missing:
        raise InputError(f"`consumer='{consumer}'` runs {' and '.join(LIBRARIES[consumer])}'s own code, and "
                         f"{', '.join(missing)} is not installed", "pip install 'packcli[dev]'")
    started, directory = time.perf_counter(), Path(directory)
    manifest = read_manifest(directory, contracts=SHARD_CONTRACTS)  # the packs are what the consumer reads
    result = CheckResult(f"consumer:{consumer}", limit=max_violations)
    report = ConsumerReport(consumer, result)
    columns = None
    with ExitStack() as stack:
        try:
            reading = _consumer_side(consumer, directory, batch_packs, stack)
            report.runs, report.versions, columns = reading.runs, reading.versions, reading.columns
            shards = shard_pins(manifest)
            pinned = sum(info.rows for info in shards)
            if reading.rows is not None and reading.rows != pinned:  # first: the batches below can fill the report
                result.fail(Violation(f"{consumer} reads {reading.rows} rows, the shards the manifest lists hold "
                                      f"{pinned} packs: it reads other files, or filters rows"))
            _compare_batches(reading.batches, _batched(pinned_packs(directory, shards), batch_packs), max_packs,
                             result)
        except ConsumerFailed as failed:
            result.fail(Violation(f"{consumer} cannot read the artifact: {failed}"))
    report.seconds = time.perf_counter() - started
    if not report.ok:
        report.advice = advice(consumer, directory, manifest, columns)
    return report


class ConsumerFailed(Exception):
    """The consumer's own code failed on the artifact (loading, narrowing or collating it): that is the finding."""


def _consumer_side(consumer: str, directory: Path, batch_packs: int, stack: ExitStack) -> Reading:
    """The consumer's reading, its failures (and only its: a bug of this check is no finding) as `ConsumerFailed`."""
    def guarded(batches: Iterator[Seen]) -> Iterator[Seen]:
        try:
            yield from batches
        except Exception as exc:  # noqa: BLE001 - any failure of the consumer's own code is the finding
            raise ConsumerFailed(f"{type(exc).__name__}: {exc}") from exc

    try:
        reading = _RUNNERS[consumer](directory, batch_packs, stack)
    except Exception as exc:  # noqa: BLE001 - as above: load_dataset or the loader refusing the folder
        raise ConsumerFailed(f"{type(exc).__name__}: {exc}") from exc
    reading.batches = guarded(reading.batches)
    return reading


def _compare_batches(batches: Iterator[Seen], expected: Iterator[list[Pack]], max_packs: int | None,
                     result: CheckResult) -> None:
    """Each batch the consumer gives against the same packs read from the pinned shards; a consumer that gives
    fewer or more rows than they hold (a filter, another file) is named once."""
    packs_seen = 0
    for b, packs in enumerate(expected):
        seen = next(batches, None)
        where = f"batch {b} (packs {packs_seen}..{packs_seen + len(packs) - 1})"
        if seen is None:
            result.fail(Violation(f"{where}: the consumer has no more rows after {packs_seen} packs: it reads other "
                                  "files, or filters rows"))
            return
        result.checked += 1
        for problem in check_batch(seen, packs, where):
            result.fail(Violation(problem))
        packs_seen += len(packs)
        if max_packs is not None and packs_seen >= max_packs:
            return
    if next(batches, None) is not None:
        result.fail(Violation(f"the consumer has more rows than the {packs_seen} packs the manifest's shards hold: "
                              "it reads other files too"))
