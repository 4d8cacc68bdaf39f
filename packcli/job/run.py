"""The ``pack`` job: read -> render -> tokenize -> spill (units), plan packs, write shards (tasks).

    units.py   tokenize one unit of input records into its spill files (resumable)
    spill.py   the spill files and the reader that gathers examples from them
    select.py  exact duplicates, and a mixture's copies of each record
    plan.py    over-long examples, the pack plan and budgets, the shards' layout
    write.py   shard tasks, the seam table, rejects and the manifest

Streaming: records are processed in batches and their tokens appended to the units' spill files on
disk, so memory holds only a per-example index (a few dozen bytes an example), never the corpus.
Packing needs every length before it decides (global BFD), which the index provides; the plan is
made here, and each shard is then a task (`packcli.job.write`) that reads its examples from the spills
with `packcli.job.spill.SpillReader` (``pread``, no memory map, so the shuffled reads do not grow RSS
with the corpus). The engine runs both the units and the shard tasks.

Atomic and exclusive (`packcli.job.workspace`): one run per ``--out`` at a time (a lock beside it);
the artifact is written into a temporary folder inside the work folder and renamed into place only
after its manifest is written. A run killed at any moment leaves no ``--out`` or the previous one,
and the next run clears what it left.
"""

from __future__ import annotations

import functools
import hashlib
import json
import signal
import time
from dataclasses import dataclass, replace
from datetime import date, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from packcli.artifact import manifest as mf
from packcli.artifact.card import write_card
from packcli.chat import ChatTemplate, resolve_template
from packcli.choices import Dedupe
from packcli.config import OnError, PackConfig
from packcli.contract import IN_PACK_CODES
from packcli.engine import Engine, Workload
from packcli.engine.local import LocalEngine
from packcli.errors import InputError, Interrupted, refusal
from packcli.ingest import InputFile, Source, check_sources, describe_inputs, expand_inputs
from packcli.job.chunks import pinned_rule
from packcli.job.fates import apply_overlong, check_losses
from packcli.job.plan import ShardTask, lay_out_shards, plan_packs
from packcli.job.scratch import Scratch
from packcli.job.select import expand_chunks, expand_copies, mark_duplicates
from packcli.job.spill import SpillLayout, SpillReader
from packcli.job.units import ExampleIndex, UnitFacts, UnitIndex, UnitJob, UnitSpec, UnitSpool, plan_units, run_unit
from packcli.job.workspace import Workspace
from packcli.job.write import (
    HASH_DTYPE,
    ShardResult,
    build_manifest,
    losses_by_fate,
    provenance,
    write_records,
    write_shard_task,
)
from packcli.mix import Mixture, draw_copies, resolve_mix
from packcli.prepare import PrepareSpec, TokenizerRef, share_preparer
from packcli.progress import NO_PROGRESS, Progress
from packcli.tokenizer.load import LoadedTokenizer, auto_backend, cached_tokenizer, warm_tokenizer

if TYPE_CHECKING:
    from packcli.chat.engines import EngineChoice


@dataclass(frozen=True)
class PackSummary:
    """What a run produced, for the CLI summary and ``--json``."""

    out: Path
    manifest: dict  # as written (`packcli.artifact.manifest.Manifest.to_dict`): the summary's JSON
    stage_seconds: dict[str, float]
    units: int
    resumed_units: int  # units a previous run of the same code and configuration had finished
    lost: dict[str, dict[str, int]]  # `packcli.job.write.losses_by_fate`: what each over-long fate lost


def pack_corpus(config: PackConfig, progress: Progress = NO_PROGRESS, engine: Engine | None = None) -> PackSummary:
    """Run the whole ``pack`` job. See the module docstring for the streaming and atomicity design.

    Args:
        config: the validated configuration.
        progress: where to report progress (silent by default).
        engine: runs the tokenization units and the shard writing; the local engine by default.

    Raises:
        PackcliError: bad configuration, inputs, tokenizer or template; another run writing
            ``config.out``; a record under ``--on-error fail``; an unmet budget; a worker that died.
            Nothing is left at ``config.out`` in every case (a previous artifact there stays whole).
        SystemRefusal: the disk filled up or refused a write (nothing is left at ``config.out`` either).
        Interrupted: SIGINT or SIGTERM (a KeyboardInterrupt); its ``kept`` says what is on disk now.
    """
    config.check_files()  # every path, before a worker starts or a byte is read
    sources, mixture = resolve_sources(config)  # every table's columns, every --mix key
    if engine is None:
        engine = LocalEngine()
    space = Workspace(config.out, force=config.force, inputs=config.read_paths())
    try:
        with space:
            # The run's size first, so the engine starts only the workers it can use, and then they
            # load the tokenizer while this process does.
            files = describe_inputs(sources)
            specs = plan_units(files, config.lines_per_unit)
            work = Workload(units=len(specs), input_bytes=sum(f.size for f in files))
            backend, _ = auto_backend(config.tokenizer_backend, work.input_bytes)  # what every worker loads
            with engine.session(warm=partial(warm_tokenizer, config.tokenizer, backend.value,
                                             config.paranoid_tokenizer), work=work):
                summary = _pack(config, progress, engine, space, files, specs, sources, mixture, work.input_bytes)
            space.discard_work()
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: say what is on disk now
        raise Interrupted(getattr(exc, "signum", signal.SIGINT), space.kept()) from None
    except OSError as exc:  # a full disk is the machine's answer, not a bug: say where
        known = refusal(exc, f"`out` {config.out}")
        if known is None:
            raise
        raise known from exc
    return summary


def resolve_sources(config: PackConfig) -> tuple[list[Source], Mixture | None]:
    """The run's sources, checked against the column mapping and format, and its mixture (inputs
    numbered as `expand_inputs` lists them): everything about the inputs that can be wrong is found
    here, before a tokenizer is loaded or a file is hashed.

    Raises:
        InputError: a missing input, a column the mapping reads that a table lacks, a bad ``--mix``.
    """
    sources = expand_inputs(config.inputs)
    check_sources(sources, config.fields, config.input_format)
    if config.mix is None:
        return sources, None
    matched = [[s.path for s in expand_inputs([pattern])] for pattern in config.inputs]
    return sources, resolve_mix(config.mix, config.inputs, [s.path for s in sources], matched)


def _pack(config: PackConfig, progress: Progress, engine: Engine, space: Workspace, files: list[InputFile],
          specs: list[UnitSpec], sources: list[Source], mixture: Mixture | None,
          input_bytes: int) -> PackSummary:
    timings: dict[str, float] = {}
    tokenizer = cached_tokenizer(config.tokenizer, backend=config.tokenizer_backend, paranoid=config.paranoid_tokenizer,
                                 input_bytes=input_bytes)  # ``auto`` on a small input: tokenizers, saying why
    template = resolve_template(config.template, tokenizer, config.loss)
    engine_choice = _render_engine(config, template, tokenizer)
    if mixture is not None:  # the mixture numbers inputs as resolved; the manifest, as read
        position = {f.path: i for i, f in enumerate(files)}
        mixture = mixture.renumbered([position[s.path] for s in sources])
    asked, _ = auto_backend(config.tokenizer_backend, input_bytes)  # the key the warmed workers loaded it by
    spec = PrepareSpec(TokenizerRef.of(tokenizer, asked.value, paranoid=config.paranoid_tokenizer),
                       template_text=template.text, template_source=template.source,
                       template_date=config.template_date, loss=config.loss.value,
                       input_format=config.input_format.value, fields=tuple(sorted(config.fields.renames().items())),
                       keys=config.dedupe is Dedupe.exact, text_bos=config.text_bos.value,
                       text_eos=config.text_eos.value, allow_dropped=tuple(config.allowed_dropped()),
                       render_engine=engine_choice.engine)
    job = UnitJob(spec, batch_records=config.batch_records, fail_fast=config.on_error is OnError.fail,
                  work_dir=str(space.work),
                  config_hash=_tokenization_hash(tokenizer, template, config, engine_choice.engine))
    share_preparer(job, spec.build_preparer("pack", tokenizer))  # the driver is a worker too, its tokenizer loaded
    space.units_key = job.config_hash
    tmp = space.new_artifact_dir()
    scratch = Scratch(space.new_scratch_dir())
    try:
        with progress.running():
            progress.start("units", "tokenizing", total=len(specs))
            t0 = time.perf_counter()
            sent = (job, specs) if engine.shares_paths else (job.absolute(), [spec.absolute() for spec in specs])
            spool = UnitSpool(specs, scratch, keys=spec.keys)  # each unit's records' facts, as it finishes

            def finished(unit_spec: UnitSpec, unit: UnitIndex) -> None:
                spool.add(unit_spec, unit)
                progress.advance("units")

            try:
                engine.map(run_unit, *sent, finished, keep=False)  # the driver never holds every unit at once
                records = spool.merge(len(files))
            finally:
                spool.close()
            # Each stage below reads and writes whole file-backed columns; the pages a stage touched go back to
            # the kernel when it ends (`Scratch.release`), so the resident set is one stage's, not every column's.
            scratch.release()
            timings["tokenize_wall_s"] = time.perf_counter() - t0
            units: list[UnitFacts] = spool.facts  # type: ignore[assignment]  # every unit finished: merged
            for key in ("read_render_s", "tokenize_s"):
                timings[key] = sum(u.seconds.get(key, 0.0) for u in units)
            spilled = [u.tokens for u in units]
            tokenization, resumed = _tokenization_facts(tokenizer, units), sum(u.resumed for u in units)
            rendering = _rendering_facts(config, engine_choice, units)
            if not len(records.ids):
                raise InputError("no records found in the inputs (all files empty?)", "check the input paths")
            if config.dedupe is Dedupe.exact:
                mark_duplicates(records, files)
            layout = SpillLayout.of(space.work, [spec.name for spec in specs], spilled)
            with SpillReader(layout) as spill:  # here: over-long examples; the shards: the engine's tasks
                t0 = time.perf_counter()
                settings = config.settings(None if mixture is None else mixture.to_manifest())
                rule = pinned_rule(settings)
                fates = apply_overlong(records, spill, rule, config.overlong, scratch)
                check_losses(records, fates, files, config.max_reject_fraction)
                copies = None if mixture is None else draw_copies(
                    mixture, np.isin(fates.status, IN_PACK_CODES), records.file_index, config.seed)
                examples = expand_chunks(expand_copies(records, fates, copies, files, mixture, scratch))
                scratch.release()
                plan = plan_packs(examples.fates, settings, scratch)
                scratch.release()
                timings["pack_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                shards = lay_out_shards(plan, examples.fates, examples.index, rule.masks(examples.chunk),
                                        config.packs_per_shard, str(tmp), scratch)
                scratch.release()
                progress.start("write", "writing shards", total=len(shards.tasks))
                thash = scratch.zeros(len(examples.index.ids), HASH_DTYPE)
                infos: list[mf.ShardPin | None] = [None] * len(shards.tasks)

                def written(task: ShardTask, result: ShardResult) -> None:  # each shard's hashes go to the column
                    thash[shards.task_rows[task.index]], infos[task.index] = result.token_hashes, result.info
                    scratch.release()
                    progress.advance("write")

                engine.map(write_shard_task, layout, shards.tasks, written, keep=False)
                shards.tasks.clear()  # written: their arrays (four numbers a packed example) go before the seam table
                rejects = write_records(tmp, examples, shards, thash, spill, files, scratch)
                timings["write_s"] = time.perf_counter() - t0
            manifest = build_manifest(tmp, examples=examples, plan=plan, config=config, settings=settings,
                                      files=files, tokenizer=tokenizer, template=template,
                                      shards=infos, rejects=rejects)
            lost = losses_by_fate(fates.status, records.length, fates.used_len, fates.lost)
            manifest = replace(manifest, dataset_card=write_card(tmp, manifest))  # pinned: verify covers the card
            manifest = mf.finalize(manifest, {"tokenization": tokenization, "rendering": rendering,
                                              "provenance": provenance(config, files, template),
                                              "template_note": template.note,  # about the choice: unhashed
                                              "input_warnings": _warning_facts(records, files)})
            mf.write_manifest(manifest, tmp)
        space.publish(tmp)
    except BaseException:
        space.discard_artifact_dir(tmp)
        raise
    finally:
        share_preparer(job, None)
        space.discard_scratch_dir(scratch.folder)
    return PackSummary(out=config.out, manifest=manifest.to_dict(), stage_seconds=timings, units=len(specs),
                       resumed_units=resumed, lost=lost)


def _render_engine(config: PackConfig, template: ChatTemplate, tokenizer: LoadedTokenizer) -> EngineChoice:
    """The engine that renders this run's template (`packcli.chat.engines.choose_engine`): decided once, here,
    so every worker renders alike."""
    from packcli.chat.engines import choose_engine

    moment = datetime.combine(date.fromisoformat(config.template_date), datetime.min.time())
    return choose_engine(template.text, config.render_backend.value, moment=moment, bos_token=tokenizer.bos_token,
                         eos_token=tokenizer.eos_token)


def _rendering_facts(config: PackConfig, choice: EngineChoice, units: list[UnitFacts]) -> dict:
    """Which engine rendered the run, why, and what its cross-check compared (summed over units).

    Unhashed, as the tokenizer backend is: both engines give the same text and spans (minijinja only where
    that is shown, `packcli.chat.engines`), so the artifact's hashed bytes are the same under either.
    """
    counts = {key.removeprefix("render_"): sum(u.guard.get(key, 0) for u in units)
              for key in ("render_minijinja", "render_jinja2", "render_checked", "render_mismatches")}
    facts = {"asked": config.render_backend.value, "engine": choice.engine, "reason": choice.reason,
             "records": counts}
    if choice.version is not None:
        facts["minijinja_version"] = choice.version
    if counts["mismatches"]:
        facts["note"] = ("minijinja rendered a checked record otherwise than jinja2, so jinja2 rendered that record "
                         "and the rest of its process's records")
    return facts


def _tokenization_hash(tokenizer: LoadedTokenizer, template: ChatTemplate, config: PackConfig,
                       render_engine: str) -> str:
    """Everything that decides a unit's tokens: a re-run may reuse units only when this matches.

    The code is in it as the digest of packcli's own source (`code_digest`), not its version
    number: a version stays the same over many commits, and units left by older code must not be
    mixed into an artifact that newer code claims to have made. The backend is in it although both
    backends must give the same tokens: after a mismatch the advice is to re-run with the
    reference, and that re-run must not reuse the fast backend's units; so is the render engine.
    """
    key = [code_digest(), tokenizer.sha256, template.sha256, config.loss.value, config.input_format.value,
           config.on_error.value, config.lines_per_unit, tokenizer.backend_name, tokenizer.backend_version,
           config.template_date, tokenizer.bos_token, tokenizer.eos_token, config.fields.renames(),
           config.dedupe.value, config.text_bos.value, config.text_eos.value, config.allowed_dropped()]
    if render_engine != "jinja2":  # jinja2's runs keep the key they had, so their finished units stay reusable
        key.append(render_engine)
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


@functools.cache
def code_digest() -> str:
    """sha256 over packcli's own files (every module and template, by path), once per process."""
    return source_digest(Path(__file__).resolve().parent.parent)


def source_digest(root: Path) -> str:
    """sha256 over the ``.py`` and ``.jinja`` files under ``root``: their relative paths and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".jinja") and p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _tokenization_facts(tokenizer: LoadedTokenizer, units: list[UnitFacts]) -> dict:
    """Which backend encoded the run and what its exactness guard checked (summed over units).

    This goes to the manifest's unhashed part: the backend is a fact about the run, not the data
    (both backends give identical bytes, and the hash stays the same across them).
    """
    guard = {key: sum(u.guard.get(key, 0) for u in units) for key in tokenizer.guard_counts()}
    facts = {"backend": tokenizer.backend_name, "version": tokenizer.backend_version,
             "reason": tokenizer.backend_reason, "paranoid": tokenizer.paranoid, "guard": guard}
    if guard["offset_mismatches"]:
        facts["note"] = ("offsets differed from tokenizers on a checked example, so tokenizers encoded the rest "
                         "of that unit (and of its process)")
    return facts


def _warning_facts(index: ExampleIndex, files: list[InputFile]) -> dict:
    """Records used with a warning: read by precedence (ambiguous), or carrying fields the template never reads;
    and the table columns whose type cannot hold the JSON they came from (`packcli.ingest.columnar.type_warnings`).

    Unhashed, like the other run facts: they describe the input, and the seam table and counts already pin
    what was made of it.
    """
    from packcli.ingest import reader
    from packcli.ingest.columnar import type_warnings

    warnings = index.warnings
    first = warnings.first_ambiguous
    tables = {f.path: type_warnings(schema) for f in files if (schema := reader(f.kind).schema(f)) is not None}
    return {"ambiguous_records": warnings.ambiguous,
            "first_ambiguous": f"{files[first[0]].path}:{first[1]}" if first else None,
            "ignored_fields": warnings.ignored, "column_types": {path: lines for path, lines in tables.items() if lines}}

