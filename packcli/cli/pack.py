"""``packcli pack``: tokenize, mask and pack chat data into Parquet shards with a hashed manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from packcli.choices import (
    AddToken,
    BackendChoice,
    Dedupe,
    DroppableField,
    EngineName,
    Format,
    LossPolicy,
    OnError,
    Overlong,
    RenderBackend,
    Strategy,
)
from packcli.cli.options import (
    INPUTS,
    OUTPUT,
    PACKING,
    PERFORMANCE,
    CompletionField,
    ContentField,
    InputFormat,
    Json,
    Loss,
    MessagesField,
    PackCapacity,
    PackEngine,
    PackMaxDisplacement,
    PackMinDensity,
    PackSeed,
    PackSharedFs,
    PackSplitMinLast,
    PackSplitOverlap,
    PackTokenizerBackend,
    PackWorkers,
    PromptField,
    RayAddress,
    RoleField,
    Template,
    TemplateDate,
    TextBos,
    TextEos,
    TextField,
    Tokenizer,
)
from packcli.config import DEFAULT_MAX_REJECT_FRACTION
from packcli.errors import PackcliError


def default_inputs(inputs: list[str] | None, tokenizer: str | None) -> tuple[tuple[str, ...], str]:
    """The inputs and tokenizer given, or, with neither, the bundled demo corpus and tokenizer.

    The bundled tokenizer is a 2,816-token test tokenizer: packing a user's data with it would give
    tokens no model reads, so inputs without ``--tokenizer`` are a usage error, not a default.

    Raises:
        PackcliError: inputs without a tokenizer.
    """
    from packcli.bundled import DEFAULT_INPUTS, DEFAULT_TOKENIZER, bundled

    if inputs and not tokenizer:
        raise PackcliError("--tokenizer is required with input files (the bundled tokenizer is for the demo only)",
                           "pass -t DIR_OR_TOKENIZER_JSON, the tokenizer of the model you will train")
    if inputs:
        return tuple(inputs), tokenizer
    return tuple(bundled(p) for p in DEFAULT_INPUTS), tokenizer or bundled(DEFAULT_TOKENIZER)


def pack(
    inputs: Annotated[Optional[list[str]], typer.Argument(
        help="JSONL (.jsonl, .gz, .zst), JSON arrays (.json) or Parquet files, globs, datasets.save_to_disk "
             "directories, or hf:NAME[:CONFIG][:SPLIT] from the local Hugging Face cache. Default: the bundled demo "
             "corpus.",
        show_default=False)] = None,
    tokenizer: Tokenizer = None,
    input_format: InputFormat = Format.auto,
    messages_field: MessagesField = "messages",
    role_field: RoleField = "role",
    content_field: ContentField = "content",
    prompt_field: PromptField = "prompt",
    completion_field: CompletionField = "completion",
    text_field: TextField = "text",
    text_bos: TextBos = AddToken.auto,
    text_eos: TextEos = AddToken.auto,
    on_error: Annotated[OnError, typer.Option(
        help="skip: reject bad records (rejects.jsonl); fail: stop.", rich_help_panel=INPUTS)] = OnError.skip,
    dedupe: Annotated[Dedupe, typer.Option(
        help="exact: drop records identical to an earlier one (counted; status 'duplicate').",
        rich_help_panel=INPUTS)] = Dedupe.none,
    mix: Annotated[Optional[str], typer.Option(
        help="Weigh sources: proportions (a.jsonl=0.7,b.parquet=0.3) or repeats (a.jsonl=3x,b.parquet=0.5x); "
             "seeded by --seed.", show_default=False, rich_help_panel=INPUTS)] = None,
    allow_dropped_fields: Annotated[Optional[list[DroppableField]], typer.Option(
        help="Pack records whose template drops this field (tool_calls: the call turn is trained as the template "
             "renders it), counted in the summary and the manifest; without it such a record is a reject.",
        show_default=False, rich_help_panel=INPUTS)] = None,
    template: Template = "auto",
    template_date: TemplateDate = "2024-07-26",
    loss: Loss = LossPolicy.auto,
    capacity: PackCapacity = 4096,
    strategy: Annotated[Strategy, typer.Option(help="How examples are assigned to packs (see `packcli stats`).",
                                               rich_help_panel=PACKING)] = Strategy.window,
    window: Annotated[Optional[int], typer.Option(help="Examples per window for --strategy window.",
                                                  show_default=False, rich_help_panel=PACKING)] = None,
    seed: PackSeed = 0,
    shuffle: Annotated[bool, typer.Option(help="Shuffle examples before packing.", rich_help_panel=PACKING)] = True,
    shuffle_packs: Annotated[bool, typer.Option(help="Shuffle packs after packing.", rich_help_panel=PACKING)] = True,
    overlong: Annotated[Overlong, typer.Option(
        help="Examples longer than --capacity: drop them, keep their first --capacity tokens, or split them into "
        "chunks of at most --capacity tokens, each packed as its own segment (docs/contract.md, chunks).",
        rich_help_panel=PACKING)] = Overlong.drop,
    split_overlap: PackSplitOverlap = 0,
    split_min_last: PackSplitMinLast = 1,
    min_density: PackMinDensity = None,
    max_displacement: PackMaxDisplacement = None,
    max_reject_fraction: Annotated[float, typer.Option(
        help="Fail (write nothing) when more than this fraction of records is rejected or dropped as over-long: "
        "losing most records means a wrong template, format or capacity. A run that packs nothing always fails.",
        rich_help_panel=INPUTS)] = DEFAULT_MAX_REJECT_FRACTION,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (written atomically).",
                                      rich_help_panel=OUTPUT)] = Path("packed"),
    force: Annotated[bool, typer.Option(help="Replace an --out that is a packcli artifact (never a folder holding "
                                        "anything else).", rich_help_panel=OUTPUT)] = False,
    packs_per_shard: Annotated[int, typer.Option(help="Packs (rows) per Parquet shard.",
                                                 rich_help_panel=OUTPUT)] = 2048,
    json_out: Json = False,
    workers: PackWorkers = None,
    engine: PackEngine = EngineName.local,
    ray_address: RayAddress = None,
    shared_fs: PackSharedFs = False,
    unit_lines: Annotated[int, typer.Option(help="Input records (lines, rows) per unit of work (parallelism, resume); "
                                            "a JSONL unit also ends after about 8 MiB.",
                                            rich_help_panel=PERFORMANCE)] = 10_000,
    tokenizer_backend: PackTokenizerBackend = BackendChoice.auto,
    paranoid_tokenizer: Annotated[bool, typer.Option(
        help="Cross-check every example against tokenizers, not a sample.", rich_help_panel=PERFORMANCE)] = False,
    render_backend: Annotated[RenderBackend, typer.Option(
        help="auto: minijinja where it renders this template as jinja2's sandbox does and faster "
             f"({escape('packcli[render]')}), else jinja2. Same bytes either way.",
        rich_help_panel=PERFORMANCE)] = RenderBackend.auto,
) -> None:
    """Tokenize, mask and pack chat data into Parquet shards with a hashed manifest.

    Examples:

      packcli pack                     # the demo: bundled corpus -> ./packed

      packcli pack data/*.jsonl -t Qwen/Qwen3-8B -c 8192 -o out/

      packcli pack alpaca.json -t tok/ --template trl:qwen3_training

      packcli pack data.jsonl -t tok/ --strategy bfd --min-density 0.98 --json

      packcli pack a.jsonl b.parquet -t tok/ --mix a.jsonl=0.7,b.parquet=0.3

      packcli pack books.parquet -t tok/ -c 8192 --overlong split

      packcli pack /mnt/d/*.jsonl -t tok/ --engine ray --shared-fs -o /mnt/out
    """
    from packcli.checks import raise_all
    from packcli.cli import console
    from packcli.cli.output import render_pack_summary
    from packcli.config import PackConfig
    from packcli.engine import make_engine, worker_problems
    from packcli.job.run import pack_corpus

    paths, tok = default_inputs(inputs, tokenizer)
    problems = worker_problems(workers, engine, ray_address=ray_address, shared_fs=shared_fs)
    try:
        config = PackConfig(
            inputs=paths, tokenizer=tok, out=out, capacity=capacity, template=template, template_date=template_date,
            loss=loss, input_format=input_format, fields=dict(
                messages=messages_field, role=role_field, content=content_field, prompt=prompt_field,
                completion=completion_field, text=text_field), text_bos=text_bos, text_eos=text_eos, dedupe=dedupe,
            mix=mix, allow_dropped_fields=tuple(allow_dropped_fields or ()), strategy=strategy,
            window=window, seed=seed, shuffle=shuffle,
            shuffle_packs=shuffle_packs, overlong=overlong, split_overlap=split_overlap,
            split_min_last=split_min_last, on_error=on_error, min_density=min_density,
            max_displacement=max_displacement, max_reject_fraction=max_reject_fraction,
            packs_per_shard=packs_per_shard, force=force, lines_per_unit=unit_lines,
            tokenizer_backend=tokenizer_backend, paranoid_tokenizer=paranoid_tokenizer, render_backend=render_backend,
        )
    except PackcliError as exc:  # the values' problems and the engine's, at once
        raise_all([exc.message, *problems])
    raise_all(problems + config.file_problems())
    runner = make_engine(engine, workers=workers, address=ray_address, shared_fs=shared_fs, shared=f"--out {out}")
    summary = pack_corpus(config, progress=console.RichProgress(enabled=not json_out), engine=runner)
    render_pack_summary(summary, as_json=json_out)
